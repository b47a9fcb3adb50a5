"""FedCT: federated co-training (Abourayya et al., AAAI 2025, Algorithm 1).

Clients share only hard labels on the public unlabeled set U:

* line 3 — client i updates its model on D_i ∪ P (``FedCTClient.train``);
* lines 4-6 — every b local steps it sends L_t^i = h_t^i(U), bit-packed at ceil(log2 C) bits
  per label;
* lines 10-12 — the server forms the consensus L_t (majority vote, or a qualified majority
  with quorum tau that abstains below the quorum) and sends it back;
* line 7 — the client sets P <- (U, L_t), leaving out abstained examples.

The consensus of round t travels with the next round's training message, so each round is
one exchange. Torch learners take b steps of (private minibatch + pseudo-labelled minibatch)
per round; scikit-learn learners are refit from scratch on D_i ∪ P once per round.

Beyond the paper: the pseudo-labels' loss weights (``pseudo_weight``,
``pseudo_warmup``, ``vote_power``, ``soft_targets``; :mod:`fedlabels.methods.fedct.schedule`), a
class-balanced vote (``balanced``; :func:`fedlabels.consensus.balanced_vote`), a consistency
loss on U and a local warm-up and fine-tune (``consistency_weight``, ``warmup_steps``,
``finetune_steps``; :mod:`fedlabels.methods.fedct.unlabeled`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message, pack_labels
from fedlabels.consensus import (
    ABSTAIN,
    TIE_RULES,
    leave_one_out_kappa,
    peer_kappa,
    trimmed_vote,
    weighted_vote,
)
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import ClientData
from fedlabels.learners.consistency import AUGMENTATIONS
from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
    TrainingData,
)
from fedlabels.method.blocks import (
    Consensus,
    VoteServer,
    check_voters,
    decode_consensus,
    encode_consensus,
    vote_consensus,
)
from fedlabels.method.message_config import own_count, planned_round, whole
from fedlabels.method.options import STEPS_OR_NONE, Interval, MethodOptions, option
from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    SERVER_CHOOSING_U,
    Payload,
    ThreatModel,
)
from fedlabels.methods.fedct.regression import (
    FedCTRegressionClient,
    FedCTRegressionServer,
    check_task_options,
)
from fedlabels.methods.fedct.schedule import (
    check_weighting,
    decode_votes,
    encode_votes,
    example_weights,
    sends_votes,
    soft_rows,
    top_votes,
    weighting_enabled,
)
from fedlabels.methods.fedct.unlabeled import (
    check_unlabeled,
    check_unlabeled_options,
    consistency_spec,
    is_first_training,
    private_steps,
    unlabeled_enabled,
)

ROBUST_CONSENSUS = ("none", "reputation", "trimmed")
REPUTATION_ITERATIONS = 3  # re-weightings by this round's agreement before the vote
#: encode_consensus and decode_consensus live in blocks (shared with DP-FedCT, PATE)
__all__ = ["FedCT", "FedCTClient", "FedCTOptions", "FedCTServer", "VoteOptions",
           "consensus_function", "decode_consensus", "encode_consensus"]


@dataclass(frozen=True)
class VoteOptions(MethodOptions):
    """The consensus vote's options, shared by FedCT and DP-FedCT."""

    quorum: float | None = option(
        None, "qualified-majority quorum tau (a fraction of the m votes); a label below "
        "the quorum is abstained on. None: plain majority vote",
        kind=float, interval=Interval(0.0, 1.0, "right"), nullable=True, flag=True)


