"""DP-FedAvg (McMahan et al. 2018): client-level DP for FedAvg.

Each round the server samples every client independently with probability q (Poisson
sampling); a sampled client takes b local steps from the global weights w and returns its
**update** Δ = w_local - w clipped to L2 norm S (``Δ · min(1, S / ||Δ||)`` — the update, not
the parameters). The server adds Gaussian noise of standard deviation σ·S to the *sum* of the
clipped updates and divides by the fixed expected number of participants q·M (not the
realised one, which would depend on who took part):

    w <- w + server_lr · (Σ_i clip(Δ_i) + N(0, σ² S² I)) / (q M).

Adding or removing one client changes the sum by at most S, so each round is the
Poisson-subsampled Gaussian mechanism with noise multiplier σ, accounted with dp-accounting
under ADD_OR_REMOVE_ONE (``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)),
T)``; exact analytic Gaussian composition when q = 1).

Options: ``clip`` (S, default 1.0), ``noise_multiplier`` (σ) **or** ``epsilon`` (target ε over
the run, σ calibrated; needs the number of rounds), ``delta`` (1e-5), ``sample_rate`` (q,
default 1.0), ``server_lr`` (1.0), ``accountant`` (calibration and report; default:
analytic for q = 1; for q < 1 σ is calibrated with RDP and ε reported as the tighter of PLD
and RDP).

Threat model: the server is trusted to add the noise (central DP): the guarantee protects
every client's whole dataset against anyone who sees the global models (other clients, users
of the final model), not against the server, which sees the clipped updates in the clear.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.protocols.base import ClientRole, Grid, MethodContext, ServerRole, Settings
from fedlabels.protocols.fedavg import FedAvg, FedAvgClient, FedAvgServer

DEFAULT_DELTA = 1e-5
_KNOWN_OPTIONS = {"clip", "noise_multiplier", "epsilon", "delta", "sample_rate", "server_lr",
                  "accountant", "n_features", "total_rounds"}
_INTERNAL = {"n_features", "total_rounds"}  # set by the simulator


def clip_update(update: np.ndarray, clip: float) -> tuple[np.ndarray, float]:
    """Scale ``update`` to L2 norm at most ``clip``; returns (clipped, original norm)."""
    norm = float(np.linalg.norm(update.astype(np.float64)))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return (update * scale).astype(np.float32), norm


def check_dp_fedavg_options(settings: Settings) -> None:
    from fedlabels.privacy.validation import (
        check_clip_norm,
        check_delta,
        check_epsilon,
        check_noise_multiplier,
        check_sampling_rate,
    )

    opts = dict(settings.extra)
    unknown = sorted(set(opts) - _KNOWN_OPTIONS)
    if unknown:
        raise FedLabelsError(f"unknown dp-fedavg option(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(_KNOWN_OPTIONS - _INTERNAL))}.")
    check_clip_norm(opts.get("clip", 1.0))
    check_delta(opts.get("delta", DEFAULT_DELTA))
    check_sampling_rate(opts.get("sample_rate", 1.0))
    has_sigma, has_eps = "noise_multiplier" in opts, "epsilon" in opts
    if has_sigma == has_eps:
        raise FedLabelsError("dp-fedavg needs exactly one of noise_multiplier (σ, e.g. "
                             "--noise-multiplier 1.0) and epsilon (a target ε over the run, "
                             "e.g. --epsilon 8, σ is then calibrated).")
    if has_sigma:
        check_noise_multiplier(opts["noise_multiplier"])
    else:
        check_epsilon(opts["epsilon"])


class DPFedAvgClient(FedAvgClient):
    """Returns its clipped update instead of its weights."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["dpfedavg.train"] = self.train_update

    def train_update(self, message: Message) -> Message:
        self.ensure_built()
        start = np.array(message.arrays["weights"], dtype=np.float32)
        self.learner.set_weights(start)
        self.train_on(self.data.X, self.data.y, int(message.config["steps"]))
        clipped, norm = clip_update(self.learner.get_weights() - start,
                                    float(message.config["clip"]))
        return Message("dpfedavg.update", arrays={"update": clipped},
                       config={"norm": norm})


