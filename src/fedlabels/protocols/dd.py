"""Distributed distillation (DD; Bistritz, Mann & Bambos, NeurIPS 2020), server-averaged.

Per round (one exchange):

* the server sends the average soft labels on U of the previous round (none in round 1);
* client i takes b steps, each on a private minibatch (cross-entropy) plus a minibatch of U
  towards the averaged soft labels (soft cross-entropy, weighted by ``distill_weight`` λ),
  with :meth:`~fedlabels.learners.torch_mlp.TorchMLPClassifier.distill_steps`;
* it then sends its class probabilities on U (``soft_dtype``, float16 by default: 2 bytes
  per class per example);
* the server averages them (in float64, renormalised) into the next soft targets.

Unlike the published FedCT code (whose "DD" logs the averaged soft labels and never trains on
them, docs/reference-implementations.md §A2.5), the distillation term here is a real loss.
The average includes the client's own prediction (a server-side average of all m clients;
Bistritz et al. average neighbours on a graph). DD needs a model trained by gradient steps on
soft targets: the torch ``mlp``. scikit-learn models are rejected (an argmax of the average
would be FedCT with a different vote, not distillation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.protocols.base import (
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)

SOFT_DTYPES = {"float16": np.float16, "float32": np.float32}


def soft_dtype(settings: Settings) -> Any:
    """The float type soft labels travel in (``soft_dtype`` option, default float16)."""
    name = str(settings.extra.get("soft_dtype", "float16"))
    if name not in SOFT_DTYPES:
        raise FedLabelsError(f"soft_dtype must be one of {', '.join(SOFT_DTYPES)}, got "
                             f"{name!r}.")
    return SOFT_DTYPES[name]


def check_soft_learners(method: str, learners: list[Any]) -> None:
    """Soft-label methods need ``distill_steps`` and ``predict_proba`` (the torch MLP)."""
    bad = sorted({type(ln).__name__ for ln in learners
                  if not (callable(getattr(ln, "distill_steps", None))
                          and callable(getattr(ln, "predict_proba", None)))})
    if bad:
        raise FedLabelsError(
            f"{method} trains every client towards averaged soft labels with a distillation "
            f"loss, which needs a model trained by gradient steps on soft targets (the torch "
            f"'mlp'); got {', '.join(bad)}. Use --model mlp, or --method fedct for models "
            "that can only be fitted on hard labels.")


def average_soft(replies: dict[int, Message], key: str = "soft") -> np.ndarray:
    """Mean of the clients' probability matrices, rows renormalised to sum to 1."""
    stacked = np.stack([np.asarray(replies[c].arrays[key], dtype=np.float64)
                        for c in sorted(replies)])
    avg = stacked.mean(axis=0)
    return avg / np.clip(avg.sum(axis=1, keepdims=True), 1e-12, None)


def distill_weight(settings: Settings) -> float:
    w = settings.extra.get("distill_weight", 1.0)
    if isinstance(w, bool) or not isinstance(w, int | float) or not np.isfinite(w) or w < 0:
        raise FedLabelsError(f"distill_weight (λ) must be a finite number >= 0, got {w!r}; "
                             "0 switches the distillation term off (local training).")
    return float(w)


class DDClient(ClientRole):
    """Trains on D_i plus a distillation term towards the averaged soft labels on U."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.targets: np.ndarray | None = None
        self.weight = distill_weight(self.settings)
        self.dtype = soft_dtype(self.settings)
        self.handlers["dd.train"] = self.train

    def train(self, message: Message) -> Message:
        if "soft" in message.arrays:
            self.targets = np.asarray(message.arrays["soft"], dtype=np.float32)
        steps = int(message.config["steps"])
        if self.targets is None:
            self.train_on(self.data.X, self.data.y, steps)
        else:
            self.learner.distill_steps(self.X_public, self.targets, steps, X=self.data.X,
                                       y=self.data.y, weight=self.weight)
            self.fitted = True
        probs = self.learner.predict_proba(self.X_public).astype(self.dtype)
        return Message("dd.soft", arrays={"soft": probs})


class DDServer(ServerRole):
    """Averages the clients' soft labels on U and sends the average back."""

    def __init__(self, settings: Settings, truth_public: np.ndarray | None = None) -> None:
        self.settings = settings
        self.dtype = soft_dtype(settings)
        self.average: np.ndarray | None = None
        self.truth_public = truth_public

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        arrays = {} if self.average is None else {"soft": self.average.astype(self.dtype)}
        message = Message("dd.train", arrays=arrays,
                          config={"round": rnd, "steps": self.settings.period})
        replies = grid.exchange({cid: message for cid in grid.client_ids}, rnd)
        self.average = average_soft(replies)
        p = np.clip(self.average, 1e-12, 1.0)
        metrics = {"soft_mean_entropy": float(-(p * np.log(p)).sum(axis=1).mean())}
        if self.truth_public is not None:  # diagnostic only: U's labels are never used
            metrics["consensus_accuracy"] = float(np.mean(self.average.argmax(axis=1)
                                                          == self.truth_public))
        return metrics

    def result_extra(self) -> dict[str, Any]:
        return {"soft_labels": {"dtype": np.dtype(self.dtype).name,
                                "bytes_per_example": np.dtype(self.dtype).itemsize
                                * self.settings.n_classes,
                                "distill_weight": distill_weight(self.settings),
                                "loss": "soft cross-entropy to the averaged probabilities"}}


class DistributedDistillation(Method):
    name = "dd"
    description = ("DD: clients share soft labels (float16 probabilities) on U and distil "
                   "towards their average")

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        if n_clients < 2:
            raise FedLabelsError(f"DD needs at least 2 clients, got {n_clients}.")
        check_soft_learners("DD", learners)
        distill_weight(settings)
        soft_dtype(settings)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return DDServer(ctx.settings, ctx.truth_public)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return DDClient(cid, data, learner, ctx.settings, X_public, X_test, y_test)
