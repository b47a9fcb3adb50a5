"""Accounting: basic vs exact vs dp-accounting (RDP, PLD), calibration, opacus cross-checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.accounting import (
    account_gaussian,
    account_labels,
    calibrate_xor_round_epsilon,
    gaussian_epsilon,
    rr_delta_for_epsilon,
    rr_epsilon_exact,
)
from fedlabels.privacy.events import KaryRREvent, SampledGaussianEvent, XorEvent
from fedlabels.privacy.gaussian_calibration import calibrate_noise_multiplier
from fedlabels.privacy.mechanisms import flip_probability


def _xor_events(eps: float, s: int, rounds: int) -> list[XorEvent]:
    f = flip_probability(eps, s)
    return [XorEvent(eps, s, f, 100) for _ in range(rounds)]


def test_basic_composition_is_sum_and_pure() -> None:
    spent = account_labels(_xor_events(0.5, 2, 4), 1e-5, accountants=("basic",))
    assert spent.epsilon == pytest.approx(2.0) and spent.delta == 0.0
    assert spent.accountant == "basic"


def test_exact_matches_dp_accounting_pld_and_beats_basic() -> None:
    events = _xor_events(1.0, 2, 10)
    spent = account_labels(events, 1e-5)
    by = spent.by_accountant
    assert set(by) == {"basic", "exact", "rdp", "pld"}
    assert by["exact"] == pytest.approx(by["pld"], rel=2e-3)  # PLD is slightly pessimistic
    assert by["exact"] <= by["pld"] + 1e-9 and by["exact"] <= by["rdp"] + 1e-9
    assert by["exact"] < by["basic"] == pytest.approx(10.0)
    assert spent.accountant == "exact" and spent.delta == 1e-5


def test_exact_accountant_closed_form_cases() -> None:
    # one bit: δ(ε) = 0 at the pure ε, and f·... below it
    f = 0.1
    a = math.log(9)
    assert rr_delta_for_epsilon(a, 1, f) == 0.0
    assert rr_delta_for_epsilon(0.0, 1, f) == pytest.approx(0.9 - 0.1)  # TV distance
    # δ(ε) = 0.9 (1 - e^{ε - a}) below a, so ε(δ) = a + ln(1 - δ/0.9)
    assert rr_epsilon_exact(1, f, 1e-5) == pytest.approx(a + math.log1p(-1e-5 / 0.9), abs=1e-8)
    # privacy.md §3.6: 5-fold RR with f = 0.1 -> 10.986 (pure 5 ln 9)
    assert rr_epsilon_exact(5, f, 1e-5) == pytest.approx(5 * a, rel=1e-5)


def _delta_full_sum(epsilon: float, n: int, f: float) -> float:
    """δ(ε) of n-fold bitwise RR summed over every k (the definition, O(n))."""
    from scipy import stats

    a = math.log((1 - f) / f)
    k = np.arange(n + 1)
    loss = (n - 2 * k) * a
    counted = loss > epsilon  # max(0, 1 - e^{ε - loss}) is 0 elsewhere
    return float(np.sum(stats.binom.pmf(k[counted], n, f) * -np.expm1(epsilon - loss[counted])))


@pytest.mark.parametrize("n", [1, 40, 4000, 200_000])
@pytest.mark.parametrize("f", [1e-6, 0.01, 0.3, 0.4938, 0.49983])
def test_exact_delta_equals_the_full_sum_and_bounds_it(n: int, f: float) -> None:
    for eps in (0.0, 0.5, 5.0, 40.0):
        full, got = _delta_full_sum(eps, n, f), rr_delta_for_epsilon(eps, n, f)
        assert got >= full * (1 - 1e-12)  # an upper bound of δ, never below it
        assert got == pytest.approx(full, rel=1e-9, abs=1e-300)


def test_exact_delta_work_grows_as_sqrt_n_not_n(monkeypatch: pytest.MonkeyPatch) -> None:
    # n = T·s* grows with the rounds and a DP-FedCT run checks its budget every round: a
    # sum over all n + 1 terms made round t cost O(t) (3,000 rounds of s* = 228: 6 s a round)
    from scipy import stats

    evaluated: list[int] = []
    pmf = stats.binom.pmf

    def counting(k: np.ndarray, *args: float) -> np.ndarray:
        evaluated.append(np.size(k))
        return pmf(k, *args)

    monkeypatch.setattr(stats.binom, "pmf", counting)
    n = 4_000_000
    rr_delta_for_epsilon(20.0, n, 0.4938)
    assert 0 < sum(evaluated) <= 100 * math.isqrt(n)  # a window around the mean, not ~n/2


def test_many_weak_bits_compose_far_below_pure_epsilon() -> None:
    # s* = 4000 bits at pure ε = 100 per round: the (ε, δ) is an order of magnitude smaller
    eps = account_labels(_xor_events(100.0, 4000, 1), 1e-5).epsilon
    assert eps < 15.0


def test_accounting_is_monotone() -> None:
    prev = 0.0
    for rounds in (1, 2, 5, 10):
        eps = account_labels(_xor_events(1.0, 4, rounds), 1e-5).epsilon
        assert eps > prev
        prev = eps
    prev = 0.0
    for eps_round in (0.1, 0.5, 1.0, 3.0):
        eps = account_labels(_xor_events(eps_round, 4, 5), 1e-5).epsilon
        assert eps > prev
        prev = eps
    # a larger δ never gives a larger ε
    e1 = account_labels(_xor_events(1.0, 4, 10), 1e-6).epsilon
    e2 = account_labels(_xor_events(1.0, 4, 10), 1e-3).epsilon
    assert e2 <= e1


def test_dp_accounting_pld_drops_rr_count_regression() -> None:
    """privacy.md pitfall 2: PLDAccountant ignores the count of RR events; we avoid it."""
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.RandomizedResponseDpEvent(0.2, 2), 5)
    library = acc.get_epsilon(1e-5)
    ours = account_labels([XorEvent(5 * math.log(9), 5, 0.1, 10)], 1e-5,
                          accountants=("pld",)).epsilon
    assert ours == pytest.approx(5 * math.log(9), rel=1e-3)
    # if this fails, dp-accounting fixed the bug and the workaround can go
    assert library == pytest.approx(math.log(9), rel=1e-3)


def test_kary_rr_accounting() -> None:
    eps1, c, rows = 0.5, 10, 3
    events = [KaryRREvent(rows * eps1, rows, eps1, c, 100) for _ in range(4)]
    spent = account_labels(events, 1e-5)
    # the exact accountant (tests/test_privacy_kary_exact.py) is never above RDP's bound
    assert spent.accountant == "exact"
    assert spent.by_accountant["exact"] <= spent.by_accountant["rdp"]
    assert spent.by_accountant["basic"] == pytest.approx(4 * rows * eps1)
    assert spent.epsilon <= spent.by_accountant["basic"] + 1e-9


def test_calibrate_xor_round_epsilon_round_trip() -> None:
    for total, s in [(1.0, 20), (10.0, 400)]:
        eps_round = calibrate_xor_round_epsilon(total, 1e-5, 5, s)
        assert eps_round >= total / 5  # never worse than basic composition
        got = account_labels(_xor_events(eps_round, s, 5), 1e-5,
                             accountants=("exact",)).epsilon
        assert got == pytest.approx(total, rel=1e-4) and got <= total * (1 + 1e-9)


# ------------------------------------------------------------------ DP-FedAvg (Gaussian)

def test_gaussian_reference_numbers_from_privacy_md() -> None:
    # σ = 1, q = 0.1, 1000 steps, δ = 1e-5: RDP 27.163, PLD 25.205 (privacy.md §2.2)
    assert gaussian_epsilon(1.0, 0.1, 1000, 1e-5, "rdp") == pytest.approx(27.163, abs=2e-3)
    assert gaussian_epsilon(1.0, 0.1, 1000, 1e-5, "pld") == pytest.approx(25.205, abs=5e-3)


def test_gaussian_accounting_matches_opacus_within_one_percent() -> None:
    from opacus.accountants import PRVAccountant, RDPAccountant

    for sigma, q, rounds in [(1.0, 0.5, 5), (0.8, 0.2, 30), (1.5, 1.0, 10)]:
        events = [SampledGaussianEvent(sigma, q, 1.0)] * rounds
        ours = account_gaussian(events, 1e-5)
        rdp = RDPAccountant()
        rdp.history = [(sigma, q, rounds)]
        # the two RDP implementations use different order grids: agree to 0.5 %
        assert gaussian_epsilon(sigma, q, rounds, 1e-5, "rdp") == pytest.approx(
            rdp.get_epsilon(1e-5), rel=5e-3)
        prv = PRVAccountant()
        prv.history = [(sigma, q, rounds)]
        assert ours.epsilon == pytest.approx(prv.get_epsilon(1e-5), rel=0.01)


def test_calibration_hits_the_target() -> None:
    from opacus.accountants import RDPAccountant

    sigma = calibrate_noise_multiplier(10.0, 1e-5, 1.0, 10)  # analytic (q = 1)
    assert gaussian_epsilon(sigma, 1.0, 10, 1e-5, "analytic") == pytest.approx(10.0, rel=1e-6)
    sigma_rdp = calibrate_noise_multiplier(8.0, 1e-5, 0.5, 5, "rdp")
    assert gaussian_epsilon(sigma_rdp, 0.5, 5, 1e-5, "rdp") == pytest.approx(8.0, rel=1e-3)
    # Opacus' own RDP accountant finds the target at that σ (its order grid differs: 0.5 %;
    # one evaluation, where Opacus' calibration search takes seconds)
    opacus = RDPAccountant()
    opacus.history = [(sigma_rdp, 0.5, 5)]
    assert opacus.get_epsilon(1e-5) == pytest.approx(8.0, rel=5e-3)
    # the memoised accountant's search is dp-accounting's own on a fresh RdpAccountant
    import dp_accounting as dpa
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    fresh = dpa.calibrate_dp_mechanism(
        RdpAccountant,
        lambda s: dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(0.5, dpa.GaussianDpEvent(s)), 5),
        8.0, 1e-5, bracket_interval=dpa.LowerEndpointAndGuess(1e-3, 1.0), tol=1e-5)
    assert sigma_rdp == fresh  # the same σ, to the bit
    # (PLD calibration: tests/test_gaussian_calibration.py)
    # more rounds need more noise
    assert calibrate_noise_multiplier(10.0, 1e-5, 1.0, 40) > sigma


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 2.0])
def test_bad_delta_rejected(delta: float) -> None:
    with pytest.raises(FedLabelsError, match="delta"):
        account_labels(_xor_events(1.0, 2, 2), delta)
    with pytest.raises(FedLabelsError, match="delta"):
        gaussian_epsilon(1.0, 1.0, 3, delta)


def test_bad_gaussian_parameters_rejected() -> None:
    with pytest.raises(FedLabelsError, match="noise multiplier"):
        gaussian_epsilon(0.0, 1.0, 3, 1e-5)
    with pytest.raises(FedLabelsError, match="sampling rate"):
        gaussian_epsilon(1.0, 0.0, 3, 1e-5)
    with pytest.raises(FedLabelsError, match="epsilon"):
        calibrate_noise_multiplier(-1.0, 1e-5, 1.0, 3)
    with pytest.raises(FedLabelsError, match="analytic"):
        gaussian_epsilon(1.0, 0.5, 3, 1e-5, "analytic")
    assert np.isfinite(gaussian_epsilon(1.0, 0.5, 3, 1e-5, "pld"))


def test_pld_is_skipped_where_rdp_already_gives_a_huge_epsilon(monkeypatch) -> None:
    """PLD at a tiny σ needs a grid of gigabytes (DP-SGD calibrated to ε = 10,000 took 6 GB
    and 53 s; 100,000 was killed for memory): past an RDP ε of 100 only RDP is computed. Below
    it PLD is still asked (and wins when tighter), and the DP-SGD ledger takes the same path.
    PLD's own numbers are stood in for (it takes seconds); RDP's are real."""
    from fedlabels.privacy import accounting
    from fedlabels.privacy.dpsgd_accounting import dpsgd_epsilon

    asked: list[tuple[float, str]] = []
    real = accounting.gaussian_epsilon

    def spy(sigma: float, q: float, steps: int, delta: float, name: str = "rdp") -> float:
        asked.append((sigma, name))
        return 0.5 if name == "pld" else real(sigma, q, steps, delta, name)

    monkeypatch.setattr(accounting, "gaussian_epsilon", spy)
    moderate = accounting.tightest_gaussian(1.1, 0.01, 100, 1e-5, ("pld", "rdp"))
    assert moderate.accountant == "pld" and set(moderate.by_accountant) == {"pld", "rdp"}
    huge = dpsgd_epsilon(0.0901, 1.0, 1, 1e-5)
    assert huge.by_accountant["rdp"] > accounting.PLD_ABOVE_RDP_EPSILON
    assert huge.accountant == "rdp" and (0.0901, "pld") not in asked
    only_pld = accounting.tightest_gaussian(0.0901, 1.0, 1, 1e-5, ("pld",))  # asked for
    assert only_pld.accountant == "pld" and (0.0901, "pld") in asked


def test_rr_rdp_of_a_growing_count_computes_one_curve(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """A ledger accounts n, n + s*, n + 2s*, ... responses of one flip probability: RDP is
    n times one response's curve, computed once (each count built a fresh RdpAccountant,
    about 60 ms a DP-FedCT round), and ε equals a fresh accountant's to the last bit."""
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    from fedlabels.privacy import accounting

    curves: list[float] = []
    real = rdpa._compute_randomized_response_rdp
    monkeypatch.setattr(rdpa, "_compute_randomized_response_rdp",
                        lambda p, *args: curves.append(p) or real(p, *args))
    accounting._rr_epsilon.cache_clear()
    if hasattr(accounting, "_rr_rdp_curve"):
        accounting._rr_rdp_curve.cache_clear()
    p = 2.0 * flip_probability(1.0, 8)
    got = [accounting._rr_epsilon("rdp", (((p, 2), n),), 1e-5) for n in (8, 16, 24, 32)]
    assert len(curves) == 1
    monkeypatch.setattr(rdpa, "_compute_randomized_response_rdp", real)
    for n, eps in zip((8, 16, 24, 32), got, strict=True):
        acc = rdpa.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        acc.compose(dpa.RandomizedResponseDpEvent(noise_parameter=p, num_buckets=2), n)
        assert eps == acc.get_epsilon(1e-5)