class DPFedAvgServer(FedAvgServer):
    """Poisson-samples clients, sums clipped updates, adds N(0, σ²S²), accounts for ε."""

    def __init__(self, initial_weights: np.ndarray, settings: Settings, seed: int) -> None:
        from fedlabels.privacy.accounting import (
            calibrate_noise_multiplier,
            default_gaussian_accountants,
        )

        super().__init__(initial_weights, settings.period)
        opts = dict(settings.extra)
        self.clip = float(opts.get("clip", 1.0))
        self.delta = float(opts.get("delta", DEFAULT_DELTA))
        self.q = float(opts.get("sample_rate", 1.0))
        self.server_lr = float(opts.get("server_lr", 1.0))
        self.accountants = ((str(opts["accountant"]),) if "accountant" in opts
                            else default_gaussian_accountants(self.q))
        self.target_epsilon = opts.get("epsilon")
        if self.target_epsilon is not None:
            rounds = opts.get("total_rounds")
            if not rounds:
                raise FedLabelsError("calibrating σ from epsilon needs the number of rounds "
                                     "(the simulator passes it; elsewhere --opt "
                                     "total_rounds=R).")
            self.sigma = calibrate_noise_multiplier(
                float(self.target_epsilon), self.delta, self.q, int(rounds),
                str(opts["accountant"]) if "accountant" in opts else None)
        else:
            self.sigma = float(opts["noise_multiplier"])
        self.rng = np.random.default_rng([seed, 0xFEDA])
        self.events: list[Any] = []
        self.sampled: list[int] = []
        self.clipped_fraction: list[float] = []

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        from fedlabels.privacy.events import SampledGaussianEvent

        cids = grid.client_ids
        picked = self.rng.random(len(cids)) < self.q
        chosen = [cid for cid, p in zip(cids, picked, strict=True) if p]
        message = Message("dpfedavg.train", arrays={"weights": self.weights},
                          config={"round": rnd, "steps": self.period, "clip": self.clip})
        replies = grid.exchange({cid: message for cid in chosen}, rnd) if chosen else {}
        total = np.zeros(self.weights.shape, dtype=np.float64)
        norms = []
        for cid in sorted(replies):
            total += replies[cid].arrays["update"]
            norms.append(float(replies[cid].config["norm"]))
        noise = self.rng.normal(0.0, self.sigma * self.clip, size=total.shape)
        expected = self.q * len(cids)
        self.weights = (self.weights + self.server_lr * (total + noise) / expected
                        ).astype(np.float32)
        self.events.append(SampledGaussianEvent(self.sigma, self.q, self.clip))
        self.sampled.append(len(chosen))
        clipped = float(np.mean(np.asarray(norms) > self.clip)) if norms else 0.0
        self.clipped_fraction.append(clipped)
        return {"sampled_clients": float(len(chosen)), "clipped_fraction": clipped,
                "mean_update_norm": float(np.mean(norms)) if norms else 0.0}

    def result_extra(self) -> dict[str, Any]:
        from fedlabels.privacy.accounting import account_gaussian
        from fedlabels.privacy.events import CLIENT_LEVEL

        spent = account_gaussian(self.events, self.delta, self.accountants)
        return {"privacy": {
            "method": "dp-fedavg",
            "mechanism": "Poisson-subsampled Gaussian on the sum of clipped client updates",
            **spent.to_dict(),
            "noise_multiplier": self.sigma,
            "noise_multiplier_source": ("calibrated from target epsilon "
                                        f"{self.target_epsilon}" if self.target_epsilon
                                        is not None else "given"),
            "clip_norm": self.clip,
            "sample_rate": self.q,
            "rounds_accounted": len(self.events),
            "sampled_clients_per_round": self.sampled,
            "clipped_fraction_per_round": self.clipped_fraction,
            "sensitivity": {"value": self.clip, "norm": "L2",
                            "source": "clipping of each client update to norm S (add/remove "
                                      "one client changes the sum by at most S)"},
            "neighbouring": CLIENT_LEVEL,
            "unit": "per client (its whole dataset), over the whole run",
            "assumptions": [
                "the server samples clients, clips nothing itself and adds the noise "
                "honestly (central DP); it sees the clipped updates in the clear",
                "the guarantee covers the sequence of global models released each round",
                "clients' local models after their last local training are not covered",
            ],
            "threat_model": "anyone observing the global models (other clients, users of the "
                            "model); not the server",
        }}


class DPFedAvg(FedAvg):
    """FedAvg with clipped client updates, Gaussian noise and Poisson client sampling."""

    name = "dp-fedavg"
    description = ("DP-FedAvg: clipped client updates, Gaussian noise σS on the sum, Poisson "
                   "client sampling; client-level (ε, δ) via dp-accounting")

    def validate(self, n_clients: int, settings: Any, learners: list[Any]) -> None:
        super().validate(n_clients, settings, learners)
        check_dp_fedavg_options(settings)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        base = super().make_server(ctx, n_public, learners, client_sizes)
        return DPFedAvgServer(base.weights, ctx.settings, ctx.server_seed)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        return DPFedAvgClient(cid, data, learner, ctx.settings, None, X_test, y_test)
