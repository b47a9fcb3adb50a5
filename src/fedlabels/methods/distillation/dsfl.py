"""DS-FL (Itahara et al., IEEE TMC 2021): distillation-based semi-supervised FL with ERA.

Clients share **soft labels** (class probabilities) on an unlabelled open dataset — here the
public set U — instead of parameters. Per round (one exchange):

* the server sends the aggregated soft labels of the previous round (none in round 1) with
  the seed of the open subset they are about, and the seed of this round's subset;
* client i **distils** towards them (``distill_steps`` steps of soft cross-entropy on that
  subset), then takes b (``period``) steps on its private data, then sends its class
  probabilities on this round's subset (``soft_dtype``, float16 by default: 2 bytes per
  class per example, against FedCT's ceil(log2 C) bits per example);
* the server aggregates them by **entropy reduction averaging** (ERA, the paper's Eq. 9):
  the mean of the clients' probability vectors, sharpened by a softmax with temperature T,
  ``softmax(mean_k p_k / T)``; T < 1 lowers the aggregate's entropy (the paper uses 0.1),
  which is what makes DS-FL robust to non-IID clients. ``aggregation=mean`` is the paper's
  simple-averaging (SA) baseline.

Open subsets of ``public_subset`` points are drawn from U by a seed the server sends (only
the seed travels); by default the whole of U each round. The server sends the seed of the
subset an aggregate is about with it, so a client that skipped rounds (partial
participation) distils on the right points. DS-FL's optional server-side global model is not
built: every client is evaluated on its own model. Needs the torch ``mlp``.
"""

from __future__ import annotations

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
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.method.blocks import broadcast
from fedlabels.method.message_config import SEED_MAX, own_count, own_value, whole
from fedlabels.method.options import POSITIVE, STEPS, Interval, MethodOptions, option
from fedlabels.method.replies import check_subset_soft, received_probabilities
from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    SERVER_CHOOSING_U,
    Payload,
    ThreatModel,
)
from fedlabels.methods.distillation.dd import (
    SOFT_DTYPES,
    SoftLabelMethod,
    average_soft,
    soft_dtype_option,
)
from fedlabels.methods.distillation.fedmd import subset_indices


@dataclass(frozen=True)
class DSFLOptions(MethodOptions):
    aggregation: str = option(
        "era", "how the server combines the soft labels: era (entropy reduction averaging: "
        "softmax of the mean probabilities divided by temperature) or mean (the paper's "
        "simple averaging, SA)", kind=str, choices=("era", "mean"))
    temperature: float = option(
        0.1, "ERA's softmax temperature T (< 1 sharpens the averaged soft labels; the "
        "paper's 0.1)", kind=float, interval=POSITIVE)
    public_subset: int | None = option(
        None, "size of the open subset of U scored each round (drawn by a seed the server "
        "sends; at most |U|); none: all of U", kind=int, interval=Interval(1, None),
        nullable=True)
    distill_steps: int | None = option(
        None, "distillation steps towards the aggregated soft labels; none: period",
        kind=int, interval=STEPS, nullable=True)
    soft_dtype: str = soft_dtype_option()

    def check(self) -> None:
        if self.aggregation == "mean" and self.temperature != 0.1:
            raise FedLabelsError("temperature applies only with aggregation era (ERA); "
                                 "aggregation mean averages without sharpening.")


