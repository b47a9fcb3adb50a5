"""FedDF (Lin et al., NeurIPS 2020): FedAvg followed by server-side ensemble distillation.

Clients run FedAvg's round unchanged (:class:`~fedlabels.methods.fedavg.fedavg.FedAvgClient`:
local steps from the global weights, weights back). The server then

1. averages the weights (size-weighted FedAvg) into the student's starting point;
2. rebuilds every replying client's model from its weights and forms the **ensemble**
   target on the unlabelled set U: ``softmax(mean_k z_k / T)``, the softmax of the clients'
   averaged logits z_k at temperature T (log-probabilities differ from logits by a per-row
   constant, which the softmax cancels, so they are averaged instead);
3. distils the ensemble into the averaged model: ``server_steps`` Adam steps of soft
   cross-entropy on minibatches of U (a fresh optimizer each round, seeded from the server
   seed and the round), and sends the result as the next global model.

FedDF's paper distils on unlabelled data held by the server and stops early on a validation
set; here the server distils on U for a fixed number of steps (no labels anywhere). The
server needs U: the simulator gives it; the Flower ServerApp holds no copy of U, so FedDF is
refused there. Needs the torch ``mlp`` (parameters to average, gradient steps to distil).
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
    broadcast,
    check_weight_learners,
    initial_weights,
    size_weighted_average,
)
from fedlabels.method.options import POSITIVE, STEPS, MethodOptions, option
from fedlabels.method.threat import ThreatModel
from fedlabels.methods.distillation.dsfl import tempered_softmax
from fedlabels.methods.fedavg.fedavg import FedAvg, FedAvgClient

#: why the Flower ServerApp cannot run FedDF
FLOWER_REFUSAL = ("feddf distils on U at the server, and the Flower ServerApp holds no copy "
                  "of U (only the sites do); run feddf in the simulator (fedlabels run).")


@dataclass(frozen=True)
class FedDFOptions(MethodOptions):
    server_steps: int | None = option(
        None, "server-side distillation steps on U per round; none: period", kind=int,
        interval=STEPS, nullable=True)
    temperature: float = option(
        1.0, "softmax temperature T of the ensemble's averaged logits (the distillation "
        "target)", kind=float, interval=POSITIVE)


#: the smallest positive float32 (subnormal): a float32 probability of 0 stands for one below
#: it, so its log-probability is clipped there (about -103.3), not far above
PROB_FLOOR = float(np.finfo(np.float32).smallest_subnormal)


def ensemble_target(probs: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(mean_k log p_k / T)`` of (m, n, C) client probabilities: the softmax of the
    averaged logits (a logit and a log-probability differ by a per-row constant).

    Exact while every logit gap is below ~103 nats (float32 probabilities down to its
    smallest subnormal); a clip at 1e-12 capped each client's confidence at 27.6 nats, so two
    confident clients that disagree (gaps 50 and 30) tied instead of the first winning.
    """
    logits = np.log(np.clip(np.asarray(probs, dtype=np.float64), PROB_FLOOR, 1.0)).mean(axis=0)
    return tempered_softmax(logits, temperature)


def kl_to(target: np.ndarray, probs: np.ndarray) -> float:
    """Mean KL(target || probs) over rows (nats)."""
    t = np.clip(target, 1e-12, 1.0)
    p = np.clip(np.asarray(probs, dtype=np.float64), 1e-12, 1.0)
    return float((t * (np.log(t) - np.log(p))).sum(axis=1).mean())


class FedDFServer(GlobalModelServer):
    """FedAvg's averaging, then ensemble distillation of the clients' models on U."""

    reply_weights, reply_size = "weights", "n"

    def __init__(self, initial: np.ndarray, period: int, learner: Any, X_public: np.ndarray,
                 options: FedDFOptions, seed: int, n_features: int, n_classes: int) -> None:
        super().__init__(initial, period)
        self.learner, self.X_public, self.seed = learner, X_public, seed
        self.shape = (n_features, n_classes)
        self.steps = period if options.server_steps is None else options.server_steps
        self.temperature = options.temperature

    def model_from(self, weights: np.ndarray, rnd: int) -> Any:
        """A model of the clients' architecture holding ``weights`` (fresh optimizer)."""
        from sklearn.base import clone

        rs = int(np.random.SeedSequence([self.seed, rnd, 0xFEDDF]).generate_state(1)[0]
                 % (2**31 - 1))
        model = clone(self.learner).set_params(random_state=rs)
        model.initialise(*self.shape)
        model.set_weights(weights)
        return model

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        message = Message("fedavg.train", arrays={"weights": self.weights},
                          config={"round": rnd, "steps": self.period})
        replies = broadcast(grid, message, rnd)
        student = self.model_from(size_weighted_average(replies), rnd)
        U = self.X_public
        probs = np.stack([self.model_from(replies[c].arrays["weights"], rnd).predict_proba(U)
                          for c in sorted(replies)])
        target = ensemble_target(probs, self.temperature)
        before = student.predict_proba(U)
        student.distill_steps(U, target.astype(np.float32), self.steps)
        after = student.predict_proba(U)
        self.weights = np.asarray(student.get_weights(), dtype=np.float32)
        agree = target.argmax(axis=1)
        return {"ensemble_kl_before": kl_to(target, before),
                "ensemble_kl_after": kl_to(target, after),
                "ensemble_agreement_before": float(np.mean(before.argmax(axis=1) == agree)),
                "ensemble_agreement_after": float(np.mean(after.argmax(axis=1) == agree))}

    def result_extra(self) -> dict[str, Any]:
        return {"feddf": {"server_steps": self.steps, "temperature": self.temperature,
                          "distilled_on": f"U ({len(self.X_public)} unlabelled points), "
                                          "at the server",
                          "target": "softmax of the clients' averaged logits / T"}}


class FedDF(Method):
    name = "feddf"
    description = ("FedDF: FedAvg, then the server distils the ensemble of the clients' "
                   "models (averaged logits on U) into the averaged model")
    # clients never use U; the server distils on it
    capabilities = Capabilities(requires_weights=True, uses_public=False)
    options_class = FedDFOptions
    threat_model = ThreatModel(
        view="parameters",
        adversary=FedAvg.threat_model.adversary,
        sees="each client's model parameters after its local training, every round (as "
             "FedAvg); the server also runs them on U",
        guarantee="none",
        payloads=FedAvg.threat_model.payloads)

    def check_clients(self, n_clients: int, settings: Any) -> None:
        """An ensemble of one is that client's own model: FedDF is then FedAvg of one."""
        if n_clients < 2:
            raise FedLabelsError(
                f"FedDF needs at least 2 clients, got {n_clients}. It distils the ensemble "
                "of the clients' models, and an ensemble of one client is its own model; use "
                "--clients 2 or more (Python: clients=2), or --method fedavg for one client.")

    def validate(self, n_clients: int, settings: Any, learners: list[Any]) -> None:
        self.check_clients(n_clients, settings)
        check_weight_learners("FedDF", learners)
        if not callable(getattr(learners[0], "distill_steps", None)):
            raise FedLabelsError("FedDF distils at the server and needs a model trained by "
                                 "gradient steps on soft targets (the torch 'mlp').")

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        if ctx.X_public is None:
            raise FedLabelsError(FLOWER_REFUSAL)
        s = ctx.settings
        return FedDFServer(initial_weights(learners, ctx), s.period, learners[0],
                           np.asarray(ctx.X_public), s.options_as(FedDFOptions), ctx.server_seed,
                           s.n_features, s.n_classes)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return FedAvgClient(cid, data, learner, ctx.settings, None, X_test, y_test)
