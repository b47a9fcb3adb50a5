"""Baselines without collaboration: local-only training, and centralized (pooled) training.

Neither shares anything derived from data. The simulator still drives training with small
``control`` messages (how many steps to take), which are reported separately from protocol
communication; a real deployment would not need them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.learners import is_iterative
from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
)
from fedlabels.method.blocks import broadcast
from fedlabels.method.message_config import own_count
from fedlabels.method.threat import EVALUATION_PAYLOADS, HONEST_BUT_CURIOUS_SERVER, ThreatModel


class LocalClient(ClientRole):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["local.train"] = self.train

    def train(self, message: Message) -> Message:
        # a refit learner on unchanged data gives the same model: fit it once
        if is_iterative(self.learner) or not self.fitted:
            self.train_on(self.data.X, self.data.y, own_count(message.config, "steps", self.cid,
                                                                 self.settings.period))
        return Message("local.done", category="control")


class LocalServer(ServerRole):
    def __init__(self, period: int) -> None:
        self.period = period

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        broadcast(grid, Message("local.train", config={"steps": self.period},
                                category="control"), rnd)
        return {}


class LocalOnly(Method):
    name = "local"
    description = "local-only: each client trains on its own data, no communication"
    # MSE / regressors on real targets
    capabilities = Capabilities(uses_public=False, supports_regression=True)
    threat_model = ThreatModel(
        view="nothing-sent", adversary=HONEST_BUT_CURIOUS_SERVER,
        sees="nothing derived from private data (only step-count control messages)",
        guarantee="none", payloads=EVALUATION_PAYLOADS)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return LocalServer(ctx.settings.period)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return LocalClient(cid, data, learner, ctx.settings, None, X_test, y_test)


class Centralized(LocalOnly):
    name = "centralized"
    description = "centralized: one model on all private data pooled (an upper reference)"
    capabilities = replace(LocalOnly.capabilities, tolerates_lost_clients=False)
    threat_model = ThreatModel(
        view="raw-data", adversary="the central party that holds the pooled data",
        sees="all private records (pooled at one party)", guarantee="none",
        payloads=EVALUATION_PAYLOADS)

    def client_datasets(self, clients: list[ClientData]) -> list[ClientData]:
        return [ClientData(np.concatenate([c.X for c in clients]),
                           np.concatenate([c.y for c in clients]))]
