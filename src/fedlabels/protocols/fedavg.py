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
from fedlabels.protocols.base import ClientRole, Grid, Method, MethodContext, ServerRole
from fedlabels.protocols.blocks import (
    GlobalModelServer,
    WeightsClient,
    broadcast,
    check_weight_learners,
    initial_weights,
    size_weighted_average,
)
from fedlabels.protocols.threat import (
    EVALUATION_PAYLOADS,
    HONEST_BUT_CURIOUS_SERVER,
    Payload,
    ThreatModel,
)


class FedAvgClient(WeightsClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["fedavg.train"] = self.train

    def train(self, message: Message) -> Message:
        self.local_steps_from(message)
        return self.weights_reply("fedavg.weights")


class FedAvgServer(GlobalModelServer):
    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = Message("fedavg.train", arrays={"weights": self.weights},
                          config={"round": rnd, "steps": self.period})
        self.weights = size_weighted_average(broadcast(grid, message, rnd))
        return {}


class FedAvg(Method):
    name = "fedavg"
    description = "FedAvg: size-weighted parameter averaging from a common initialisation"
    requires_weights = True
    uses_public = False
    threat_model = ThreatModel(
        view="parameters",
        adversary=HONEST_BUT_CURIOUS_SERVER,
        sees="each client's model parameters after its local training, every round",
        guarantee="none",
        payloads=(Payload("fedavg.weights", "weights", "weights"),
                  Payload("fedavg.weights", "n", "size", source="config"),
                  *EVALUATION_PAYLOADS))

    def validate(self, n_clients: int, settings: Any, learners: list[Any]) -> None:
        check_weight_learners("FedAvg", learners)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return FedAvgServer(initial_weights(learners, ctx), ctx.settings.period)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FedAvgClient(cid, data, learner, ctx.settings, None, X_test, y_test)
