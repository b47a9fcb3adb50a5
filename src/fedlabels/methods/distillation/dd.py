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

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import ClientData
from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.method.blocks import broadcast
from fedlabels.method.message_config import own_count
from fedlabels.method.options import Interval, MethodOptions, option
from fedlabels.method.replies import received_probabilities
from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    SERVER_CHOOSING_U,
    Payload,
    ThreatModel,
)

SOFT_DTYPES = {"float16": np.float16, "float32": np.float32}


def soft_dtype_option() -> Any:
    """The ``soft_dtype`` option field (DD and FedMD send probabilities in it)."""
    return option("float16", "float type of the class probabilities sent (float16: 2 bytes "
                  "per class per example)", kind=str, choices=tuple(SOFT_DTYPES))


@dataclass(frozen=True)
class DDOptions(MethodOptions):
    distill_weight: float = option(
        1.0, "weight λ of the distillation term towards the averaged soft labels; 0 switches "
        "it off (local training)", kind=float, interval=Interval(0.0, math.inf, "left"))
    soft_dtype: str = soft_dtype_option()


def check_soft_clients(method: str, n_clients: int) -> None:
    """Soft-label methods average the soft labels of at least 2 clients."""
    if n_clients < 2:
        raise FedLabelsError(f"{method} needs at least 2 clients, got {n_clients}. It "
                             "averages the clients' soft labels, and one client's average is "
                             "its own; use --clients 2 or more (Python: clients=2), or "
                             "--method local for one client alone.")


def check_soft_learners(method: str, learners: list[Any]) -> None:
    """Soft-label methods need ``distill_steps`` and ``predict_proba`` (an mlp)."""
    bad = sorted({type(ln).__name__ for ln in learners
                  if not (callable(getattr(ln, "distill_steps", None))
                          and callable(getattr(ln, "predict_proba", None)))})
    if bad:
        from fedlabels.learners.text_input import accepts_text

        text = any(accepts_text(ln) for ln in learners)
        which = "'minilm' or 'hf(model_dir=...)'" if text else "the torch 'mlp'"
        use = "minilm" if text else "mlp"
        raise FedLabelsError(
            f"{method} trains every client towards averaged soft labels with a distillation "
            f"loss, which needs a model trained by gradient steps on soft targets (for this "
            f"data: {which}); got {', '.join(bad)}. Use --model {use}, or --method fedct for "
            "models that can only be fitted on hard labels.")


class SoftLabelMethod(Method):
    """A method whose clients distil towards averaged soft labels (DD, FedMD, DS-FL): at
    least 2 clients, checked before any data loads, and models trained by gradient steps on
    soft targets, checked before all are built."""

    #: the method's name in its refusals (``DS-FL``)
    shown_name: ClassVar[str]

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        check_soft_clients(self.shown_name, n_clients)

    def check_models(self, learners: list[Any]) -> None:
        check_soft_learners(self.shown_name, learners)

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        self.check_clients(n_clients, settings)
        self.check_models(learners)


def average_soft(replies: dict[int, Message], key: str = "soft") -> np.ndarray:
    """Mean of the clients' probability matrices, rows renormalised to sum to 1."""
    stacked = np.stack([np.asarray(replies[c].arrays[key], dtype=np.float64)
                        for c in sorted(replies)])
    avg = stacked.mean(axis=0)
    return avg / np.clip(avg.sum(axis=1, keepdims=True), 1e-12, None)


class DDClient(ClientRole):
    """Trains on D_i plus a distillation term towards the averaged soft labels on U."""

    state_attrs: ClassVar[tuple[str, ...]] = ("targets",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        opts = self.settings.options_as(DDOptions)
        self.targets: np.ndarray | None = None  # the last averaged soft labels received
        self.weight = opts.distill_weight
        self.dtype = SOFT_DTYPES[opts.soft_dtype]
        self.handlers["dd.train"] = self.train

    def train(self, message: Message) -> Message:
        if "soft" in message.arrays:
            self.targets = received_probabilities(message, "soft", len(self.public),
                                                  self.settings.n_classes, self.cid)
        steps = own_count(message.config, "steps", self.cid, self.settings.period)
        if self.targets is None:
            self.train_on(self.data.X, self.data.y, steps)
        else:
            self.learner.distill_steps(self.X_public, self.targets, steps, X=self.data.X,
                                       y=self.data.y, weight=self.weight)
            self.fitted = True
        probs = self.model().predict_proba(self.X_public).astype(self.dtype)
        return Message("dd.soft", arrays={"soft": probs})


class DDServer(ServerRole):
    """Averages the clients' soft labels on U and sends the average back."""

    state_attrs: ClassVar[tuple[str, ...]] = ("average",)

    def __init__(self, settings: Settings, truth_public: np.ndarray | None = None) -> None:
        self.settings = settings
        self.options = settings.options_as(DDOptions)
        self.dtype = SOFT_DTYPES[self.options.soft_dtype]
        self.average: np.ndarray | None = None
        self.truth_public = truth_public

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        """Soft labels are probability rows (scores of 1e4, negative ones or NaN from one
        client took over or destroyed the average every client trains on)."""
        from fedlabels.method.replies import check_probabilities

        super().check_reply(cid, request, reply)
        if request.kind == "dd.train":
            check_probabilities(reply, "soft", None, self.settings.n_classes)

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        arrays = {} if self.average is None else {"soft": self.average.astype(self.dtype)}
        message = Message("dd.train", arrays=arrays,
                          config={"round": rnd, "steps": self.settings.period})
        self.average = average_soft(broadcast(grid, message, rnd))
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
                                "distill_weight": self.options.distill_weight,
                                "loss": "soft cross-entropy to the averaged probabilities"}}


class DistributedDistillation(SoftLabelMethod):
    shown_name = "DD"
    name = "dd"
    # distillation on soft labels needs gradient steps
    capabilities = Capabilities(default_model="mlp")
    description = ("DD: clients share soft labels (float16 probabilities) on U and distil "
                   "towards their average")
    options_class = DDOptions
    threat_model = ThreatModel(
        view="soft-labels-on-queries",
        adversary=SERVER_CHOOSING_U,
        sees="the client's class probabilities on all of U every round",
        guarantee="none",
        payloads=(Payload("dd.soft", "soft", "soft-labels", rows="public"),
                  *EVALUATION_PAYLOADS))

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return DDServer(ctx.settings, ctx.truth_public)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return DDClient(cid, data, learner, ctx.settings, X_public, X_test, y_test)
