"""Federated building blocks shared by methods: broadcast, averaging, the weights client.

FedAvg, DP-FedAvg, FREDY's teacher phase and FedAvg+XCLP all send a global model, let
clients take local steps from it and combine what comes back; the pieces live here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import has_weights
from fedlabels.method.base import ClientRole, Grid, MethodContext, ServerRole


def broadcast(grid: Grid, message: Message, rnd: int,
              cids: list[int] | None = None) -> dict[int, Message]:
    """Send the same ``message`` to ``cids`` (default: every client the grid has)."""
    targets = grid.client_ids if cids is None else cids
    return grid.exchange({cid: message for cid in targets}, rnd)


def size_weighted_average(replies: Mapping[int, Message], key: str = "weights",
                          size_key: str = "n") -> np.ndarray:
    """Σ_i n_i w_i / Σ_i n_i over the replies (float64 sums, float32 result)."""
    if not replies:
        raise FedLabelsError("no client replied: there is nothing to average.")
    cids = sorted(replies)
    sizes = np.array([float(replies[c].config[size_key]) for c in cids], dtype=np.float64)
    if sizes.sum() <= 0:
        raise FedLabelsError("the replying clients hold no examples: cannot average.")
    stacked = np.stack([np.asarray(replies[c].arrays[key], dtype=np.float64) for c in cids])
    return (sizes @ stacked / sizes.sum()).astype(np.float32)


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
        raise FedLabelsError(f"{method} averages model parameters and needs a model that "
                             f"exposes them (the torch 'mlp'); got {', '.join(bad)}. "
                             "Use --method fedct to train models that cannot be averaged.")
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
        self.ensure_built()
        self.learner.set_weights(message.arrays["weights"])
        return True

    def local_steps_from(self, message: Message) -> None:
        """Load the global weights, then take ``steps`` local steps on the private data."""
        self.load_weights(message)
        self.ensure_built()
        self.train_on(self.data.X, self.data.y, int(message.config["steps"]))

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

    def __init__(self, initial: np.ndarray, period: int) -> None:
        self.weights = np.asarray(initial, dtype=np.float32)
        self.period = period

    def evaluation_message(self, cid: int) -> Message:
        return Message("evaluate", arrays={"weights": self.weights}, category="evaluation")

    def final_arrays(self) -> dict[str, np.ndarray]:
        return {"weights": self.weights}
