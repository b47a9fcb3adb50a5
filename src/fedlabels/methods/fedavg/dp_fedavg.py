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
T)``; exact analytic Gaussian composition when q = 1). The options are
:class:`DPFedAvgOptions`; σ calibrated from the run's total ε (``epsilon``) uses the run's
number of rounds, and the server records every round in its privacy ledger before it,
refusing one beyond the target. The Poisson sample and
the noise come from OS entropy at the server (:func:`fedlabels.core.randomness.numpy_generator`):
amplification by subsampling needs the sample to be secret, so neither derives from the seed.

Threat model: the server is trusted to add the noise (central DP): the guarantee protects
every client's whole dataset against anyone who sees the global models (other clients, users
of the final model), not against the server, which sees the clipped updates in the clear.

``noise="discrete"`` closes the floating-point gap of that Gaussian (Mironov 2012): each
client sends its clipped update rounded to an integer grid γ (``rint(clip(Δ_i)/γ)``, a
compact integer payload), the server sums the integers exactly and adds independent discrete
Gaussians of standard deviation σ·(S/γ + √d/2), the integer sum's ℓ2 sensitivity in grid
units for a model of d parameters (Canonne, Kamath & Steinke 2020), and
w <- w + server_lr · γ · (sum + noise) / (q M) is post-processing of that integer vector
(:mod:`fedlabels.privacy.discrete_gaussian`). It is accounted by RDP only
(:mod:`fedlabels.privacy.discrete_accounting`; at q < 1 Zhu & Wang's general Poisson bound).

``aggregation="secure"`` (with ``noise="discrete"``) moves the noise to the clients and
hides each update from the server: every client adds its own discrete Gaussian share and
masks its integer update mod 2^k, and the server learns only the group's sum, a client-level
(ε, δ) against the server too (:mod:`fedlabels.methods.fedavg.dp_fedavg_secure`).

``level="record"`` is the record-level variant instead: DP-SGD at the clients, a formal
record-level (ε, δ) against everyone, the server included
(:mod:`fedlabels.methods.fedavg.dp_fedavg_record`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError, refuse_other_value
from fedlabels.core.randomness import numpy_generator
from fedlabels.data import ClientData
from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.method.blocks import (
    GlobalModelServer,
    WeightsClient,
    broadcast,
    check_weight_learners,
    initial_weights,
)
from fedlabels.method.dpsgd_client import (
    DPSGD_OPTIONS,
    example_clip_option,
    example_rate_option,
    one_of_sigma_and_epsilon,
)
from fedlabels.method.options import (
    DP_SCALE,
    POSITIVE,
    Interval,
    MethodOptions,
    delta_option,
    option,
)
from fedlabels.method.secure_member import refuse_secure_only
from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    HONEST_BUT_CURIOUS_SERVER,
    Payload,
    ThreatModel,
)
from fedlabels.privacy.discrete_gaussian import (
    check_headroom,
    default_grid,
    encode_update,
    integer_sensitivity,
    payload_dtype,
    sample_discrete_gaussian,
    squared_norm,
)
from fedlabels.privacy.events import CLIENT_LEVEL
from fedlabels.privacy.gaussian_calibration import SIGMA_GIVEN
from fedlabels.privacy.ledger import Ledger, LedgerEvents

ACCOUNTANTS = ("analytic", "rdp", "pld")
LEVELS = ("client", "record")
NOISES = ("continuous", "discrete")
AGGREGATIONS = ("plain", "secure")
#: client-level options that record-level DP-FedAvg does not read
_CLIENT_LEVEL_ONLY = ("clip", "accountant", "noise", "grid", "aggregation", "min_group",
                      "retries")
#: what aggregation secure runs with (the one line naming the valid combination)
SECURE_NEEDS = ("aggregation secure runs with level client, noise discrete, sample_rate 1 "
                "and accountant rdp or none (e.g. --noise discrete --opt aggregation=secure)")


@dataclass(frozen=True)
class DPFedAvgOptions(MethodOptions):
    clip: float = option(1.0, "L2 clipping norm S of each client update", kind=float,
                         interval=POSITIVE, flag=True)
    noise_multiplier: float | None = option(
        None, "noise multiplier σ (noise std σ·S on the sum of clipped updates; noise "
        "discrete: σ·Δ grid units on the integer sum; level record: DP-SGD's noise std σ·C "
        "on each step's sum of clipped example gradients, each client adding its own); give "
        "this or epsilon", kind=float, interval=DP_SCALE, nullable=True, flag=True)
    epsilon: float | None = option(
        None, "total (ε, δ) budget of the whole run (client-level; level record: per record "
        "of a client); σ is calibrated to it over the run's rounds (level record: rounds × "
        "period DP-SGD steps) and every round is checked against it; give this or "
        "noise_multiplier", kind=float, interval=DP_SCALE, nullable=True, flag=True)
    delta: float = delta_option("δ of the client-level (ε, δ) guarantee")
    sample_rate: float = option(1.0, "Poisson client-sampling rate q", kind=float,
                                interval=Interval(0.0, 1.0, "right"), flag=True)
    server_lr: float = option(1.0, "server learning rate η applied to the noisy mean update",
                              kind=float, interval=POSITIVE)
    accountant: str | None = option(
        None, "accountant for calibrating σ and reporting ε (analytic needs sample_rate 1; "
        "rdp calibrates in well under a second, pld in seconds); none: analytic at q = 1, "
        "else σ calibrated to PLD's ε (RDP's where PLD cannot be afforded) and the tighter "
        "of PLD and RDP reported",
        kind=str, choices=ACCOUNTANTS, nullable=True)
    noise: str = option(
        "continuous", "continuous: Gaussian noise N(0, σ²S²) drawn in floating point on the "
        "sum of float updates; discrete: clients send rint(update/grid) as integers, the "
        "server adds discrete Gaussian noise N_Z(0, (σΔ)²), Δ = S/grid + √d/2, to the "
        "integer sum (no floating-point noise in the release; RDP accountant only)",
        kind=str, choices=NOISES, flag=True)
    grid: float | None = option(
        None, "noise discrete: the fixed-point grid γ of the client updates; none: "
        "0.02·S/√d (d parameters), so the rounding adds 1 % to Δ", kind=float,
        interval=DP_SCALE, nullable=True, flag=True)
    level: str = option(
        "client", "client: clipped updates, server-side noise, client-level (ε, δ) against "
        "observers of the model; record: DP-SGD at the clients, record-level (ε, δ) against "
        "everyone, the server included (methods/fedavg/dp_fedavg_record.py)", kind=str,
        choices=LEVELS)
    example_clip: float = example_clip_option("level record")
    example_rate: float = example_rate_option("level record")
    aggregation: str = option(
        "plain", "how the clients' updates reach the server: plain: the server sees each "
        "clipped update and adds the noise (no guarantee "
        "against the server); secure: each client adds its own share of discrete Gaussian "
        "noise and masks its integer update so that the server learns only the group's sum "
        "(client-level (ε, δ) against the server too; needs noise discrete, "
        "methods/fedavg/dp_fedavg_secure.py)", kind=str, choices=AGGREGATIONS)
    min_group: int | None = option(
        None, "aggregation secure: the smallest group a client answers; its noise share has "
        "variance (σΔ)²/min_group, so min_group honest members carry the full noise; none: "
        "every client of the run", kind=int, interval=Interval(1, None), nullable=True)
    retries: int = option(
        0, "aggregation secure: the attempts a client answers over the run beyond one a round "
        "(a round retried after a dropout); each is a release, so with epsilon σ is "
        "calibrated for rounds + retries releases; 0: a round with a dropout is given up",
        kind=int, interval=Interval(0, None))

    def check(self) -> None:
        given = self.given()
        if self.level == "record":
            unused = [n for n in _CLIENT_LEVEL_ONLY if n in given]
            if unused:
                raise FedLabelsError(f"dp-fedavg option(s) {', '.join(unused)} apply only "
                                     "with level client; level record clips each example "
                                     "(example_clip) and takes its σ from --noise-multiplier "
                                     "or calibrates it from --epsilon.")
            one_of_sigma_and_epsilon("dp-fedavg level record", self.noise_multiplier,
                                     self.epsilon)
            return
        unused = [n for n in DPSGD_OPTIONS if n in given]
        if unused:
            raise FedLabelsError(f"dp-fedavg option(s) {', '.join(unused)} apply only with "
                                 "level record (--level record).")
        one_of_sigma_and_epsilon("dp-fedavg", self.noise_multiplier, self.epsilon)
        if self.aggregation == "secure":
            wrong = [f"{k} {v}" for k, v in (("noise", self.noise),
                                             ("sample_rate", self.sample_rate),
                                             ("accountant", self.accountant))
                     if (k == "noise" and v != "discrete")
                     or (k == "sample_rate" and v != 1.0)
                     or (k == "accountant" and v not in (None, "rdp"))]
            if wrong:
                why = ("; the server picks each group, so there is no sample secret from it "
                       "to amplify by" if self.sample_rate != 1.0 else "")
                raise FedLabelsError(f"dp-fedavg aggregation secure does not run with "
                                     f"{', '.join(wrong)}: {SECURE_NEEDS}{why}.")
        refuse_secure_only("dp-fedavg", self.aggregation, given, SECURE_NEEDS)
        if self.noise == "continuous" and "grid" in given:
            raise FedLabelsError("dp-fedavg option grid applies only with noise discrete "
                                 "(--noise discrete --grid G); noise continuous has no grid.")
        if self.noise == "discrete" and self.accountant in ("analytic", "pld"):
            raise FedLabelsError(f"dp-fedavg accountant {self.accountant} models the "
                                 "continuous Gaussian; with noise discrete use accountant rdp "
                                 "(or none).")
        if self.accountant == "analytic" and self.sample_rate < 1.0:
            raise FedLabelsError(f"dp-fedavg accountant analytic needs sample_rate 1, got "
                                 f"{self.sample_rate}; use rdp or pld with client sampling.")


def clip_update(update: np.ndarray, clip: float) -> tuple[np.ndarray, float]:
    """Scale ``update`` to L2 norm at most ``clip``; returns (clipped, original norm)."""
    norm = float(np.linalg.norm(update.astype(np.float64)))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return (update * scale).astype(np.float32), norm


class DPFedAvgClient(WeightsClient):
    """Returns its clipped update instead of its weights (noise discrete: rounded to the
    grid, as integers)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["dpfedavg.train"] = self.train_update

    def train_update(self, message: Message) -> Message:
        clip = self.options.clip  # the client's own S: the server's noise is scaled to it
        refuse_other_value(self.cid, "clip", message.config.get("clip"), clip)
        noise = self.options.noise
        refuse_other_value(self.cid, "noise", message.config.get("noise", "continuous"), noise,
                           read=str)
        start = np.array(message.arrays["weights"], dtype=np.float32)
        grid = None
        if noise == "discrete":  # the client's own γ: Δ and the noise are scaled to it
            grid = self.options.grid or default_grid(clip, start.size)
            refuse_other_value(self.cid, "grid", message.config.get("grid"), grid)
        self.local_steps_from(message)
        update = self.learner.get_weights() - start
        if grid is not None:
            encoded, norm = encode_update(update, clip, grid)
            return Message("dpfedavg.update", arrays={"update": encoded},
                           config={"norm": norm})
        clipped, norm = clip_update(update, clip)
        return Message("dpfedavg.update", arrays={"update": clipped},
                       config={"norm": norm})


class DPFedAvgServer(LedgerEvents, GlobalModelServer):
    """Poisson-samples clients, sums clipped updates, adds N(0, σ²S²) (noise discrete: sums
    their integer encodings exactly and adds N_Z(0, (σΔ)²)), accounts for ε."""

    state_attrs: ClassVar[tuple[str, ...]] = ("events", "sampled", "clipped_fraction")
    secret_generators: ClassVar[tuple[str, ...]] = ("rng",)  # the Poisson sample and noise
    reply_weights = "update"

    def __init__(self, initial: np.ndarray, settings: Settings) -> None:
        from fedlabels.privacy.accounting import default_gaussian_accountants
        from fedlabels.privacy.discrete_accounting import (
            DISCRETE_ACCOUNTANTS,
            calibrate_discrete_noise_multiplier,
        )
        from fedlabels.privacy.gaussian_calibration import (
            GaussianCalibration,
            calibrate_gaussian,
        )

        super().__init__(initial, settings.period)
        opts = settings.options_as(DPFedAvgOptions)
        self.clip, self.delta = opts.clip, opts.delta
        self.q, self.server_lr = opts.sample_rate, opts.server_lr
        self.noise = opts.noise
        self.discrete = opts.noise == "discrete"
        self.accountants = (DISCRETE_ACCOUNTANTS if self.discrete
                            else (opts.accountant,) if opts.accountant is not None
                            else default_gaussian_accountants(self.q))
        self.target_epsilon = opts.epsilon
        sigma = opts.noise_multiplier
        #: how σ was calibrated (None: given): the accountant whose ε meets the target
        self.calibration: GaussianCalibration | None = None
        if opts.epsilon is not None:
            self.calibration = (
                GaussianCalibration(calibrate_discrete_noise_multiplier(
                    opts.epsilon, self.delta, self.q, settings.rounds), "rdp")
                if self.discrete else calibrate_gaussian(opts.epsilon, self.delta, self.q,
                                                         settings.rounds, opts.accountant))
            sigma = self.calibration.sigma
        if sigma is None:
            raise FedLabelsError("dp-fedavg needs noise_multiplier or epsilon.")
        self.sigma = sigma
        self.rounds = settings.rounds
        self.grid = self.grid_source = self.sensitivity = None
        if self.discrete:  # the integer grid and the sum's ℓ2 sensitivity in grid units
            dim = int(self.weights.size)
            self.grid = opts.grid or default_grid(self.clip, dim)
            self.grid_source = "given" if opts.grid else "default 0.02·S/√d"
            self.sensitivity = integer_sensitivity(self.clip, self.grid, dim)
            payload_dtype(self.clip, self.grid)  # refuses a grid finer than int64 holds
            check_headroom(self.clip, self.grid, dim, settings.n_clients, self.sigma)
        # one release per round; ε and the run's budget (the total epsilon) are views of it
        self.ledger = Ledger(self.delta, opts.epsilon, what="each client",
                             gaussian_accountants=self.accountants,
                             calibrated_by=SIGMA_GIVEN if self.calibration is None
                             else self.calibration.accountant)
        self.ledger.check_plan([self._event()] * settings.rounds, f"{settings.rounds} round(s)")
        self.rng: np.random.Generator | None = None  # made where the mechanism first runs
        self.sampled: list[int] = []
        self.clipped_fraction: list[float] = []

    def _event(self) -> Any:
        """The privacy event of one round."""
        from fedlabels.privacy.events import DiscreteGaussianEvent, SampledGaussianEvent

        if self.grid is not None and self.sensitivity is not None:
            return DiscreteGaussianEvent(self.sigma, self.q, self.clip, self.grid,
                                         self.sensitivity)
        return SampledGaussianEvent(self.sigma, self.q, self.clip)

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        # recorded before the round: a release beyond the target is refused before it is made
        self.ledger.record(self._event(), tight=False)
        if self.rng is None:  # the Poisson sample and the noise: secret, from OS entropy
            self.rng = numpy_generator()
        cids = grid.client_ids
        picked = self.rng.random(len(cids)) < self.q
        chosen = [cid for cid, p in zip(cids, picked, strict=True) if p]
        config: dict[str, Any] = {"round": rnd, "steps": self.period, "clip": self.clip,
                                  "noise": self.noise}
        if self.grid is not None:
            config["grid"] = self.grid
        message = Message("dpfedavg.train", arrays={"weights": self.weights}, config=config)
        replies = broadcast(grid, message, rnd, chosen) if chosen else {}
        norms = [float(replies[cid].config["norm"]) for cid in sorted(replies)]
        expected = self.q * len(cids)  # fixed q·M, never the realised number of participants
        metrics: dict[str, float] = {}
        if self.grid is not None:  # everything after the integer release is post-processing
            released, dropped = self._discrete_release(replies, self.rng)
            self.weights = (self.weights + self.server_lr * self.grid * released / expected
                            ).astype(np.float32)
            metrics["dropped_updates"] = float(dropped)
        else:
            total = np.zeros(self.weights.shape, dtype=np.float64)
            for cid in sorted(replies):
                total += replies[cid].arrays["update"]
            noise = self.rng.normal(0.0, self.sigma * self.clip, size=total.shape)
            self.weights = (self.weights + self.server_lr * (total + noise) / expected
                            ).astype(np.float32)
        self.sampled.append(len(chosen))
        clipped = float(np.mean(np.asarray(norms) > self.clip)) if norms else 0.0
        self.clipped_fraction.append(clipped)
        return {"sampled_clients": float(len(chosen)), "clipped_fraction": clipped,
                "mean_update_norm": float(np.mean(norms)) if norms else 0.0, **metrics}

    def _discrete_release(self, replies: dict[int, Message],
                          rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """The integer release of a discrete round: the exact int64 sum of the clients'
        integer vectors plus N_Z(0, (σΔ)²) on every coordinate, and how many replies were
        dropped. A reply that is not an integer vector of the model's size is refused; one
        beyond ℓ2 norm Δ (only a client that breaks the encoding sends one) is dropped, as
        if the client had sent zeros: each client then adds a vector within Δ to the sum,
        which keeps every coordinate inside int64 and the noise calibrated to Δ."""
        assert self.sensitivity is not None
        total = np.zeros(self.weights.size, dtype=np.int64)
        dropped = 0
        for cid in sorted(replies):
            z = np.asarray(replies[cid].arrays["update"])
            if z.dtype.kind not in "iu" or z.shape != self.weights.shape:
                raise FedLabelsError(f"client {cid} sent an update that is not an integer "
                                     f"vector of {self.weights.size} coordinates (got "
                                     f"{z.dtype}, shape {z.shape}); noise discrete needs the "
                                     "clients' fixed-point encodings.")
            if squared_norm(z) > self.sensitivity ** 2:
                dropped += 1
                continue
            total += z.astype(np.int64).ravel()
        noise = sample_discrete_gaussian(self.sigma * self.sensitivity, total.size, rng)
        return (total + noise).reshape(self.weights.shape), dropped

    def result_extra(self) -> dict[str, Any]:
        spent = self.ledger.spent()
        if self.grid is not None:
            return {"privacy": self._privacy_block(spent) | self._discrete_block()}
        return {"privacy": self._privacy_block(spent)}

    def _discrete_block(self) -> dict[str, Any]:
        return {
            "mechanism": "discrete Gaussian N_Z(0, (σΔ)²) on the fixed-point integer sum of "
                         "clipped client updates (Poisson client sampling)",
            "noise": "discrete",
            "grid": self.grid,
            "grid_source": self.grid_source,
            "noise_std_grid_units": self.sigma * (self.sensitivity or 0.0),
            "sensitivity": {"value": self.sensitivity, "norm": "L2", "unit": "grid units",
                            "source": "clipping of each client update to norm S and nearest "
                                      "rounding to the grid γ: ‖rint(x/γ)‖₂ ≤ S/γ + √d/2 = Δ, "
                                      "checked exactly on the integers by client and server "
                                      "(add/remove one client moves the integer sum by at "
                                      "most Δ)"},
            "accounting": ("RDP α/(2σ²) per round (exact for integer α: CKS20 Thm 4), "
                           "converted by dp-accounting's RDP conversion" if self.q >= 1.0 else
                           "RDP by Zhu & Wang (2019)'s general Poisson-subsampling bound with "
                           "ε(α) = α/(2σ²), at integer orders; converted by dp-accounting's "
                           "RDP conversion"),
            "floating_point": "the release is an integer vector (no floating-point noise "
                              "sample leaves the server); the sampler's acceptance "
                              "probabilities are float64, so its pmf is N_Z's up to float64 "
                              "rounding",
        }

    def _privacy_block(self, spent: Any) -> dict[str, Any]:
        return {
            "method": "dp-fedavg",
            "mechanism": "Poisson-subsampled Gaussian on the sum of clipped client updates",
            **spent.to_dict(),
            "noise_multiplier": self.sigma,
            "noise_multiplier_source": (f"calibrated from target epsilon "
                                        f"{self.target_epsilon} by "
                                        f"{self.calibration.accountant}"
                                        if self.calibration is not None else SIGMA_GIVEN),
            "calibrated_by": self.ledger.calibrated_by,  # the server's ledger: given or whom
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "clip_norm": self.clip,
            "sample_rate": self.q,
            "rounds_accounted": len(self.events),
            "target": self.ledger.target_view("round", self.rounds, len(self.events)),
            "sampled_clients_per_round": self.sampled,
            "clipped_fraction_per_round": self.clipped_fraction,
            "sensitivity": {"value": self.clip, "norm": "L2",
                            "source": "clipping of each client update to norm S (add/remove "
                                      "one client changes the sum by at most S)"},
            "neighbouring": CLIENT_LEVEL,
            "unit": "per client (its whole dataset), over the whole run",
            "assumptions": list(DPFedAvg.threat_model.assumptions),
            "threat_model": "anyone observing the global models (other clients, users of the "
                            "model); not the server",
            "noise": "continuous",
            "outside_guarantee": plain_outside(self.discrete, self.q),
        }


_WHO_WAS_SAMPLED = ("which clients the secret Poisson sample picked each round (a client not "
                    "sampled sends and receives 0 bytes): the subsampling analysis assumes "
                    "the sample is hidden, so ε does not hold against a reader of these "
                    "per-client byte counts")


def plain_outside(discrete: bool, sample_rate: float) -> list[dict[str, str]]:
    """What client-level DP-FedAvg with aggregation plain publishes outside its guarantee:
    the noiseless statistics of the pre-clipping norms, the sample sizes, with noise
    discrete the dropped replies, and below sample rate 1 who was sampled (the byte
    counts)."""
    from fedlabels.method.threat import outside_entries

    size = ("not computed from private data, but the subsampling analysis assumes the "
            "Poisson sample is hidden; its size is published" if sample_rate < 1.0 else
            "every client at sample_rate 1 (not computed from private data), published")
    pairs = [
        ("rounds[].server.mean_update_norm", "mean of the clients' pre-clipping update "
         "norms, published without noise"),
        ("rounds[].server.clipped_fraction", "fraction of sampled clients whose update "
         "was clipped, from the pre-clipping norms, published without noise"),
        ("privacy.clipped_fraction_per_round", "the same fractions, every round"),
        ("rounds[].server.sampled_clients", size),
        ("privacy.sampled_clients_per_round", "the same sample sizes, every round")]
    if discrete:
        pairs.append(("rounds[].server.dropped_updates", "noise discrete: the number of "
                      "sampled replies beyond ℓ2 norm Δ, dropped by the server (an honest "
                      "client never sends one), published without noise"))
    if sample_rate < 1.0:
        pairs += [(key, _WHO_WAS_SAMPLED) for key in (
            "rounds[].bytes_up", "rounds[].bytes_down", "communication.bytes_up_per_round",
            "communication.bytes_down_per_round")]
    return outside_entries(pairs)


class DPFedAvg(Method):
    """FedAvg with clipped client updates, Gaussian noise and Poisson client sampling."""

    name = "dp-fedavg"
    description = ("DP-FedAvg: clipped client updates, Gaussian noise σS on the sum, Poisson "
                   "client sampling; client-level (ε, δ) via dp-accounting (noise discrete: "
                   "integer updates on a grid, discrete Gaussian on their sum; aggregation "
                   "secure: each client adds its noise share and masks, the server learns "
                   "only the sum; level record: DP-SGD at the clients, record-level)")
    options_class = DPFedAvgOptions
    roster_stake = ("as every peer of this site's secure-aggregation group it then removes "
                    "their masks and noise shares and sees this site's clipped update with "
                    "its own noise share only, below the run's ε")
    # secret Poisson sampling of clients, accounted for; the DP claim covers the global
    # models, so a canary audit observes the final one
    capabilities = Capabilities(requires_weights=True, uses_public=False,
                                own_client_sampling="sample_rate", canary_view="final-model")
    threat_model = ThreatModel(
        view="clipped-updates",
        adversary=HONEST_BUT_CURIOUS_SERVER + "; the server is trusted to add the noise "
        "(central DP), so the guarantee is not stated against it",
        sees="each sampled client's clipped model update every round, in the clear (the "
             "Gaussian noise is added by the server afterwards)",
        guarantee="formal",
        against="anyone observing the global models (other clients, users of the final "
                "model); not the server",
        neighbouring=CLIENT_LEVEL,
        assumptions=(
            "the server samples clients, clips nothing itself and adds the noise "
            "honestly (central DP); it sees the clipped updates in the clear",
            "the guarantee covers the sequence of global models released each round",
            "clients' local models after their last local training are not covered",
        ),
        payloads=(
            Payload("dpfedavg.update", "update", "update", note="central DP: the server sees "
                    "each sampled client's clipped update in the clear (noise discrete: as "
                    "integers on the grid γ); the guarantee is against observers of the global "
                    "model, which carries the noise"),
            Payload("dpfedavg.update", "norm", "metric", source="config", note="the L2 norm "
                    "of the update before clipping, sent to the server in the clear"),
            Payload("dpfedavg.dp_update", "update", "update", covered=True, note="level "
                    "record: post-processing of the client's DP-SGD steps (formal "
                    "record-level (ε, δ) against everyone, set per run in privacy)"),
            Payload("dpfedavg.dp_update", "n", "metric", source="config", note="level "
                    "record: the client's number of records (aggregation weight), in the "
                    "clear"),
            Payload("dpfedavg.masked", "masked", "update", covered=True, note="aggregation "
                    "secure: the client's integer update plus its own discrete Gaussian "
                    "share, masked mod 2^k by pairwise masks that cancel only in the group's "
                    "sum (formal client-level (ε, δ) against the server too, set per run in "
                    "privacy)"),
            Payload("dpfedavg.key", "pub", "crypto", note="aggregation secure: the client's "
                    "fresh X25519 public key of the round (no private data)"),
            Payload("dpfedavg.key", "sig", "crypto", note="aggregation secure: the "
                    "client's identity-key signature of its round key (no private data)"),
            *EVALUATION_PAYLOADS),
        # each mode publishes other values: its server lists them (plain_outside,
        # dp_fedavg_record.RECORD_OUTSIDE, dp_fedavg_secure.SECURE_OUTSIDE)
        outside=())

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        check_weight_learners("DP-FedAvg", learners)
        if settings.options_as(DPFedAvgOptions).level == "record":
            from fedlabels.learners.dpsgd import check_dpsgd_learner

            for cid, learner in enumerate(learners):
                check_dpsgd_learner(learner, f"client {cid}")

    def extension_refusal(self, settings: Settings, learners: list[Any]) -> str | None:
        if settings.options_as(DPFedAvgOptions).epsilon is not None:
            return ("the noise multiplier is calibrated from the total ε over the planned "
                    "rounds; rerun with the new --rounds, or give --noise-multiplier")
        return super().extension_refusal(settings, learners)

    def trusted_setup(self, settings: Settings, n_clients: int) -> Any:
        """aggregation secure: the sites' identity keys, the roster and the run id
        (:func:`fedlabels.secure.identity.trusted_setup`); otherwise none."""
        if settings.options_as(DPFedAvgOptions).aggregation != "secure":
            return None
        from fedlabels.secure.identity import trusted_setup

        return trusted_setup(range(n_clients))

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        opts = ctx.settings.options_as(DPFedAvgOptions)
        if opts.aggregation == "secure":
            from fedlabels.methods.fedavg.dp_fedavg_secure import DPFedAvgSecureServer

            return DPFedAvgSecureServer(initial_weights(learners, ctx), ctx.settings, opts)
        if opts.level == "record":
            from fedlabels.methods.fedavg.dp_fedavg_record import DPFedAvgRecordServer

            return DPFedAvgRecordServer(initial_weights(learners, ctx), ctx.settings, opts)
        return DPFedAvgServer(initial_weights(learners, ctx), ctx.settings)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        opts = ctx.settings.options_as(DPFedAvgOptions)
        if opts.aggregation == "secure":
            from fedlabels.methods.fedavg.dp_fedavg_secure import DPFedAvgSecureClient

            return DPFedAvgSecureClient(cid, data, learner, ctx.settings, None, X_test, y_test,
                                        trust=ctx.trust)
        if opts.level == "record":
            from fedlabels.methods.fedavg.dp_fedavg_record import DPFedAvgRecordClient

            return DPFedAvgRecordClient(cid, data, learner, ctx.settings, None, X_test, y_test)
        return DPFedAvgClient(cid, data, learner, ctx.settings, None, X_test, y_test)