def tempered_softmax(z: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(z / T)`` per row, in float64 (max-shifted)."""
    z = np.asarray(z, dtype=np.float64) / temperature
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def era(mean_probs: np.ndarray, temperature: float) -> np.ndarray:
    """Entropy reduction averaging of mean probabilities: ``softmax(mean / T)`` per row."""
    return tempered_softmax(mean_probs, temperature)


def mean_entropy(probs: np.ndarray) -> float:
    """Mean Shannon entropy (nats) of the rows of a probability matrix."""
    p = np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1.0)
    return float(-(p * np.log(p)).sum(axis=1).mean())


class DSFLClient(ClientRole):
    """Distils towards the aggregate it is sent, trains on D_i, scores the open subset."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dtype = SOFT_DTYPES[self.settings.options_as(DSFLOptions).soft_dtype]
        self.handlers["dsfl.train"] = self.train

    def train(self, message: Message) -> Message:
        cfg, U = message.config, self.public
        opts = self.settings.options_as(DSFLOptions)
        own_distill = self.settings.period if opts.distill_steps is None else opts.distill_steps
        # the open subset's size is the client's own (public_subset): a server asking for
        # all of U had soft labels on more rows released than the plan
        own_size = len(U) if opts.public_subset is None else opts.public_subset
        if "soft" in message.arrays:  # distil on the subset the aggregate is about
            rows = subset_indices(whole(cfg, "soft_seed", self.cid, 0, SEED_MAX), len(U),
                                  int(own_value(cfg, "soft_size", self.cid, own_size)))
            target = received_probabilities(message, "soft", len(rows),
                                            self.settings.n_classes, self.cid)
            self.learner.distill_steps(U[rows], target,
                                       own_count(cfg, "distill_steps", self.cid, own_distill))
        self.train_on(self.data.X, self.data.y,
                      own_count(cfg, "steps", self.cid, self.settings.period))
        rows = subset_indices(whole(cfg, "subset_seed", self.cid, 0, SEED_MAX), len(U),
                              int(own_value(cfg, "subset_size", self.cid, own_size)))
        probs = self.model().predict_proba(U[rows]).astype(self.dtype)
        return Message("dsfl.soft", arrays={"soft": probs})


class DSFLServer(ServerRole):
    """Draws the open subsets, aggregates the soft labels with ERA (or SA)."""

    state_attrs: ClassVar[tuple[str, ...]] = ("rng", "aggregate", "aggregate_seed")

    def __init__(self, settings: Settings, n_public: int, truth_public: np.ndarray | None,
                 seed: int) -> None:
        opts = settings.options_as(DSFLOptions)
        size = n_public if opts.public_subset is None else opts.public_subset
        if size > n_public:
            raise FedLabelsError(f"public_subset = {size} exceeds |U| = {n_public}. Use a "
                                 "smaller --opt public_subset.")
        self.settings, self.options, self.n_public, self.size = settings, opts, n_public, size
        self.distill = settings.period if opts.distill_steps is None else opts.distill_steps
        self.dtype = SOFT_DTYPES[opts.soft_dtype]
        self.truth_public = truth_public
        self.rng = np.random.default_rng(seed)
        self.aggregate: np.ndarray | None = None
        self.aggregate_seed = -1

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        """Soft labels on the round's subset of U are probability rows (scores of 1e4,
        negative ones or NaN from one client took over or destroyed the aggregate)."""
        super().check_reply(cid, request, reply)
        check_subset_soft(request, reply, "dsfl.train", "soft", self.settings.n_classes)

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        seed = int(self.rng.integers(0, 2**31 - 1))
        config: dict[str, Any] = {"round": rnd, "steps": self.settings.period,
                                  "subset_seed": seed, "subset_size": self.size}
        arrays: dict[str, np.ndarray] = {}
        if self.aggregate is not None:
            arrays["soft"] = self.aggregate.astype(self.dtype)
            config.update(soft_seed=self.aggregate_seed, soft_size=self.size,
                          distill_steps=self.distill)
        replies = broadcast(grid, Message("dsfl.train", arrays=arrays, config=config), rnd)
        mean = average_soft(replies)
        self.aggregate = (era(mean, self.options.temperature)
                          if self.options.aggregation == "era" else mean)
        self.aggregate_seed = seed
        metrics = {"soft_mean_entropy": mean_entropy(mean),
                   "aggregate_mean_entropy": mean_entropy(self.aggregate)}
        if self.truth_public is not None:  # diagnostic only: U's labels are never used
            idx = subset_indices(seed, self.n_public, self.size)
            metrics["consensus_accuracy"] = float(np.mean(self.aggregate.argmax(axis=1)
                                                          == self.truth_public[idx]))
        return metrics

    def result_extra(self) -> dict[str, Any]:
        item = np.dtype(self.dtype).itemsize
        return {"soft_labels": {
            "aggregation": self.options.aggregation,
            "temperature": (self.options.temperature if self.options.aggregation == "era"
                            else None),
            "public_subset": self.size, "distill_steps": self.distill,
            "dtype": np.dtype(self.dtype).name,
            "bytes_per_example": item * self.settings.n_classes,
            "encoding": f"{np.dtype(self.dtype).name} probabilities, C = "
                        f"{self.settings.n_classes} per example, row-major, uncompressed",
            "loss": "soft cross-entropy to the ERA aggregate, then private steps"}}


class DSFL(SoftLabelMethod):
    shown_name = "DS-FL"
    name = "ds-fl"
    # distillation on soft labels needs gradient steps
    capabilities = Capabilities(default_model="mlp")
    description = ("DS-FL: clients share soft labels on an open subset of U; the server "
                   "sharpens their average by entropy reduction averaging (ERA)")
    options_class = DSFLOptions
    threat_model = ThreatModel(
        view="soft-labels-on-queries",
        adversary=SERVER_CHOOSING_U,
        sees="the client's class probabilities on a seeded open subset of U (all of U by "
             "default) every round",
        guarantee="none",
        payloads=(Payload("dsfl.soft", "soft", "soft-labels", rows="subset"),
                  *EVALUATION_PAYLOADS))

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return DSFLServer(ctx.settings, n_public, ctx.truth_public, ctx.server_seed)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return DSFLClient(cid, data, learner, ctx.settings, X_public, X_test, y_test)
