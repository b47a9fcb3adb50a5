"""A server's budget check of releases its plan covers takes the plan's bound: with PLD's σ
the last planned rounds' RDP bound is above the target, and each such round's check
computed a PLD of its composition (a fraction of a CPU-second a round); the plan's, found
within the target before round 1, bounds fewer of the same releases. A release beyond the
plan, or with less noise, is still accounted and refused as before."""

from __future__ import annotations

from typing import Any

import pytest

from fedlabels.core.errors import BudgetRefusal
from fedlabels.privacy import accounting
from fedlabels.privacy.accounting import default_gaussian_accountants
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent
from fedlabels.privacy.events import SampledGaussianEvent
from fedlabels.privacy.gaussian_calibration import calibrate_gaussian
from fedlabels.privacy.ledger import Ledger

DELTA, TARGET, Q, ROUNDS = 1e-5, 2.0, 0.2, 12


@pytest.fixture
def pld_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The compositions every PLD ε is asked for (a spy on the accountant)."""
    calls: list[int] = []
    original = accounting.gaussian_epsilon

    def spy(sigma: float, q: float, steps: int, delta: float, name: str = "pld") -> Any:
        if name == "pld":
            calls.append(steps)
        return original(sigma, q, steps, delta, name)

    monkeypatch.setattr(accounting, "gaussian_epsilon", spy)
    return calls


def _server_ledger() -> tuple[Ledger, SampledGaussianEvent]:
    sigma = calibrate_gaussian(TARGET, DELTA, Q, ROUNDS).sigma  # PLD's: RDP's ε above it
    event = SampledGaussianEvent(sigma, Q, 1.0)
    ledger = Ledger(DELTA, TARGET, what="each client",
                    gaussian_accountants=default_gaussian_accountants(Q))
    ledger.check_plan([event] * ROUNDS, f"{ROUNDS} round(s)")
    return ledger, event


def test_the_planned_rounds_are_checked_without_a_pld_each(pld_calls: list[int]) -> None:
    ledger, event = _server_ledger()
    rdp = accounting.gaussian_epsilon(event.noise_multiplier, Q, ROUNDS, DELTA, "rdp")
    assert rdp > TARGET  # the last rounds' fast bound does not decide
    pld_calls.clear()
    for _ in range(ROUNDS):
        assert ledger.record(event, tight=False).epsilon <= TARGET
    assert pld_calls == []
    # the result's ε is still the tight one, the plan's PLD (at most the target)
    assert ledger.spent().accountant == "pld" and ledger.spent().epsilon <= TARGET


def test_a_release_beyond_the_plan_or_with_less_noise_is_accounted_and_refused(
        pld_calls: list[int]) -> None:
    ledger, event = _server_ledger()
    for _ in range(ROUNDS):
        ledger.record(event, tight=False)
    pld_calls.clear()
    with pytest.raises(BudgetRefusal, match="Refusing the release"):
        ledger.check([event], tight=False)
    assert ROUNDS + 1 in pld_calls  # not covered: accounted as before
    fresh, _ = _server_ledger()
    louder = SampledGaussianEvent(event.noise_multiplier * 0.5, Q, 1.0)
    with pytest.raises(BudgetRefusal):
        for _ in range(ROUNDS):
            fresh.record(louder, tight=False)


def test_a_per_client_ledger_covers_each_client_by_the_plan(pld_calls: list[int]) -> None:
    """A DP-SGD server's ledger: each client's steps within the planned steps are covered;
    one client beyond them is accounted (and refused) whatever the others took."""
    steps, period = 60, 5
    sigma = calibrate_gaussian(TARGET, DELTA, Q, steps).sigma
    ledger = Ledger(DELTA, TARGET, what="each client", per_client=True)
    ledger.check_plan([DPSGDRoundEvent(sigma, Q, 1.0, ((0, period),))] * (steps // period),
                      "plan")
    pld_calls.clear()
    for _ in range(steps // period):
        ledger.record(DPSGDRoundEvent(sigma, Q, 1.0, ((0, period), (1, period))), tight=False)
    assert pld_calls == []
    with pytest.raises(BudgetRefusal):
        ledger.check([DPSGDRoundEvent(sigma, Q, 1.0, ((1, period),))], tight=False)
    assert pld_calls  # client 1 beyond the plan: its ε computed


def test_a_ledger_whose_target_shrank_below_the_plan_accounts_again() -> None:
    ledger, event = _server_ledger()
    ledger.target = TARGET / 10
    with pytest.raises(BudgetRefusal):
        ledger.check([event], tight=False)