@dataclass(frozen=True)
class FedCTOptions(VoteOptions):
    """FedCT's options: the vote, a robust consensus, the regression consensus, the
    pseudo-label weights, and the use of U beyond the consensus
    (:mod:`fedlabels.methods.fedct.unlabeled`)."""

    robust: str = option(
        "none", "consensus robust to malicious clients: none; reputation (each vote weighted "
        "by its client's mean agreement with the other clients' vote over the rounds so far, "
        "this one included: Cohen's kappa floored at 0); trimmed (the clients that disagree most "
        "with the provisional majority are left out of the vote)", kind=str,
        choices=ROBUST_CONSENSUS, flag=True)
    trim: float = option(
        0.2, "robust trimmed: fraction of the voting clients left out each round (rounded "
        "down, at least 1)", kind=float, interval=Interval(0.0, 0.5, "neither"), flag=True)
    # regression (fedlabels.methods.fedct.regression): None = the default
    bits: int | None = option(
        None, "regression: bits per shared prediction on U, quantised over the public target "
        "range (None: 8)", kind=int, interval=Interval(1, 16), nullable=True, flag=True)
    target_consensus: str = option(
        "median", "regression: consensus of the clients' predictions, median or trimmed-mean",
        kind=str, choices=("median", "trimmed-mean"), flag=True)
    target_trim: float | None = option(
        None, "regression, target_consensus trimmed-mean: fraction of the largest and of the "
        "smallest predictions dropped per example (None: 0.2)", kind=float,
        interval=Interval(0.0, 0.5, "left"), nullable=True, flag=True)
    # pseudo-label weighting (fedlabels.methods.fedct.schedule)
    pseudo_weight: float = option(
        1.0, "loss weight of each pseudo-labelled example of P (a private example weighs 1)",
        kind=float, interval=Interval(0.0, 100.0, "right"), flag=True)
    pseudo_warmup: int = option(
        0, "rounds over which the pseudo-label weight ramps linearly from 0 to "
        "pseudo_weight (0: no ramp)", kind=int, interval=Interval(0, None), flag=True)
    vote_power: float = option(
        0.0, "weight each pseudo-labelled example also by share^p, the share of the votes "
        "its consensus label got (0: off; the server then also sends the top-vote counts, "
        "ceil(log2(m+1)) bits per example)", kind=float, interval=Interval(0.0, 100.0),
        flag=True)
    soft_targets: bool = option(
        False, "train on each pseudo-labelled example towards the vote's distribution: its "
        "consensus label with the share of the votes it got, the other classes sharing the "
        "rest evenly (the server then also sends the top-vote counts, as with vote_power)",
        kind=bool, flag=True)
    balanced: bool = option(
        False, "class-balanced vote: client i's vote for class c weighs 1/(C p_ic), p_ic the "
        "share of U it labels c this round (votes for a client's default class count little; "
        "pathological non-iid)", kind=bool, flag=True)
    ties: str = option(
        "smallest", "a tie for the top class of the vote: smallest (the smallest class index "
        "wins, as in the paper's code) or abstain (the example is left out of P that round, "
        "as below a quorum)", kind=str, choices=TIE_RULES, flag=True)
    # the use of U beyond the consensus (fedlabels.methods.fedct.unlabeled)
    consistency_weight: float = option(
        0.0, "weight λ of the consistency loss on U: each local step, the client's own "
        "prediction on a U example, where its top probability reaches "
        "consistency_threshold, is the target for an augmented view (0: off)",
        kind=float, interval=Interval(0.0, 100.0), flag=True)
    consistency_threshold: float = option(
        0.95, "consistency loss: the top class probability at which a prediction on U "
        "becomes a target", kind=float, interval=Interval(0.0, 1.0), flag=True)
    consistency_augment: str = option(
        "noise", "consistency loss: the augmented view; noise (Gaussian, std = strength x the "
        "row's RMS), dropout (features zeroed with probability strength), shift (images: "
        "shifted up to strength pixels, flipped); text learners augment the embedding",
        kind=str, choices=AUGMENTATIONS, flag=True)
    consistency_strength: float = option(
        0.1, "consistency loss: the augmentation's strength (noise: relative std; dropout: "
        "probability, below 1; shift: pixels)", kind=float,
        interval=Interval(0.0, 100.0, "right"), flag=True)
    warmup_steps: int = option(
        0, "local steps on private data alone before a client's first vote (0: none)",
        kind=int, interval=STEPS_OR_NONE, flag=True)
    finetune_steps: int = option(
        0, "local steps on private data alone at the end of the last round (0: none)",
        kind=int, interval=STEPS_OR_NONE, flag=True)

    def check(self) -> None:
        super().check()
        check_unlabeled_options(self)
        if self.trim != 0.2 and self.robust != "trimmed":
            raise FedLabelsError("trim applies only with robust trimmed (--robust trimmed).")
        if self.balanced and self.robust != "none":
            raise FedLabelsError("balanced is a vote of its own; use it without --robust.")
        if self.ties != "smallest" and (self.balanced or self.robust != "none"):
            raise FedLabelsError("ties applies to the majority and the qualified majority "
                                 "vote; drop --ties, or drop --balanced and --robust.")


