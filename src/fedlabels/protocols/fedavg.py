"""FedAvg (McMahan et al. 2017) for learners with averageable weights (the torch MLP).

All clients start from one initialisation sent by the server; each round a client takes b
local steps from the global weights and returns its weights; the server averages them weighted
by client data size. The evaluation message carries the new global model, so every client is
evaluated on the averaged model (evaluation traffic is counted separately).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.learners import has_weights
from fedlabels.protocols.base import ClientRole, Grid, Method, MethodContext, ServerRole


class FedAvgClient(ClientRole):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["fedavg.train"] = self.train

    def ensure_built(self) -> None:
        if not hasattr(self.learner, "model_"):
            self.learner.initialise(self.data.X.shape[1], self.settings.n_classes)

    def train(self, message: Message) -> Message:
        self.ensure_built()
        self.learner.set_weights(message.arrays["weights"])
        self.train_on(self.data.X, self.data.y, int(message.config["steps"]))
        return Message("fedavg.weights", arrays={"weights": self.learner.get_weights()},
                       config={"n": len(self.data)})

    def evaluate(self, message: Message) -> Message:
        if "weights" in message.arrays:
            self.ensure_built()
            self.learner.set_weights(message.arrays["weights"])
        return super().evaluate(message)


class FedAvgServer(ServerRole):
    def __init__(self, initial_weights: np.ndarray, period: int) -> None:
        self.weights = initial_weights.astype(np.float32)
        self.period = period

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = Message("fedavg.train", arrays={"weights": self.weights},
                          config={"round": rnd, "steps": self.period})
        replies = grid.exchange({cid: message for cid in grid.client_ids}, rnd)
        sizes = np.array([replies[c].config["n"] for c in sorted(replies)], dtype=np.float64)
        stacked = np.stack([replies[c].arrays["weights"] for c in sorted(replies)])
        self.weights = (sizes @ stacked / sizes.sum()).astype(np.float32)
        return {}

    def evaluation_message(self, cid: int) -> Message:
        return Message("evaluate", arrays={"weights": self.weights}, category="evaluation")


class FedAvg(Method):
    name = "fedavg"
    description = "FedAvg: size-weighted parameter averaging from a common initialisation"
    requires_weights = True

    def uses_public(self) -> bool:
        return False

    def validate(self, n_clients: int, settings: Any, learners: list[Any]) -> None:
        bad = sorted({type(ln).__name__ for ln in learners if not has_weights(ln)})
        if bad:
            raise FedLabelsError(f"FedAvg averages model parameters and needs a model that "
                                 f"exposes them (the torch 'mlp'); got {', '.join(bad)}. "
                                 "Use --method fedct to train models that cannot be averaged.")
        shapes = {repr({k: v for k, v in ln.get_params().items() if k != "random_state"})
                  for ln in learners}
        if len(shapes) > 1:
            raise FedLabelsError("FedAvg needs the same architecture at every client; got "
                                 "different model specs.")

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        # the common initialisation: a fresh model built from the server's seed
        from sklearn.base import clone

        init = clone(learners[0]).set_params(random_state=ctx.server_seed)
        init.initialise(ctx.settings.extra["n_features"], ctx.settings.n_classes)
        return FedAvgServer(init.get_weights(), ctx.settings.period)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FedAvgClient(cid, data, learner, ctx.settings, None, X_test, y_test)
