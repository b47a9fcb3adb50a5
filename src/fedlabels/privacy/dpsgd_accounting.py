"""Accounting for DP-SGD at the clients: one event per round, every local step counted.

Each DP-SGD step is the Poisson-subsampled Gaussian mechanism (rate q, noise multiplier σ)
under **add/remove one record** of the client; a client's steps over all rounds compose
adaptively (later steps may depend on earlier releases: the consensus, the global model).
A :class:`DPSGDRoundEvent` records the steps each client actually took in one round; a
client's (ε, δ) is that of its own total steps, via dp-accounting's PLD and RDP accountants
(:func:`fedlabels.privacy.accounting.gaussian_epsilon`, the same code that accounts DP-FedAvg,
with steps in place of rounds), the tighter one reported. σ is calibrated from the target
(ε, δ) over the *planned* steps (rounds × local steps) to that PLD ε (RDP's where PLD cannot
be afforded, :mod:`fedlabels.privacy.gaussian_calibration`), so the reported ε meets the
target; or it is given (``noise_multiplier``, :func:`dpsgd_noise`) and ε is what it spends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.accounting import PrivacySpent, tightest_gaussian
from fedlabels.privacy.events import is_count, require_positive
from fedlabels.privacy.gaussian_calibration import (
    SIGMA_GIVEN,
    GaussianCalibration,
    calibrate_gaussian,
)
from fedlabels.privacy.validation import check_delta

#: what DP-SGD's neighbouring datasets are (the Poisson-subsampling analysis)
RECORD_ADD_REMOVE = ("record-level: one private record of one client added or removed "
                     "(Poisson-subsampled Gaussian, ADD_OR_REMOVE_ONE), the client's number "
                     "of records taken as public (the noisy sum is divided by q·n, as "
                     "Opacus does)")
DPSGD_ACCOUNTANTS = ("pld", "rdp")


@dataclass(frozen=True)
class DPSGDRoundEvent:
    """The DP-SGD steps each participating client took in one round."""

    noise_multiplier: float
    sample_rate: float
    clip: float
    steps: tuple[tuple[int, int], ...]  # (client id, local DP-SGD steps taken)
    neighbouring: str = RECORD_ADD_REMOVE

    def __post_init__(self) -> None:
        require_positive(self, "noise_multiplier", "clip")
        require_positive(self, "sample_rate", at_most=1.0)
        if not all(is_count(k) for _, k in self.steps):
            raise FedLabelsError(f"DPSGDRoundEvent: steps must be integers >= 0, got "
                                 f"{self.steps!r}.")


def steps_per_client(events: Sequence[DPSGDRoundEvent]) -> dict[int, int]:
    """Total DP-SGD steps of every client that took any."""
    total: dict[int, int] = {}
    for ev in events:
        for cid, k in ev.steps:
            total[cid] = total.get(cid, 0) + int(k)
    return total


@lru_cache(maxsize=256)  # pure in its arguments; PLD over many steps takes seconds
def dpsgd_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountants: tuple[str, ...] = DPSGD_ACCOUNTANTS) -> PrivacySpent:
    """(ε, δ) of ``steps`` DP-SGD steps: the tightest of ``accountants``."""
    check_delta(delta)
    if steps == 0:
        return PrivacySpent(0.0, 0.0, "none")
    return tightest_gaussian(noise_multiplier, sample_rate, steps, delta, accountants)


def account_dpsgd(events: Sequence[DPSGDRoundEvent], delta: float,
                  accountants: tuple[str, ...] = DPSGD_ACCOUNTANTS) -> dict[str, Any]:
    """The run's guarantee: the worst client's (ε, δ), and every client's steps and ε."""
    settings = {(ev.noise_multiplier, ev.sample_rate) for ev in events}
    if len(settings) > 1:
        raise FedLabelsError("DP-SGD accounting expects one (σ, q) for the whole run.")
    if not events:
        return {**PrivacySpent(0.0, 0.0, "none").to_dict(), "steps_per_client": {},
                "epsilon_per_client": {}}
    ((sigma, q),) = settings
    steps = steps_per_client(events)
    by_steps = {k: dpsgd_epsilon(sigma, q, k, delta, accountants)  # clients alike: once
                for k in set(steps.values())}
    per_client = {cid: by_steps[k] for cid, k in sorted(steps.items())}
    worst = max(per_client.values(), key=lambda s: s.epsilon)
    return {**worst.to_dict(), "steps_per_client": steps,
            "epsilon_per_client": {cid: s.epsilon for cid, s in per_client.items()}}


def dpsgd_calibration(target_epsilon: float, delta: float, sample_rate: float,
                      planned_steps: int) -> GaussianCalibration:
    """The smallest σ whose ``planned_steps`` DP-SGD steps are (target ε, δ)-DP under the
    tighter of the reported accountants (PLD; RDP where PLD cannot be afforded), and which
    one calibrated it (:func:`~fedlabels.privacy.gaussian_calibration.calibrate_gaussian`,
    memoised)."""
    if planned_steps < 1:
        raise FedLabelsError(f"DP-SGD needs at least one planned step, got {planned_steps}.")
    return calibrate_gaussian(target_epsilon, delta, sample_rate, planned_steps, "pld")


def dpsgd_noise(noise_multiplier: float | None, target_epsilon: float | None, delta: float,
                sample_rate: float, planned_steps: int
                ) -> tuple[float, GaussianCalibration | None]:
    """A party's DP-SGD σ from its own options: ``noise_multiplier`` where given (no
    calibration: None), else :func:`dpsgd_calibration` of ``target_epsilon``."""
    if noise_multiplier is not None:
        return float(noise_multiplier), None
    if target_epsilon is None:
        raise FedLabelsError("DP-SGD needs noise_multiplier or epsilon.")
    calibration = dpsgd_calibration(target_epsilon, delta, sample_rate, planned_steps)
    return calibration.sigma, calibration


def sigma_calibrated_by(calibration: GaussianCalibration | None) -> str:
    """A ledger's ``calibrated_by`` for σ from :func:`dpsgd_noise`: the accountant that
    calibrated it, or ``given``."""
    return SIGMA_GIVEN if calibration is None else calibration.accountant


def sigma_source(target_epsilon: float | None, calibration: GaussianCalibration | None) -> str:
    """A result's ``noise_multiplier_source``: how σ came (DP-FedAvg's wording)."""
    if calibration is None:
        return SIGMA_GIVEN
    return f"calibrated from target epsilon {target_epsilon} by {calibration.accountant}"


def calibrate_dpsgd(target_epsilon: float, delta: float, sample_rate: float,
                    planned_steps: int) -> float:
    """σ of :func:`dpsgd_calibration`."""
    return dpsgd_calibration(target_epsilon, delta, sample_rate, planned_steps).sigma
