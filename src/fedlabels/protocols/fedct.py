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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message, pack_labels, pack_mask, unpack_labels, unpack_mask
from fedlabels.consensus import ABSTAIN, majority_vote, qualified_majority
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.protocols.base import (
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
    TrainingData,
)
from fedlabels.protocols.options import Interval, MethodOptions, option
from fedlabels.protocols.threat import (
    EVALUATION_PAYLOADS,
    SERVER_CHOOSING_U,
    Payload,
    ThreatModel,
)

Consensus = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class FedCTOptions(MethodOptions):
    quorum: float | None = option(
        None, "qualified-majority quorum tau (a fraction of the m votes); a label below "
        "the quorum is abstained on. None: plain majority vote",
        kind=float, interval=Interval(0.0, 1.0, "right"), nullable=True, flag=True)


def consensus_function(settings: Settings) -> Consensus:
    """Majority vote, or qualified majority when a quorum is set."""
    quorum = settings.options_as(FedCTOptions).quorum
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

    state_attrs: ClassVar[tuple[str, ...]] = ("pseudo_y", "pseudo_index")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # P = (U[pseudo_index], pseudo_y). A client keeps only the consensus labels and, when
        # the consensus abstained somewhere, the indices it kept: U itself is the federation's
        # array that all roles share, never copied per client (|U| x d floats each).
        self.pseudo_y: np.ndarray | None = None
        self.pseudo_index: np.ndarray | None = None  # None: all of U (nothing abstained)
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
        d = self.training_data()
        self.train_on(d.X, d.y, int(message.config["steps"]), d.X_aux, d.y_aux, d.aux_index)

    def train(self, message: Message) -> Message:
        self.receive_and_train(message)
        return Message("fedct.labels", arrays={
            "labels": pack_labels(self.local_labels(), self.settings.n_classes)})


class FedCTServer(ServerRole):
    """The server of Algorithm 1: collects hard labels, forms and broadcasts the consensus."""

    def __init__(self, settings: Settings, n_public: int,
                 truth_public: np.ndarray | None = None) -> None:
        self.settings = settings
        self.n_public = n_public
        self.consensus = consensus_function(settings)
        self.labels: np.ndarray | None = None
        self.truth_public = truth_public

    def train_message(self, rnd: int) -> Message:
        arrays = {} if self.labels is None else encode_consensus(self.labels,
                                                                 self.settings.n_classes)
        return Message("fedct.train", arrays=arrays,
                       config={"round": rnd, "steps": self.settings.period})

    def collect_votes(self, replies: dict[int, Message]) -> np.ndarray:
        """The (m, |U|) matrix of the clients' unpacked hard labels."""
        return np.stack([unpack_labels(replies[cid].arrays["labels"], self.n_public,
                                       self.settings.n_classes) for cid in sorted(replies)])

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = self.train_message(rnd)
        replies = grid.exchange({cid: message for cid in grid.client_ids}, rnd)
        new = self.consensus(self.collect_votes(replies))
        metrics = self.consensus_metrics(new)
        self.labels = new
        return metrics

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
    options_class = FedCTOptions
    threat_model = ThreatModel(
        view="hard-labels-on-queries",
        adversary=SERVER_CHOOSING_U,
        sees="the client's hard labels on U every round",
        guarantee="none",
        payloads=(Payload("fedct.labels", "labels", "hard-labels", rows="public"),
                  *EVALUATION_PAYLOADS))

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        if settings.options_as(FedCTOptions).quorum is None and n_clients < 3:
            raise FedLabelsError(
                f"FedCT with a majority vote needs at least 3 clients, got {n_clients}: with "
                "2 clients every disagreement is a tie that the class index decides, and "
                "with 1 there is nothing to vote on (the convergence result, Prop. 1, assumes "
                "m >= 3). Use more clients, or a qualified majority (--quorum 1.0 = unanimity).")

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return FedCTServer(ctx.settings, n_public, ctx.truth_public)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FedCTClient(cid, data, learner, ctx.settings, X_public, X_test, y_test)
