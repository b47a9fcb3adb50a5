"""Federated building blocks shared by methods: broadcast, averaging, the weights client,
the vote server.

FedAvg, DP-FedAvg, FREDY's teacher phase and FedAvg+XCLP all send a global model, let
clients take local steps from it and combine what comes back; FedCT and DP-FedCT collect
hard labels on U and send back their consensus (:class:`VoteServer`). The pieces live here
once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message, pack_labels, pack_mask, unpack_labels, unpack_mask
from fedlabels.comm.labels import packed_size
from fedlabels.consensus import ABSTAIN, balanced_vote, majority_vote, qualified_majority
from fedlabels.core.errors import FedLabelsError, RefusedError
from fedlabels.learners import has_weights
from fedlabels.method.base import ClientRole, Grid, MethodContext, ServerRole, Settings
from fedlabels.method.message_config import own_count

Consensus = Callable[[np.ndarray], np.ndarray]


def broadcast(grid: Grid, message: Message, rnd: int,
              cids: list[int] | None = None) -> dict[int, Message]:
    """Send the same ``message`` to ``cids`` (default: every client the grid has) through
    ``grid`` in round ``rnd``."""
    targets = grid.client_ids if cids is None else cids
    return grid.exchange({cid: message for cid in targets}, rnd)


def weighted_mean(replies: Mapping[int, Message], key: str = "weights",
                  size_key: str = "n") -> np.ndarray:
    """Σ_i n_i w_i / Σ_i n_i over the replies, in float64.

    The sum is accumulated one reply at a time, in client order: the memory it takes is a
    few copies of one model, whatever the number of clients (stacking the replies in
    float64 took 8 bytes per parameter and client: 2.4 GB for 1,000 MLPs of 300k weights)."""
    if not replies:
        raise FedLabelsError("no client replied: there is nothing to average.")
    cids = sorted(replies)
    sizes = np.array([float(replies[c].config[size_key]) for c in cids], dtype=np.float64)
    if sizes.sum() <= 0:
        raise FedLabelsError("the replying clients hold no examples: cannot average.")
    total: np.ndarray | None = None
    for size, cid in zip(sizes, cids, strict=True):
        term = np.multiply(size, replies[cid].arrays[key], dtype=np.float64)
        total = term if total is None else np.add(total, term, out=total)
    assert total is not None
    return total / sizes.sum()


def size_weighted_average(replies: Mapping[int, Message], key: str = "weights",
                          size_key: str = "n") -> np.ndarray:
    """:func:`weighted_mean` of the replies as float32 (the global model's weights)."""
    return weighted_mean(replies, key, size_key).astype(np.float32)


def robust_average(replies: Mapping[int, Message], aggregate: str, trim: float,
                   key: str = "weights") -> np.ndarray:
    """Coordinate-wise ``median`` or ``trimmed_mean`` (per coordinate the ``floor(trim·m)``
    largest and smallest values left out, the rest averaged) of the replies, unweighted by
    client size; ``mean`` is :func:`size_weighted_average`."""
    if aggregate == "mean":
        return size_weighted_average(replies, key)
    if not replies:
        raise FedLabelsError("no client replied: there is nothing to aggregate.")
    stacked = np.stack([np.asarray(replies[c].arrays[key], dtype=np.float64)
                        for c in sorted(replies)])
    if aggregate == "median":
        return np.median(stacked, axis=0).astype(np.float32)
    cut = int(trim * len(stacked))
    if aggregate != "trimmed_mean" or 2 * cut >= len(stacked):
        raise FedLabelsError(f"cannot aggregate {len(stacked)} replies by {aggregate} with "
                             f"trim {trim}; use mean, median or trimmed_mean with trim < 0.5.")
    return np.sort(stacked, axis=0)[cut:len(stacked) - cut].mean(axis=0).astype(np.float32)


def check_weight_learners(method: str, learners: list[Any]) -> None:
    """Averaging needs models that expose their parameters, the same architecture at all."""
    bad = sorted({type(ln).__name__ for ln in learners if not has_weights(ln)})
    if bad:
        from fedlabels.learners.text_input import accepts_text

        text = any(accepts_text(ln) for ln in learners)
        which = ("'minilm' or 'hf(model_dir=...)'" if text
                 else "'mlp', 'cnn' or your own 'module:...'")
        raise FedLabelsError(f"{method} averages model parameters and needs a torch model "
                             f"that exposes them (for this data: {which}); got "
                             f"{', '.join(bad)}. Use --method fedct (Python: "
                             "fl.run('fedct', ...)) to train models that cannot be averaged.")
    shapes = {repr({k: v for k, v in ln.get_params().items() if k != "random_state"})
              for ln in learners}
    if len(shapes) > 1:
        raise FedLabelsError(f"{method} needs the same architecture at every client; got "
                             "different model specs.")


def initial_weights(learners: list[Any], ctx: MethodContext) -> np.ndarray:
    """The common initialisation: a fresh copy of client 0's model, seeded by the server."""
    from sklearn.base import clone

    init = clone(learners[0]).set_params(random_state=ctx.server_seed)
    init.initialise(ctx.settings.n_features, ctx.settings.n_classes)
    return np.asarray(init.get_weights(), dtype=np.float32)


class WeightsClient(ClientRole):
    """A client that loads the global weights it is sent and trains from them."""

    def ensure_built(self) -> None:
        if not hasattr(self.learner, "model_"):
            self.learner.initialise(self.settings.n_features or self.data.X.shape[1],
                                    self.settings.n_classes)

    def load_weights(self, message: Message) -> bool:
        """Set the learner to the message's ``weights``, if it carries any."""
        if "weights" not in message.arrays:
            return False
        weights = np.asarray(message.arrays["weights"])
        if weights.dtype.kind != "f" or not np.isfinite(weights).all():
            raise RefusedError(f"client {self.cid}: the global weights hold NaN or inf (or "
                               f"are not numbers: {weights.dtype}); refusing to load them.")
        self.ensure_built()
        self.learner.set_weights(weights)
        return True

    def local_steps_from(self, message: Message) -> None:
        """Load the global weights, then take ``steps`` local steps on the private data."""
        self.load_weights(message)
        self.ensure_built()
        self.train_on(self.data.X, self.data.y, own_count(message.config, "steps", self.cid,
                                                                 self.settings.period))

    def weights_reply(self, kind: str) -> Message:
        """The local weights and the data size they are weighted by."""
        return Message(kind, arrays={"weights": self.learner.get_weights()},
                       config={"n": len(self.data)})

    def evaluate(self, message: Message) -> Message:
        self.load_weights(message)
        return super().evaluate(message)


class GlobalModelServer(ServerRole):
    """A server holding global weights, which its evaluation message carries."""

    state_attrs: ClassVar[tuple[str, ...]] = ("weights",)
    evaluation_after_round = True  # the evaluation carries the round's new global weights

    def __init__(self, initial: np.ndarray, period: int) -> None:
        self.weights = np.asarray(initial, dtype=np.float32)
        self.period = period

    def evaluation_message(self, cid: int) -> Message:
        return Message("evaluate", arrays={"weights": self.weights}, category="evaluation")

    #: the array and config key a training reply must hold (None: none required here)
    reply_weights: ClassVar[str | None] = None
    reply_size: ClassVar[str | None] = None

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        """Weights or updates of the global model's size; an aggregation weight ``n`` a
        number > 0 (a negative one scaled every other client's weights, NaN made the
        global model NaN)."""
        from fedlabels.method.replies import check_positive, check_vector, require_arrays

        super().check_reply(cid, request, reply)
        if request.category == "evaluation":
            return
        if self.reply_weights is not None and request.category != "control":
            require_arrays(reply, self.reply_weights)
        for key in ("weights", "update"):
            if key in reply.arrays:
                check_vector(reply, key, self.weights.size)
        if "n" in reply.config or (self.reply_size is not None
                                   and request.category != "control"):
            check_positive(reply, "n")

    def final_arrays(self) -> dict[str, np.ndarray]:
        return {"weights": self.weights}


# -------------------------------------------------------------------- the vote server
def vote_consensus(n_classes: int, quorum: float | None, balanced: bool = False,
                   ties: str = "smallest") -> Consensus:
    """Majority vote, or qualified majority when a ``quorum`` is set (class-balanced with
    ``balanced``): a function of the (m, n) matrix of hard labels. ``ties``: a tied top class
    goes to the smallest class index, or abstains (``"abstain"``; not with ``balanced``)."""
    if balanced:
        return lambda votes: balanced_vote(votes, n_classes, quorum)
    if quorum is None:
        return lambda votes: majority_vote(votes, n_classes, ties)
    return lambda votes: qualified_majority(votes, n_classes, quorum, ties)


def check_voters(method: str, n_clients: int, quorum: float | None) -> None:
    """A plain majority vote needs at least 3 voters (with 2 every disagreement is a tie)."""
    if quorum is None and n_clients < 3:
        raise FedLabelsError(
            f"{method} with a majority vote needs at least 3 clients, got {n_clients}: with "
            "2 clients every disagreement is a tie that the class index decides, and "
            "with 1 there is nothing to vote on (the convergence result, Prop. 1, assumes "
            "m >= 3). Use more clients, or a qualified majority (--quorum 1.0 = unanimity).")


def encode_consensus(labels: np.ndarray, n_classes: int) -> dict[str, np.ndarray]:
    """Bit-pack a consensus; abstentions travel as a 1-bit-per-example mask."""
    abstain = labels == ABSTAIN
    arrays = {"consensus": pack_labels(np.where(abstain, 0, labels), n_classes)}
    if abstain.any():
        arrays["keep"] = pack_mask(~abstain)
    return arrays


def decode_labels(arrays: dict[str, np.ndarray], key: str, n: int, n_classes: int,
                  item: str = "label") -> np.ndarray:
    """The ``n`` packed values in 0..``n_classes`` - 1 (labels, or counts: ``item``) a
    message carries under ``key``, refused (:class:`RefusedError`) where they are not (a
    truncated array read as class 0 for the missing rows, a label of C made the client
    train a class that does not exist)."""
    packed = np.asarray(arrays[key])
    width = packed_size(n, n_classes)
    if packed.dtype != np.uint8 or packed.size != width:
        raise RefusedError(f"the {key} holds {packed.size} values of {packed.dtype}; "
                           f"expected {width} bytes ({n} {item}s).")
    labels = unpack_labels(packed, n, n_classes)
    if labels.size and labels.max() >= n_classes:
        raise RefusedError(f"the {key} holds {item} {int(labels.max())}, outside "
                           f"0..{n_classes - 1}.")
    return labels


def decode_consensus(arrays: dict[str, np.ndarray], n: int, n_classes: int) -> np.ndarray:
    """The consensus a message carries (:func:`decode_labels`), with its abstentions."""
    labels = decode_labels(arrays, "consensus", n, n_classes)
    if "keep" in arrays:
        keep = np.asarray(arrays["keep"])
        if keep.dtype != np.uint8 or keep.size != -(-n // 8):
            raise RefusedError(f"the consensus' abstention mask holds {keep.size} values; "
                               f"expected {-(-n // 8)} bytes.")
        labels[~unpack_mask(keep, n)] = ABSTAIN
    return labels


class VoteServer(ServerRole):
    """Collects the clients' hard labels on U, forms their consensus and sends it back with
    the next training message (so each round is one exchange).

    Methods differ in how they turn the replies into a consensus (FedCT: a plain, robust or
    qualified vote; DP-FedCT: its mechanism's debiased vote) and build on this block by
    subclassing it; ``consensus`` is the vote of an (m, |U|) label matrix.
    """

    state_attrs: ClassVar[tuple[str, ...]] = ("labels",)

    def __init__(self, settings: Settings, n_public: int, consensus: Consensus,
                 truth_public: np.ndarray | None = None, kind: str = "fedct.train") -> None:
        self.settings = settings
        self.n_public = n_public
        self.consensus = consensus
        self.truth_public = truth_public
        self.kind = kind
        self.labels: np.ndarray | None = None

    def train_message(self, rnd: int) -> Message:
        """The round's training message, with the last consensus when there is one."""
        arrays = {} if self.labels is None else encode_consensus(self.labels,
                                                                 self.settings.n_classes)
        return Message(self.kind, arrays=arrays,
                       config={"round": rnd, "steps": self.settings.period})

    def check_reply(self, cid: int, request: Message, reply: Message) -> None:
        """A training reply holds one packed row of |U| labels, each a class (a label of C
        or more moved a vote to the next example, or crashed the vote)."""
        super().check_reply(cid, request, reply)
        if request.kind == self.kind and request.category != "evaluation":
            self.check_votes(request, reply)

    def check_votes(self, request: Message, reply: Message) -> None:
        """The labels of a training reply (FedCT's: hard labels on all of U)."""
        from fedlabels.method.replies import checked_labels

        checked_labels(reply, "labels", self.n_public, self.settings.n_classes)

    def collect_votes(self, replies: Mapping[int, Message]) -> np.ndarray:
        """The (m, |U|) matrix of the clients' unpacked hard labels."""
        return np.stack([unpack_labels(replies[cid].arrays["labels"], self.n_public,
                                       self.settings.n_classes) for cid in sorted(replies)])

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

    def final_arrays(self) -> dict[str, np.ndarray]:
        """The last consensus on U (what a deployment saves beside the result)."""
        return {} if self.labels is None else {"labels": self.labels}
