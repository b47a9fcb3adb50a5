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
``pseudo_warmup``, ``vote_power``; :mod:`fedlabels.methods.fedct.schedule`) and a
class-balanced vote (``balanced``; :func:`fedlabels.consensus.balanced_vote`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message, pack_labels, pack_mask, unpack_labels, unpack_mask
from fedlabels.consensus import (
    ABSTAIN,
    balanced_vote,
    leave_one_out_kappa,
    majority_vote,
    peer_kappa,
    qualified_majority,
    trimmed_vote,
    weighted_vote,
)
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import ClientData
from fedlabels.method.base import (
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
    TrainingData,
)
from fedlabels.method.options import Interval, MethodOptions, option
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
    top_votes,
    weighting_enabled,
)

Consensus = Callable[[np.ndarray], np.ndarray]
ROBUST_CONSENSUS = ("none", "reputation", "trimmed")
REPUTATION_ITERATIONS = 3  # re-weightings by this round's agreement before the vote


@dataclass(frozen=True)
class VoteOptions(MethodOptions):
    """The consensus vote's options, shared by FedCT and DP-FedCT."""

    quorum: float | None = option(
        None, "qualified-majority quorum tau (a fraction of the m votes); a label below "
        "the quorum is abstained on. None: plain majority vote",
        kind=float, interval=Interval(0.0, 1.0, "right"), nullable=True, flag=True)


@dataclass(frozen=True)
class FedCTOptions(VoteOptions):
    """FedCT's options: the vote, a robust consensus, and the regression consensus."""

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
    balanced: bool = option(
        False, "class-balanced vote: client i's vote for class c weighs 1/(C p_ic), p_ic the "
        "share of U it labels c this round (votes for a client's default class count little; "
        "pathological non-iid)", kind=bool, flag=True)

    def check(self) -> None:
        super().check()
        if self.trim != 0.2 and self.robust != "trimmed":
            raise FedLabelsError("trim applies only with robust trimmed (--robust trimmed).")
        if self.balanced and self.robust != "none":
            raise FedLabelsError("balanced is a vote of its own; use it without --robust.")


def consensus_function(settings: Settings) -> Consensus:
    """Majority vote, or qualified majority when a quorum is set (class-balanced with
    ``balanced``)."""
    quorum = settings.options_as(VoteOptions).quorum
    if getattr(settings.options, "balanced", False):
        return lambda votes: balanced_vote(votes, settings.n_classes, quorum)
    if quorum is None:
        return lambda votes: majority_vote(votes, settings.n_classes)
    return lambda votes: qualified_majority(votes, settings.n_classes, quorum)


def encode_consensus(labels: np.ndarray, n_classes: int) -> dict[str, np.ndarray]:
    """Bit-pack a consensus; abstentions travel as a 1-bit-per-example mask."""
    abstain = labels == ABSTAIN
    arrays = {"consensus": pack_labels(np.where(abstain, 0, labels), n_classes)}
    if abstain.any():
        arrays["keep"] = pack_mask(~abstain)
    return arrays


def decode_consensus(arrays: dict[str, np.ndarray], n: int, n_classes: int) -> np.ndarray:
    labels = unpack_labels(arrays["consensus"], n, n_classes)
    if "keep" in arrays:
        labels[~unpack_mask(arrays["keep"], n)] = ABSTAIN
    return labels


class FedCTClient(ClientRole):
    """Client i of Algorithm 1: trains on D_i ∪ P and shares its hard labels on U."""

    state_attrs: ClassVar[tuple[str, ...]] = ("pseudo_y", "pseudo_index", "pseudo_share")

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
            voters = int(message.config["voters"])
            share = decode_votes(message.arrays, len(self.public), voters) / voters
            self.pseudo_share = share if self.pseudo_index is None else share[self.pseudo_index]
        d, steps = self.training_data(), int(message.config["steps"])
        opts = self.settings.options
        if d.y_aux is not None and weighting_enabled(opts):  # weighted P
            weights = example_weights(opts, int(message.config["round"]), self.pseudo_share,
                                      len(d.y_aux))
            self.learner.train_steps(d.X, d.y, steps, d.X_aux, d.y_aux, w_aux=weights,
                                     aux_index=d.aux_index)
            self.fitted, self._stale = True, False
            return
        self.train_on(d.X, d.y, steps, d.X_aux, d.y_aux, d.aux_index)

    def train(self, message: Message) -> Message:
        self.receive_and_train(message)
        return Message("fedct.labels", arrays={
            "labels": pack_labels(self.local_labels(), self.settings.n_classes)})


