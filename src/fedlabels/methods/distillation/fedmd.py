"""FedMD (Li & Wang, 2019): heterogeneous federated learning via model distillation.

FedMD assumes a **public labelled** dataset D₀. Our federations have an unlabelled public set
U whose true labels only the simulator knows; FedMD here takes the first ``public_labeled``
examples of U (U is a random sample) *with their labels* as D₀. This gives FedMD strictly
more information than FedCT / DD / PATE (a labelled public set) — the reason the FedCT paper
treats it as a differently-set-up baseline. The server sends D₀'s labels once (bit-packed,
counted as protocol traffic); all roles already hold U's features.

Round 1 (transfer learning, then the first communication):
  each client trains ``transfer_steps`` steps on D₀, then ``transfer_steps`` on its private
  data, and sends its class probabilities on a public subset d₁ ⊂ U.
Round t > 1 (one exchange):
  **aggregate** — the server averages the probabilities on d_{t-1} (the consensus) and sends
  it with the seed of the next subset; **digest** — each client takes ``digest_steps`` steps
  towards the consensus on d_{t-1} (soft cross-entropy); **revisit** — b (``period``) steps on
  its private data; **communicate** — its probabilities on d_t.

Subsets of ``public_subset`` examples are drawn from U by a seed the server sends, so only
the seed travels. FedMD's code uses logits with an L1 loss; we average probabilities and use
the soft cross-entropy (the same distillation loss as DD). Needs the torch ``mlp``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message, pack_labels
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
from fedlabels.method.blocks import decode_labels
from fedlabels.method.message_config import SEED_MAX, own_count, own_value, whole
from fedlabels.method.options import STEPS, Interval, MethodOptions, option
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


def _count_option(default: str, help: str, interval: Interval | None = None) -> Any:
    return option(None, f"{help}; none: {default}", kind=int,
                  interval=interval or Interval(1, None), nullable=True)


@dataclass(frozen=True)
class FedMDOptions(MethodOptions):
    public_labeled: int | None = _count_option(
        "min(1000, max(1, |U| // 5))", "|D₀|: the first public_labeled examples of U, with "
        "their labels, are FedMD's labelled public set (at most |U|)")
    public_subset: int | None = _count_option(
        "min(5000, |U|)", "size of the public subset d_t the clients score each round (at "
        "most |U|)")
    transfer_steps: int | None = _count_option(
        "5 x period", "transfer-learning steps on D₀, then as many on the private data "
        "(round 1)", STEPS)
    digest_steps: int | None = _count_option("period", "steps towards the consensus on d_{t-1}",
                                             STEPS)
    soft_dtype: str = soft_dtype_option()


def subset_indices(seed: int, n_public: int, size: int) -> np.ndarray:
    """The public subset d_t drawn (sorted, without replacement) from a shared seed."""
    return np.sort(np.random.default_rng(seed).choice(n_public, size=size, replace=False))


def fedmd_steps(settings: Settings) -> tuple[int, int]:
    """(transfer steps, digest steps): the options', else 5 rounds' and one round's."""
    opts = settings.options_as(FedMDOptions)
    return (5 * settings.period if opts.transfer_steps is None else opts.transfer_steps,
            settings.period if opts.digest_steps is None else opts.digest_steps)


