"""σ of T (subsampled) Gaussian mechanisms from a target (ε, δ), by the accountant that reports ε.

``analytic`` (q = 1) inverts the analytic Gaussian exactly. ``rdp`` is
``dp_accounting.calibrate_dp_mechanism`` on the RDP accountant. ``pld`` (the default at
q < 1) calibrates σ to the PLD ε a ledger reports (:func:`~fedlabels.privacy.accounting.
gaussian_epsilon`), searching below RDP's σ (an upper bracket: PLD is tighter): a bisection
on a coarse PLD (:data:`PLD_SEARCH_DISCRETIZATION`), then the reported discretisation
(:data:`~fedlabels.privacy.accounting.PLD_DISCRETIZATION`) steps σ up until its ε is within
the target and down until one step less exceeds it. So the reported PLD ε of the returned σ
is at most the target and σ·(1 - :data:`CALIBRATION_RTOL`) exceeds it. Where PLD cannot be
afforded or would not be the ε reported (a target above
:data:`~fedlabels.privacy.accounting.PLD_ABOVE_RDP_EPSILON`, or RDP's ε of the PLD σ above
it, where reporting skips PLD) RDP's σ is returned and the result names ``rdp`` with the
reason. The search is deterministic: the server and every client calibrating from its own
options get the same σ.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.accounting import (
    PLD_ABOVE_RDP_EPSILON,
    default_calibration_accountant,
    gaussian_epsilon,
    pld_of_one_step,
    require_dp_accounting,
)
from fedlabels.privacy.search import bisect_monotone
from fedlabels.privacy.validation import check_delta, check_epsilon, check_sampling_rate

CALIBRATION_ACCOUNTANTS = ("analytic", "rdp", "pld")
#: how σ came where a party's options gave it (``noise_multiplier``) instead of a target to
#: calibrate it to: a ledger's ``calibrated_by``, a result's ``noise_multiplier_source``
SIGMA_GIVEN = "given"
#: the PLD calibration's tightness: σ·(1 - this) exceeds the target under the reported PLD
CALIBRATION_RTOL = 1e-3
#: the PLD discretisation of the search (10x coarser than the reported one: its ε is within
#: 0.15 % of it and about 6x cheaper); the final σ is checked at the reported one
PLD_SEARCH_DISCRETIZATION = 1e-3
#: how far below RDP's σ the PLD search looks (0.9 per step, 8 steps: 0.43 σ_RDP)
_STEP_DOWN, _STEPS_DOWN = 0.9, 8
#: the most steps of 1 + :data:`CALIBRATION_RTOL` the reported discretisation takes down
_MAX_FINE_STEPS = 100


@dataclass(frozen=True)
class GaussianCalibration:
    """A calibrated noise multiplier σ, the accountant whose ε meets the target at it, and
    why that is not the one asked for (``note``; empty when it is)."""

    sigma: float
    accountant: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"accountant": self.accountant}
        if self.accountant == "pld":
            out["tolerance"] = (f"the PLD ε of σ is at most the target; that of "
                                f"σ·(1 - {CALIBRATION_RTOL:g}) exceeds it")
        if self.note:
            out["note"] = self.note
        return out


class _MemoisedRdp:
    """The accountant ``calibrate_dp_mechanism`` asks for, answering with
    :func:`gaussian_epsilon` (``RdpAccountant``'s own numbers, memoised): its bracket search
    and Brent's method evaluate the lower end more than once, and every calibration at one
    sampling rate shares that σ's curve (the slowest to compute)."""

    def __init__(self, sampling_rate: float, rounds: int) -> None:
        import dp_accounting as dpa

        self.ledger, self.sigma = dpa.NoOpDpEvent(), 0.0
        self.sampling_rate, self.rounds = sampling_rate, rounds

    def compose(self, noise_multiplier: float) -> _MemoisedRdp:
        self.sigma = noise_multiplier
        return self

    def get_epsilon(self, delta: float) -> float:
        return gaussian_epsilon(self.sigma, self.sampling_rate, self.rounds, delta, "rdp")


@functools.lru_cache(maxsize=64)  # pure in its arguments; the server and each client ask
def calibrate_gaussian(target_epsilon: float, delta: float, sampling_rate: float,
                       rounds: int, accountant: str | None = None) -> GaussianCalibration:
    """The smallest σ whose ``rounds``-fold (subsampled) Gaussian is (target ε, δ)-DP under
    ``accountant`` (None: ``analytic`` at q = 1, ``pld`` else), and the accountant that
    calibrated it (``rdp`` where PLD falls back, see the module)."""
    require_dp_accounting()
    import dp_accounting as dpa

    check_epsilon(target_epsilon, "target epsilon")
    check_delta(delta)
    check_sampling_rate(sampling_rate)
    if rounds < 1:
        raise FedLabelsError(f"rounds must be >= 1, got {rounds}.")
    accountant = accountant or default_calibration_accountant(sampling_rate)
    if accountant not in CALIBRATION_ACCOUNTANTS:
        raise FedLabelsError(f"unknown accountant {accountant!r}; use "
                             f"{', '.join(CALIBRATION_ACCOUNTANTS)}.")
    if accountant == "analytic":
        if sampling_rate < 1.0:
            raise FedLabelsError("the analytic Gaussian calibration needs sampling rate 1.")
        return GaussianCalibration(
            float(dpa.get_sigma_gaussian(target_epsilon, delta)) * math.sqrt(rounds),
            "analytic")
    lower = 1e-3
    if gaussian_epsilon(lower, sampling_rate, rounds, delta, "rdp") <= target_epsilon:
        return GaussianCalibration(lower, "rdp")  # more noise than needed is still DP
    sigma_rdp = float(dpa.calibrate_dp_mechanism(
        lambda: _MemoisedRdp(sampling_rate, rounds), lambda sigma: sigma,
        target_epsilon, delta, bracket_interval=dpa.LowerEndpointAndGuess(lower, 1.0),
        tol=1e-5))
    if accountant == "rdp":
        return GaussianCalibration(sigma_rdp, "rdp")
    if target_epsilon > PLD_ABOVE_RDP_EPSILON:
        return GaussianCalibration(sigma_rdp, "rdp", (
            f"target ε above {PLD_ABOVE_RDP_EPSILON:g}: PLD's grid would take gigabytes "
            "there (and is not reported), so σ is RDP's"))
    sigma = _pld_sigma(target_epsilon, delta, sampling_rate, rounds, sigma_rdp)
    if sigma is None:
        return GaussianCalibration(sigma_rdp, "rdp", "PLD is no tighter than RDP here, so "
                                   "σ is RDP's")
    if math.isnan(sigma):
        return GaussianCalibration(sigma_rdp, "rdp", (
            f"RDP's ε of PLD's σ is above {PLD_ABOVE_RDP_EPSILON:g}, where PLD is not "
            "reported, so σ is RDP's"))
    return GaussianCalibration(sigma, "pld")


def calibrate_noise_multiplier(target_epsilon: float, delta: float, sampling_rate: float,
                               rounds: int, accountant: str | None = None) -> float:
    """σ of :func:`calibrate_gaussian`."""
    return calibrate_gaussian(target_epsilon, delta, sampling_rate, rounds, accountant).sigma


def _coarse_pld_epsilon(sigma: float, sampling_rate: float, rounds: int,
                        delta: float) -> float:
    """The PLD ε at :data:`PLD_SEARCH_DISCRETIZATION` (one step's PLD built and composed
    as :func:`gaussian_epsilon` does at the reported discretisation)."""
    one = pld_of_one_step(sigma, sampling_rate, PLD_SEARCH_DISCRETIZATION)
    return float(one.self_compose(rounds).get_epsilon_for_delta(delta))


def _pld_sigma(target: float, delta: float, q: float, rounds: int,
               sigma_rdp: float) -> float | None:
    """The PLD calibration below ``sigma_rdp`` (see the module); None where the reported PLD
    at ``sigma_rdp`` is not within the target, NaN where RDP's ε of PLD's σ is above
    :data:`~fedlabels.privacy.accounting.PLD_ABOVE_RDP_EPSILON` (a ledger reports RDP's
    there)."""
    def coarse(s: float) -> bool:
        return _coarse_pld_epsilon(s, q, rounds, delta) > target

    def fine(s: float) -> bool:
        return gaussian_epsilon(s, q, rounds, delta, "pld") > target

    def unreported(s: float) -> bool:  # a ledger reports RDP's ε there, not PLD's
        return gaussian_epsilon(s, q, rounds, delta, "rdp") > PLD_ABOVE_RDP_EPSILON

    hi = sigma_rdp
    if coarse(hi) and fine(hi):
        return None
    lo = hi
    for _ in range(_STEPS_DOWN):
        lo *= _STEP_DOWN
        if coarse(lo):
            break
        hi = lo
    else:  # far below RDP's σ: within the target, maybe not tight
        lo = hi
    _, hi = bisect_monotone(coarse, lo, hi, rel_tol=CALIBRATION_RTOL / 4, max_iter=60)
    if unreported(hi):  # checked before the costly fine steps, and after them
        return math.nan
    sigma = _fine_steps(hi, fine, sigma_rdp)
    return math.nan if sigma is not None and unreported(sigma) else sigma


def _fine_steps(sigma: float, over: Any, ceiling: float) -> float | None:
    """From ``sigma``, σ within the target at the reported discretisation with σ/(1 + tol)
    over it: step up (at most to ``ceiling``) until within, then down until the step below
    is over (``over(σ)``: its ε exceeds the target)."""
    step = 1.0 + CALIBRATION_RTOL
    while over(sigma):
        sigma *= step
        if sigma >= ceiling:
            return None if over(ceiling) else ceiling
    for _ in range(_MAX_FINE_STEPS):  # the coarse grid's bias is a step or two
        if over(sigma / step):
            break
        sigma /= step
    return sigma