def consensus_function(settings: Settings) -> Consensus:
    """FedCT's vote: majority, or qualified majority when a quorum is set (class-balanced
    with ``balanced``)."""
    opts = settings.options_as(FedCTOptions)
    return vote_consensus(settings.n_classes, opts.quorum, opts.balanced, opts.ties)



class FedCTClient(ClientRole):
    """Client i of Algorithm 1: trains on D_i ∪ P and shares its hard labels on U."""

    state_attrs: ClassVar[tuple[str, ...]] = ("pseudo_y", "pseudo_index", "pseudo_share")
    #: whether FedCT's options for training on U (warm-up, consistency, fine-tune) apply;
    #: DP-FedCT's client, which shares this training step, has its own options instead
    trains_with_u_options: ClassVar[bool] = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # P = (U[pseudo_index], pseudo_y). A client keeps only the consensus labels and, when
        # the consensus abstained somewhere, the indices it kept: U itself is the federation's
        # array that all roles share, never copied per client (|U| x d floats each).
        self.pseudo_y: np.ndarray | None = None
        self.pseudo_index: np.ndarray | None = None  # None: all of U (nothing abstained)
        self.pseudo_share: np.ndarray | None = None  # vote share of P's labels (vote_power)
        self.handlers["fedct.train"] = self.train

    @property
    def pseudo_X(self) -> np.ndarray | None:
        """The public examples of P: the shared U itself when nothing was abstained (no copy),
        else ``U[pseudo_index]``, made afresh on each access and not kept."""
        if self.pseudo_y is None:
            return None
        if self.pseudo_index is None:
            return self.X_public
        return self.public[self.pseudo_index]

    def set_pseudo_labels(self, labels: np.ndarray) -> None:
        """P <- (U, L_t), without the examples the consensus abstained on."""
        keep = labels != ABSTAIN
        if keep.all():  # a plain majority vote never abstains: P covers all of U
            self.pseudo_index, self.pseudo_y = None, np.array(labels)
        else:
            self.pseudo_index = np.flatnonzero(keep)
            self.pseudo_y = labels[self.pseudo_index]

    def local_labels(self) -> np.ndarray:
        """L_t^i = h_t^i(U), the client's hard labels on the public set."""
        return self.predict(self.public)

    def training_data(self) -> TrainingData:
        """D_i plus P = (U[pseudo_index], pseudo_y), with U shared, not copied."""
        if self.pseudo_y is None:
            return TrainingData(self.data.X, self.data.y)
        return TrainingData(self.data.X, self.data.y, self.X_public, self.pseudo_y,
                            self.pseudo_index)

    def receive_and_train(self, message: Message) -> None:
        """Lines 7 and 3: take the consensus that arrived (if any), then update on D_i ∪ P."""
        if "consensus" in message.arrays:
            self.set_pseudo_labels(decode_consensus(message.arrays, len(self.public),
                                                    self.settings.n_classes))
        if "top_votes" in message.arrays:
            # 0 voters divided by zero (infinite weights): at most every client voted
            voters = whole(message.config, "voters", self.cid, 1, self.settings.n_clients)
            share = decode_votes(message.arrays, len(self.public), voters) / voters
            self.pseudo_share = share if self.pseudo_index is None else share[self.pseudo_index]
        d, steps = self.training_data(), own_count(message.config, "steps", self.cid,
                                                                 self.settings.period)
        opts = self.settings.options
        rnd = planned_round(message.config, self.cid, self.settings.rounds)
        if self.trains_with_u_options and unlabeled_enabled(opts):
            self.train_with_u(d, steps, rnd)
            return
        if d.y_aux is not None and weighting_enabled(opts):  # weighted P
            y_aux, weights, index = self.weighted_pseudo(d, rnd)
            self.learner.train_steps(d.X, d.y, steps, d.X_aux, y_aux, w_aux=weights,
                                     aux_index=index)
            self.fitted, self._stale = True, False
            return
        self.train_on(d.X, d.y, steps, d.X_aux, d.y_aux, d.aux_index)

    def weighted_pseudo(self, d: TrainingData,
                        rnd: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """P's labels, loss weights and rows of U in round ``rnd``
        (:mod:`~fedlabels.methods.fedct.schedule`); with ``soft_targets`` one weighted row
        per example and class of its vote distribution."""
        assert d.y_aux is not None
        weights = example_weights(self.settings.options, rnd, self.pseudo_share, len(d.y_aux))
        if not getattr(self.settings.options, "soft_targets", False) or (
                self.pseudo_share is None):
            return d.y_aux, weights, d.aux_index
        at, labels, soft = soft_rows(d.y_aux, self.pseudo_share, self.settings.n_classes)
        index = at if d.aux_index is None else np.asarray(d.aux_index)[at]
        return labels, weights[at] * soft, index

    def train_with_u(self, d: TrainingData, steps: int, rnd: int) -> None:
        """The round's steps with the options of :mod:`~fedlabels.methods.fedct.unlabeled`:
        a warm-up on D_i before the first vote, the consistency loss on U, and a fine-tune
        on D_i in the last round."""
        opts = self.settings.options_as(FedCTOptions)
        if is_first_training(self.learner):
            private_steps(self.learner, d.X, d.y, opts.warmup_steps)
        y_aux, weights, index = d.y_aux, None, d.aux_index
        if d.y_aux is not None and weighting_enabled(opts):
            y_aux, weights, index = self.weighted_pseudo(d, rnd)
        self.learner.train_steps(d.X, d.y, steps, d.X_aux, y_aux, w_aux=weights,
                                 aux_index=index,
                                 consistency=consistency_spec(opts, rnd, self.public))
        if rnd == self.settings.rounds - 1:
            private_steps(self.learner, d.X, d.y, opts.finetune_steps)
        self.fitted, self._stale = True, False

    def train(self, message: Message) -> Message:
        self.receive_and_train(message)
        return Message("fedct.labels", arrays={
            "labels": pack_labels(self.local_labels(), self.settings.n_classes)})


class FedCTServer(VoteServer):
    """The server of Algorithm 1: collects hard labels, forms and broadcasts the consensus
    (plain, qualified, class-balanced or robust to malicious clients)."""

    state_attrs: ClassVar[tuple[str, ...]] = ("agreement_sum", "agreement_rounds",
                                              "dropped_rounds", "top", "voters")

    def __init__(self, settings: Settings, n_public: int,
                 truth_public: np.ndarray | None = None) -> None:
        super().__init__(settings, n_public, consensus_function(settings), truth_public)
        opts = settings.options_as(FedCTOptions)
        self.quorum = opts.quorum
        self.robust, self.trim = opts.robust, opts.trim
        m = settings.n_clients  # robust consensus: per-client history (reputation, trimming)
        self.agreement_sum = np.zeros(m)
        self.agreement_rounds = np.zeros(m, dtype=np.int64)
        self.dropped_rounds = np.zeros(m, dtype=np.int64)
        # vote_power or soft_targets: the top-vote count per example, sent beside the consensus
        self.sends_votes = sends_votes(opts)
        self.top: np.ndarray | None = None
        self.voters = 0

    def train_message(self, rnd: int) -> Message:
        message = super().train_message(rnd)
        if self.top is None:
            return message
        return Message(message.kind, arrays={**message.arrays,
                                             **encode_votes(self.top, self.voters)},
                       config={**message.config, "voters": self.voters})

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = self.train_message(rnd)
        replies = grid.exchange({cid: message for cid in grid.client_ids}, rnd)
        new = self.robust_consensus(replies)
        metrics = self.consensus_metrics(new)
        self.labels = new
        if self.sends_votes:
            self.top, self.voters = top_votes(self.collect_votes(replies), new), len(replies)
        return metrics

    def reputation(self, cids: np.ndarray) -> np.ndarray:
        """Vote weights from the past rounds: each client's mean agreement (Cohen's κ with
        the weighted vote of the other clients, floored at 0; 1 before its first round);
        uniform if every weight is 0. :meth:`robust_consensus` adds this round's agreement
        before it votes."""
        seen = self.agreement_rounds[cids]
        weights = np.where(seen > 0, self.agreement_sum[cids] / np.maximum(seen, 1), 1.0)
        return weights if weights.sum() > 0 else np.ones(len(cids))

    def robust_consensus(self, replies: dict[int, Message]) -> np.ndarray:
        """The consensus of the replies under the ``robust`` option; updates the history."""
        votes = self.collect_votes(replies)
        if self.robust == "none":
            return self.consensus(votes)
        cids, c = np.array(sorted(replies)), self.settings.n_classes
        if self.robust == "trimmed":
            new, dropped = trimmed_vote(votes, c, max(1, int(self.trim * len(cids))),
                                        self.quorum)
            self.dropped_rounds[cids[dropped]] += 1
            return new
        past, seen = self.agreement_sum[cids], self.agreement_rounds[cids]

        def blend(kappa: np.ndarray) -> np.ndarray:  # past rounds and this one's agreement
            weights = (past + kappa) / (seen + 1)
            return weights if weights.sum() > 0 else np.ones(len(cids))

        # this round's agreement: first with the other clients, then with the weighted vote
        # of the others (never with a vote a client dominates itself)
        kappa = peer_kappa(votes, c)
        for _ in range(REPUTATION_ITERATIONS):
            kappa = np.maximum(leave_one_out_kappa(votes, c, blend(kappa)), 0.0)
        self.agreement_sum[cids] += kappa
        self.agreement_rounds[cids] += 1
        return weighted_vote(votes, c, blend(kappa), self.quorum)

    def result_extra(self) -> dict[str, Any]:
        """With a robust consensus: each client's final vote weight and rounds left out."""
        if self.robust == "none":
            return {}
        if self.robust == "trimmed":
            return {"robust_consensus": {"robust": "trimmed", "trim": self.trim,
                                         "dropped_rounds": self.dropped_rounds.tolist()}}
        every = np.arange(self.settings.n_clients)
        return {"robust_consensus": {"robust": "reputation",
                                     "weights": self.reputation(every).tolist()}}


class FedCT(Method):
    """Federated co-training: share hard labels on U, train on the consensus."""

    name = "fedct"
    description = "FedCT: clients share bit-packed hard labels on U; majority / qualified vote"
    options_class: ClassVar[type[MethodOptions]] = FedCTOptions
    threat_model = ThreatModel(
        view="hard-labels-on-queries",
        adversary=SERVER_CHOOSING_U,
        sees="the client's hard labels on U every round",
        guarantee="none",
        payloads=(Payload("fedct.labels", "labels", "hard-labels", rows="public"),
                  Payload("fedct.predictions", "predictions", "quantised-predictions",
                          rows="public", note="regression: b-bit predictions on U over the "
                          "federation's target range, public metadata (not private data)"),
                  *EVALUATION_PAYLOADS))
    # a canary audit observes the audited client's label releases on U
    capabilities = Capabilities(supports_regression=True, canary_view="replies")

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        opts = settings.options_as(FedCTOptions)
        robust = opts.robust
        check_task_options(opts, settings)
        if weighting_enabled(opts):
            check_weighting(settings, learners)
        if unlabeled_enabled(opts):
            check_unlabeled(settings, learners)
        if settings.task == "regression":
            if opts.balanced or opts.ties != "smallest":
                raise FedLabelsError("balanced and ties apply to classification (a vote of "
                                     "labels); drop them on a regression task.")
            if robust != "none":
                raise FedLabelsError("robust applies to classification; a regression "
                                     "consensus is robust by --target-consensus (median or "
                                     "trimmed-mean): drop --robust.")
            return  # a median / trimmed mean needs no tie-free majority
        self.check_clients(n_clients, settings)

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        opts = settings.options_as(FedCTOptions)
        if settings.task == "regression":  # a median / trimmed mean needs no majority
            return
        check_voters("FedCT", n_clients, opts.quorum)
        if opts.robust != "none" and n_clients < 3:
            raise FedLabelsError(f"a robust consensus needs at least 3 clients to tell an "
                                 f"outlier from the rest, got {n_clients}; use more clients.")

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        if ctx.settings.task == "regression":
            return FedCTRegressionServer(ctx.settings, n_public, ctx.truth_public)
        return FedCTServer(ctx.settings, n_public, ctx.truth_public)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        role = FedCTRegressionClient if ctx.settings.task == "regression" else FedCTClient
        return role(cid, data, learner, ctx.settings, X_public, X_test, y_test)