def fedmd_sizes(options: FedMDOptions, n_public: int) -> tuple[int, int]:
    """(|D₀|, |d_t|) from the options (or their defaults), checked against |U|."""
    n_lab = (options.public_labeled if options.public_labeled is not None
             else min(1000, max(1, n_public // 5)))
    n_sub = options.public_subset if options.public_subset is not None else min(5000, n_public)
    if n_lab > n_public:
        raise FedLabelsError(f"public_labeled = {n_lab} exceeds |U| = {n_public}: the labelled "
                             "public set is a slice of U. Use a smaller --opt public_labeled.")
    if n_sub > n_public:
        raise FedLabelsError(f"public_subset = {n_sub} exceeds |U| = {n_public}. Use a smaller "
                             "--opt public_subset.")
    return n_lab, n_sub


class FedMDClient(ClientRole):
    """Transfer learning (in the first round it takes part in), then digest / revisit /
    communicate every round."""

    state_attrs: ClassVar[tuple[str, ...]] = ("transferred",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.transferred = False  # transfer learning on D₀ done
        self.dtype = SOFT_DTYPES[self.settings.options_as(FedMDOptions).soft_dtype]
        self.handlers["fedmd.train"] = self.train

    def train(self, message: Message) -> Message:
        cfg, U = message.config, self.X_public
        if U is None:
            raise FedLabelsError(f"client {self.cid}: FedMD needs the public set U.")
        n_public = len(U)
        # the steps of this client's own options, as the server computes them
        transfer_steps, digest = fedmd_steps(self.settings)
        # |D₀| and |d_t| of this client's own options: a server asking for all of U had
        # scores on more rows released than the plan
        own_labeled, own_subset = fedmd_sizes(self.settings.options_as(FedMDOptions),
                                              n_public)
        steps = own_count(cfg, "steps", self.cid, self.settings.period)
        if "public_labels" in message.arrays and not self.transferred:
            # transfer learning on D₀, then private data
            n_lab = int(own_value(cfg, "n_labeled", self.cid, own_labeled))
            y0 = decode_labels(message.arrays, "public_labels", n_lab,
                               self.settings.n_classes)
            transfer = own_count(cfg, "transfer_steps", self.cid, transfer_steps)
            self.train_on(U[:n_lab], y0, transfer)
            self.train_on(self.data.X, self.data.y, transfer)
            self.transferred = True
        if "consensus" in message.arrays:  # digest, then revisit
            target = received_probabilities(message, "consensus", own_subset,
                                            self.settings.n_classes, self.cid)
            # d_{t-1} from the seed it was drawn from: a client that missed round t-1
            # (partial participation, a dropout) digests the consensus too
            previous = subset_indices(whole(cfg, "consensus_seed", self.cid, 0, SEED_MAX),
                                      n_public, len(target))
            self.learner.distill_steps(U[previous], target,
                                       own_count(cfg, "digest_steps", self.cid, digest))
            self.train_on(self.data.X, self.data.y, steps)
        subset = subset_indices(whole(cfg, "subset_seed", self.cid, 0, SEED_MAX), n_public,
                                int(own_value(cfg, "subset_size", self.cid, own_subset)))
        probs = self.model().predict_proba(U[subset]).astype(self.dtype)
        return Message("fedmd.scores", arrays={"scores": probs})


class FedMDServer(ServerRole):
    state_attrs: ClassVar[tuple[str, ...]] = ("rng", "consensus", "consensus_seed",
                                              "transferred")

    def __init__(self, settings: Settings, n_public: int, truth_public: np.ndarray,
                 seed: int) -> None:
        opts = settings.options_as(FedMDOptions)
        self.settings = settings
        self.n_labeled, self.subset_size = fedmd_sizes(opts, n_public)
        self.transfer_steps, self.digest_steps = fedmd_steps(settings)
        self.truth_public = truth_public
        self.n_public = n_public
        self.dtype = SOFT_DTYPES[opts.soft_dtype]
        self.rng = np.random.default_rng(seed)
        self.consensus: np.ndarray | None = None
        self.consensus_seed: int | None = None  # the seed of the consensus' subset d_{t-1}
        # the clients that replied after transfer learning: D₀'s labels go to the others
        # in the first round they take part in (all of them in round 1 with every client)
        self.transferred = np.zeros(0, dtype=np.int64)

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        """Soft labels on the round's subset of U are probability rows (scores of 1e4,
        negative ones or NaN from one client took over or destroyed the aggregate)."""
        super().check_reply(cid, request, reply)
        check_subset_soft(request, reply, "fedmd.train", "scores", self.settings.n_classes)

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        next_seed = int(self.rng.integers(0, 2**31 - 1))
        config: dict[str, Any] = {"round": rnd, "steps": self.settings.period,
                                  "subset_seed": next_seed, "subset_size": self.subset_size}
        arrays: dict[str, np.ndarray] = {}
        if self.consensus is not None:
            arrays["consensus"] = self.consensus.astype(self.dtype)
            config.update(digest_steps=self.digest_steps, consensus_seed=self.consensus_seed)
        plain = Message("fedmd.train", arrays=arrays, config=config)
        first = Message("fedmd.train", arrays={**arrays, "public_labels": pack_labels(
            self.truth_public[: self.n_labeled], self.settings.n_classes)},
            config={**config, "n_labeled": self.n_labeled,
                    "transfer_steps": self.transfer_steps})
        done = set(self.transferred.tolist())
        replies = grid.exchange({cid: plain if cid in done else first
                                 for cid in grid.client_ids}, rnd)
        self.transferred = np.union1d(self.transferred,
                                      np.asarray(sorted(replies), dtype=np.int64))
        self.consensus = average_soft(replies, "scores")
        self.consensus_seed = next_seed
        idx = subset_indices(next_seed, self.n_public, self.subset_size)
        return {"consensus_accuracy": float(np.mean(self.consensus.argmax(axis=1)
                                                    == self.truth_public[idx]))}

    def result_extra(self) -> dict[str, Any]:
        return {"fedmd": {"public_labeled": self.n_labeled, "public_subset": self.subset_size,
                          "transfer_steps": self.transfer_steps,
                          "digest_steps": self.digest_steps,
                          "scores_dtype": np.dtype(self.dtype).name,
                          "labelled_public_set": "the first public_labeled examples of U with "
                                                 "their true labels (FedMD's D0)"}}


class FedMD(SoftLabelMethod):
    shown_name = "FedMD"
    name = "fedmd"
    # distillation on soft labels needs gradient steps
    capabilities = Capabilities(default_model="mlp")
    description = ("FedMD: transfer learning on a labelled public slice of U, then "
                   "communicate / aggregate / digest / revisit with soft scores")
    options_class = FedMDOptions
    public_labels_note = ("FedMD's transfer learning takes the true labels of the first "
                          "public_labeled points of U (its D0)")
    threat_model = ThreatModel(
        view="soft-labels-on-queries",
        adversary=SERVER_CHOOSING_U,
        sees="the client's class probabilities on a seeded subset d_t of U every round",
        guarantee="none",
        payloads=(Payload("fedmd.scores", "scores", "soft-labels", rows="subset"),
                  *EVALUATION_PAYLOADS))

    def sized_for(self, options: MethodOptions, n_public: int) -> MethodOptions:
        """``options`` with |D₀| and |d_t| fixed from a public set of ``n_public`` points.

        The audit calls this with the ordinary |U| before it appends its query set to U, so
        an audited run labels the same first |D₀| points of the ordinary U (never a forged
        one) and scores subsets of the same size as a plain run.
        """
        if not isinstance(options, FedMDOptions):
            raise FedLabelsError(f"expected FedMDOptions, got {type(options).__name__}.")
        n_lab, n_sub = fedmd_sizes(options, n_public)
        return replace(options, public_labeled=n_lab, public_subset=n_sub)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        if ctx.truth_public is None:
            raise FedLabelsError("FedMD needs a labelled public set; this federation has no "
                                 "labels for U (a public set of your own, public, has none).")
        return FedMDServer(ctx.settings, n_public, np.asarray(ctx.truth_public),
                           ctx.server_seed)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FedMDClient(cid, data, learner, ctx.settings, X_public, X_test, y_test)