def test_an_exact_epsilon_computes_the_binomial_window_once(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """The bisection for ε asks δ(ε) at some 40 values of ε; the window's probabilities do
    not depend on ε, so they are computed once (each δ(ε) computed them again: at 3,000
    DP-FedCT rounds, n = 684,000, most of a round's accounting)."""
    from scipy import stats

    from fedlabels.privacy import accounting

    if hasattr(accounting, "_rr_window"):
        accounting._rr_window.cache_clear()
    calls: list[int] = []
    pmf = stats.binom.pmf
    monkeypatch.setattr(stats.binom, "pmf",
                        lambda k, *a: calls.append(np.size(k)) or pmf(k, *a))
    asked: list[float] = []
    delta_of = accounting.rr_delta_for_epsilon
    monkeypatch.setattr(accounting, "rr_delta_for_epsilon",
                        lambda e, *a: asked.append(e) or delta_of(e, *a))
    eps = accounting.rr_epsilon_exact.__wrapped__(684_000, 0.4938, 1e-5)
    assert len(asked) > 20 and len(calls) == 1
    assert delta_of(eps, 684_000, 0.4938) <= 1e-5
    assert eps == accounting.rr_epsilon_exact.__wrapped__(684_000, 0.4938, 1e-5)


def test_dpsgd_accounting_reports_the_client_with_the_most_steps_and_one_setting() -> None:
    """Each client's ε is that of its own steps summed over the rounds; the run's is the
    worst client's, whichever order the clients come in; two (σ, q) settings are refused."""
    from fedlabels.privacy.dpsgd_accounting import (
        DPSGDRoundEvent,
        account_dpsgd,
        dpsgd_epsilon,
    )

    events = [DPSGDRoundEvent(1.1, 0.1, 1.0, ((0, 5), (1, 2), (2, 3))),
              DPSGDRoundEvent(1.1, 0.1, 1.0, ((1, 2), (2, 4)))]
    out = account_dpsgd(events, 1e-5, ("rdp",))
    assert out["steps_per_client"] == {0: 5, 1: 4, 2: 7}
    each = {c: dpsgd_epsilon(1.1, 0.1, k, 1e-5, ("rdp",)).epsilon for c, k in
            {0: 5, 1: 4, 2: 7}.items()}
    assert out["epsilon_per_client"] == each
    assert out["epsilon"] == each[2] == max(each.values())
    with pytest.raises(FedLabelsError, match=r"one \(σ, q\)"):
        account_dpsgd([*events, DPSGDRoundEvent(2.0, 0.1, 1.0, ((0, 1),))], 1e-5)