class FedCTServer(ServerRole):
    """The server of Algorithm 1: collects hard labels, forms and broadcasts the consensus."""

    state_attrs: ClassVar[tuple[str, ...]] = ("labels", "agreement_sum", "agreement_rounds",
                                              "dropped_rounds", "top", "voters")

    def __init__(self, settings: Settings, n_public: int,
                 truth_public: np.ndarray | None = None) -> None:
        self.settings = settings
        self.n_public = n_public
        self.consensus = consensus_function(settings)
        self.labels: np.ndarray | None = None
        self.truth_public = truth_public
        self.quorum = settings.options_as(VoteOptions).quorum
        opts = settings.options  # DP-FedCT's options have no robust consensus
        self.robust, self.trim = ((opts.robust, opts.trim) if isinstance(opts, FedCTOptions)
                                  else ("none", 0.0))
        m = settings.n_clients  # robust consensus: per-client history (reputation, trimming)
        self.agreement_sum = np.zeros(m)
        self.agreement_rounds = np.zeros(m, dtype=np.int64)
        self.dropped_rounds = np.zeros(m, dtype=np.int64)
        # vote_power > 0: the top-vote count per example, sent beside the consensus
        self.vote_power = float(getattr(opts, "vote_power", 0.0))
        self.top: np.ndarray | None = None
        self.voters = 0

    def train_message(self, rnd: int) -> Message:
        arrays = {} if self.labels is None else encode_consensus(self.labels,
                                                                 self.settings.n_classes)
        config: dict[str, Any] = {"round": rnd, "steps": self.settings.period}
        if self.top is not None:
            arrays.update(encode_votes(self.top, self.voters))
            config["voters"] = self.voters
        return Message("fedct.train", arrays=arrays, config=config)

    def collect_votes(self, replies: dict[int, Message]) -> np.ndarray:
        """The (m, |U|) matrix of the clients' unpacked hard labels."""
        return np.stack([unpack_labels(replies[cid].arrays["labels"], self.n_public,
                                       self.settings.n_classes) for cid in sorted(replies)])

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = self.train_message(rnd)
        replies = grid.exchange({cid: message for cid in grid.client_ids}, rnd)
        new = self.robust_consensus(replies)
        metrics = self.consensus_metrics(new)
        self.labels = new
        if self.vote_power > 0:
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

    def final_arrays(self) -> dict[str, np.ndarray]:
        """The last consensus on U (what a deployment saves beside the result)."""
        return {} if self.labels is None else {"labels": self.labels}

    def consensus_metrics(self, new: np.ndarray) -> dict[str, float]:
        """Fraction of consensus labels that changed, coverage, and (diagnostic) accuracy."""
        metrics = {
            "consensus_changed": 1.0 if self.labels is None
            else float(np.mean(self.labels != new)),
            "consensus_coverage": float(np.mean(new != ABSTAIN)),
        }
        if self.truth_public is not None:
            kept = new != ABSTAIN
            metrics["consensus_accuracy"] = (float(np.mean(new[kept] == self.truth_public[kept]))
                                             if kept.any() else float("nan"))
        return metrics


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
    supports_regression = True

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        opts = settings.options
        robust = opts.robust if isinstance(opts, FedCTOptions) else "none"
        if isinstance(opts, FedCTOptions):
            check_task_options(opts, settings)
        if weighting_enabled(opts):
            check_weighting(settings, learners)
        if settings.task == "regression":
            if getattr(opts, "balanced", False):
                raise FedLabelsError("balanced applies to classification (a vote of labels); "
                                     "drop it on a regression task.")
            if robust != "none":
                raise FedLabelsError("robust applies to classification; a regression "
                                     "consensus is robust by --target-consensus (median or "
                                     "trimmed-mean): drop --robust.")
            return  # a median / trimmed mean needs no tie-free majority
        if settings.options_as(VoteOptions).quorum is None and n_clients < 3:
            raise FedLabelsError(
                f"FedCT with a majority vote needs at least 3 clients, got {n_clients}: with "
                "2 clients every disagreement is a tie that the class index decides, and "
                "with 1 there is nothing to vote on (the convergence result, Prop. 1, assumes "
                "m >= 3). Use more clients, or a qualified majority (--quorum 1.0 = unanimity).")
        if robust != "none" and n_clients < 3:
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

