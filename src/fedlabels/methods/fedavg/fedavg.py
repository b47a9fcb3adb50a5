"""FedAvg (McMahan et al. 2017) for learners with averageable weights (the torch MLP).

All clients start from one initialisation sent by the server; each round a client takes b
local steps from the global weights and returns its weights; the server averages them weighted
by client data size. The evaluation message carries the new global model, so every client is
evaluated on the averaged model (evaluation traffic is counted separately).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
)
from fedlabels.method.blocks import (
    GlobalModelServer,
    WeightsClient,
    broadcast,
    check_weight_learners,
    initial_weights,
    robust_average,
)
from fedlabels.method.options import Interval, MethodOptions, option
from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    HONEST_BUT_CURIOUS_SERVER,
    Payload,
    ThreatModel,
)


@dataclass(frozen=True)
class FedAvgOptions(MethodOptions):
    aggregate: str = option(
        "mean", "how the server combines the clients' weights: mean (weighted by client "
        "size), or, robust to malicious clients, the coordinate-wise median or trimmed_mean "
        "(both unweighted)", kind=str, choices=("mean", "median", "trimmed_mean"), flag=True)
    trim: float = option(
        0.2, "aggregate trimmed_mean: fraction of the clients' values left out at each end of "
        "every coordinate (rounded down)", kind=float, interval=Interval(0.0, 0.5, "neither"),
        flag=True)

    def check(self) -> None:
        if self.trim != 0.2 and self.aggregate != "trimmed_mean":
            raise FedLabelsError("trim applies only with --aggregate trimmed_mean.")


class FedAvgClient(WeightsClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["fedavg.train"] = self.train

    def train(self, message: Message) -> Message:
        self.local_steps_from(message)
        return self.weights_reply("fedavg.weights")


class FedAvgServer(GlobalModelServer):
    reply_weights, reply_size = "weights", "n"

    def __init__(self, initial: np.ndarray, period: int,
                 options: FedAvgOptions | None = None) -> None:
        super().__init__(initial, period)
        options = FedAvgOptions() if options is None else options
        self.aggregate, self.trim = options.aggregate, options.trim

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = Message("fedavg.train", arrays={"weights": self.weights},
                          config={"round": rnd, "steps": self.period})
        self.weights = robust_average(broadcast(grid, message, rnd), self.aggregate, self.trim)
        return {}


class FedAvg(Method):
    name = "fedavg"
    description = "FedAvg: size-weighted parameter averaging from a common initialisation"
    # MSE / regressors on real targets; a canary audit observes the final global model
    capabilities = Capabilities(requires_weights=True, uses_public=False,
                                supports_regression=True, canary_view="final-model")
    options_class = FedAvgOptions
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
        return FedAvgServer(initial_weights(learners, ctx), ctx.settings.period,
                            ctx.settings.options_as(FedAvgOptions))

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FedAvgClient(cid, data, learner, ctx.settings, None, X_test, y_test)
