"""Record-level DP-FedAvg (``dp-fedavg --opt level=record``): DP-SGD at the clients.

Each round every client is sampled with probability q (``sample_rate``, as in client-level
DP-FedAvg, but not used for amplification: the server sees who took part), starts from the
global weights, takes ``period`` DP-SGD steps on its private data
(:mod:`fedlabels.learners.dpsgd`: Poisson rate ``example_rate``, per-example clip
``example_clip``, noise σ·C from its own OS entropy) and sends its update; the server
averages the updates weighted by the clients' sizes. Every update is post-processing of the
client's DP-SGD steps, so each client's transcript is (ε, δ)-DP for one of its records
(added or removed) against **everyone, the server included**, with σ calibrated from the
total ε over rounds × period steps (or given: ``noise_multiplier``, each client enforcing
its own) and the steps each client actually took accounted with
PLD / RDP (:mod:`fedlabels.privacy.dpsgd_accounting`) — the same accountant as
DP-FedCT's ``dpsgd`` mechanism.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.randomness import numpy_generator
from fedlabels.method.base import Grid, Settings
from fedlabels.method.blocks import (
    GlobalModelServer,
    WeightsClient,
    broadcast,
    weighted_mean,
)
from fedlabels.method.dpsgd_client import DPSGDClient, dpsgd_round_config
from fedlabels.method.threat import outside_entries
from fedlabels.methods.fedct.mechanisms.dpsgd import planned_dpsgd_rounds
from fedlabels.privacy.dpsgd_accounting import (
    RECORD_ADD_REMOVE,
    DPSGDRoundEvent,
    account_dpsgd,
    dpsgd_noise,
    sigma_calibrated_by,
    sigma_source,
)
from fedlabels.privacy.ledger import Ledger, LedgerEvents

RECORD_AGAINST = ("the server, the other clients and anyone observing the global models "
                  "(every update is post-processing of the client's DP-SGD steps)")
RECORD_ASSUMPTIONS = (
    "each client runs DP-SGD honestly, its Poisson sample and noise from its own OS entropy",
    "every local step on private data is a DP-SGD step and is accounted; the updates, the "
    "global models and the weighting by client size are post-processing",
    "client sizes (the aggregation weights) and evaluation replies are outside the guarantee",
)

#: what level record publishes outside its guarantee (besides the clients' sizes ``n``)
RECORD_OUTSIDE = (
    ("rounds[].server.sampled_clients", "how many clients the server's sample asked (not "
     "computed from private data; the record-level analysis does not assume it hidden), "
     "published"),
    ("privacy.sampled_clients_per_round", "the same sample sizes, every round"),
)


class DPFedAvgRecordClient(DPSGDClient, WeightsClient):
    """Loads the global weights, takes DP-SGD steps, returns its update."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["dpfedavg.train"] = self.train_update

    def train_update(self, message: Message) -> Message:
        self.load_weights(message)
        self.ensure_built()
        start = np.array(message.arrays["weights"], dtype=np.float32)
        self.dpsgd_train(message)
        return Message("dpfedavg.dp_update",
                       arrays={"update": self.learner.get_weights() - start},
                       config={"n": len(self.data)})


class DPFedAvgRecordServer(LedgerEvents, GlobalModelServer):
    """Samples clients, averages their DP-SGD updates, accounts every client's steps."""

    state_attrs: ClassVar[tuple[str, ...]] = ("events", "sampled")
    secret_generators: ClassVar[tuple[str, ...]] = ("rng",)
    reply_weights, reply_size = "update", "n"

    def __init__(self, initial: np.ndarray, settings: Settings, options: Any) -> None:
        super().__init__(initial, settings.period)
        self.options, self.delta = options, options.delta
        self.q, self.server_lr = options.sample_rate, options.server_lr
        # σ given (noise_multiplier), or calibrated from the total ε over every planned step
        self.sigma, self.calibration = dpsgd_noise(options.noise_multiplier, options.epsilon,
                                                   self.delta, options.example_rate,
                                                   settings.rounds * settings.period)
        self.rounds = settings.rounds
        # every client's DP-SGD rounds; ε and the run's budget are views of it
        self.ledger = Ledger(self.delta, options.epsilon, what="each client", per_client=True,
                             calibrated_by=sigma_calibrated_by(self.calibration))
        self.ledger.check_plan(planned_dpsgd_rounds(settings.rounds, settings.period,
                                                    self.sigma, options),
                               f"{settings.rounds} round(s)")
        self.rng: np.random.Generator | None = None
        self.sampled: list[int] = []

    def _round(self, cids: list[int]) -> DPSGDRoundEvent:
        return DPSGDRoundEvent(self.sigma, self.options.example_rate, self.options.example_clip,
                               tuple((c, self.period) for c in sorted(cids)))

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        if self.rng is None:
            self.rng = numpy_generator()
        cids = grid.client_ids
        chosen = [c for c, p in zip(cids, self.rng.random(len(cids)) < self.q, strict=True)
                  if p]
        # stops before a round that would take any client beyond the target
        self.ledger.check([self._round(chosen)], tight=False)
        config = {"round": rnd, "steps": self.period,
                  **dpsgd_round_config(self.sigma, self.options)}
        message = Message("dpfedavg.train", arrays={"weights": self.weights}, config=config)
        replies = broadcast(grid, message, rnd, chosen) if chosen else {}
        if replies:
            mean = weighted_mean(replies, "update")
            self.weights = (self.weights + self.server_lr * mean).astype(np.float32)
        self.ledger.record(self._round(list(replies)), tight=False)
        self.sampled.append(len(chosen))
        return {"sampled_clients": float(len(chosen))}

    def result_extra(self) -> dict[str, Any]:
        return {"privacy": {
            "method": "dp-fedavg",
            "level": "record",
            "mechanism": "DP-SGD at every client (Poisson sampling, per-example clipping, "
                         "Gaussian noise); the server averages the updates",
            **account_dpsgd(self.events, self.delta),  # per client; ε: the ledger's
            **self.ledger.spent().to_dict(),
            "noise_multiplier": self.sigma,
            "noise_multiplier_source": sigma_source(self.options.epsilon, self.calibration),
            "calibrated_by": self.ledger.calibrated_by,  # the server's ledger: given or whom
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "example_rate": self.options.example_rate,
            "example_clip": self.options.example_clip,
            "sample_rate": self.q,
            "rounds_accounted": len(self.events),
            "target": self.ledger.target_view("round", self.rounds, len(self.events)),
            "sampled_clients_per_round": self.sampled,
            "guarantee": "formal",
            "guarantee_against": RECORD_AGAINST,
            "neighbouring": RECORD_ADD_REMOVE,
            "composition": "adaptive, over every DP-SGD step each client took in all rounds",
            "unit": "per client (one record of it), over the whole run; the worst client",
            "assumptions": list(RECORD_ASSUMPTIONS),
            "threat_model": "the server and everyone else see each sampled client's update "
                            "(post-processing of its DP-SGD steps)",
            "outside_guarantee": outside_entries(RECORD_OUTSIDE),
        }}
