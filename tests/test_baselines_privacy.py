"""GNMax (PATE) and Laplace noisy-max (FREDY): noise scales and ε against independent forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special
from scipy.stats import norm

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.events import GNMaxEvent, LaplaceNoisyMaxEvent
from fedlabels.privacy.gnmax import (
    gnmax_aggregate,
    gnmax_event,
    gnmax_log_q,
    gnmax_rdp_data_dependent,
    gnmax_rdp_data_independent,
)
from fedlabels.privacy.noisy_max import laplace_noisy_max, laplace_scale
from fedlabels.privacy.vote_accounting import (
    account_gnmax,
    account_laplace,
    calibrate_gnmax_sigma,
    calibrate_laplace_scale,
    epsilon_from_rdp,
    gaussian_exact_epsilon,
    gnmax_exact_epsilon,
    laplace_epsilon,
)

# ------------------------------------------------------------------ noise scales


def test_gnmax_noise_has_the_calibrated_standard_deviation():
    counts = np.zeros((4000, 10))
    release = gnmax_aggregate(counts, 3.0, np.random.default_rng(0))
    assert release.noise.std() == pytest.approx(3.0, rel=0.01)
    assert abs(release.noise.mean()) < 0.02
    # the released label is the argmax of the noisy counts
    assert np.array_equal(release.labels, np.argmax(counts + release.noise, axis=1))


def test_gnmax_without_noise_is_the_plain_argmax():
    counts = np.array([[1, 3, 1], [4, 0, 1], [2, 2, 1]])
    release = gnmax_aggregate(counts, 0.0, np.random.default_rng(0))
    assert release.labels.tolist() == [1, 0, 0]  # ties go to the smallest class


def test_confident_gnmax_abstains_below_the_threshold():
    counts = np.array([[10, 0], [5, 5]] * 500)
    release = gnmax_aggregate(counts, 1.0, np.random.default_rng(0), threshold=8.0,
                              threshold_sigma=0.5)
    assert release.answered[0::2].mean() > 0.99 and release.answered[1::2].mean() < 0.01
    assert (release.labels[~release.answered] == -1).all()
    assert release.threshold_noise.std() == pytest.approx(0.5, rel=0.05)


def test_confident_gnmax_threshold_check_is_noisy():
    """The check max + N(0, σ₁²) >= T decides which queries are answered: one σ₁ below T,
    a share 1 - Φ(1) of them is (normal tail, 5 s.d. of the binomial share), none without
    the noise, and each answer is the noise it reports added to the top count."""
    n, s1, threshold = 20_000, 2.0, 10.0
    counts = np.tile([threshold - s1, 0.0, 1.0], (n, 1))
    release = gnmax_aggregate(counts, 1.0, np.random.default_rng(3), threshold=threshold,
                              threshold_sigma=s1)
    share = float(norm.sf(1.0))
    assert abs(release.answered.mean() - share) < 5 * math.sqrt(share * (1 - share) / n)
    np.testing.assert_array_equal(release.answered,
                                  counts.max(axis=1) + release.threshold_noise >= threshold)


def test_laplace_noise_has_scale_two_over_epsilon():
    # L1 sensitivity 2 (one vote moves) -> b = 2 / eps; Laplace(b): E|X| = b, std = sqrt(2) b
    eps = 0.5
    release = laplace_noisy_max(np.zeros((4000, 10)), eps, np.random.default_rng(1))
    b = 2.0 / eps
    assert release.scale == b == laplace_scale(eps)
    assert np.abs(release.noise).mean() == pytest.approx(b, rel=0.01)
    assert release.noise.std() == pytest.approx(math.sqrt(2.0) * b, rel=0.02)
    assert laplace_scale(eps, l1_sensitivity=10.0) == pytest.approx(20.0)


# ------------------------------------------------------------------ GNMax epsilon


def test_gnmax_data_independent_matches_dp_accounting_and_closed_form():
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    sigma, q, delta = 40.0, 1000, 1e-5
    ours, _ = epsilon_from_rdp(q * gnmax_rdp_data_independent(sigma), delta)
    acc = rdpa.RdpAccountant()  # a Gaussian with L2 sensitivity sqrt(2): multiplier σ/√2
    acc.compose(dpa.GaussianDpEvent(sigma / math.sqrt(2.0)), q)
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-3)
    assert ours == pytest.approx(5.378, abs=2e-3)  # docs/privacy.md §2.4 (verified there)
    # classical conversion of RDP λQ/σ², optimised over λ: an upper bound on ours
    classic = q / sigma**2 + 2.0 * math.sqrt(q * math.log(1 / delta)) / sigma
    assert ours <= classic


def test_exact_gaussian_epsilon_matches_the_pld_accountant():
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant

    sigma, q, delta = 10.0, 50, 1e-5
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dpa.GaussianDpEvent(sigma / math.sqrt(2.0)), q)
    assert gnmax_exact_epsilon(sigma, q, delta) == pytest.approx(acc.get_epsilon(delta),
                                                               rel=2e-3)
    # δ(ε) of the analytic Gaussian mechanism, evaluated at our ε, is δ
    mu = math.sqrt(2.0 * q) / sigma
    eps = gaussian_exact_epsilon(mu, delta)
    d = norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)
    assert d == pytest.approx(delta, rel=1e-4)


def _renyi(logp: np.ndarray, logr: np.ndarray, lam: float) -> float:
    """D_λ(P || R) from log-probabilities of a finite distribution."""
    return float(special.logsumexp(lam * logp + (1 - lam) * logr) / (lam - 1))


def _log_two_class(n0: int, n: int, sigma: float) -> np.ndarray:
    z = (2 * n0 - n) / (math.sqrt(2) * sigma)
    return np.array([norm.logcdf(z), norm.logsf(z)])


def test_gnmax_data_dependent_bound_holds_for_two_classes_by_brute_force():
    # for C = 2 the output distribution is exact: P(out = 0) = Φ((n0 - n1) / (√2 σ))
    sigma, lam = 1.5, np.array([2.0, 3.0, 5.0, 10.0, 20.0])
    checked = tighter = 0
    for n in range(2, 30):
        for n0 in range(n + 1):
            counts = np.array([[n0, n - n0]], dtype=float)
            bound = gnmax_rdp_data_dependent(gnmax_log_q(counts, sigma)[0], sigma, lam)
            assert np.all(bound <= lam / sigma**2 + 1e-12)
            tighter += bool(np.any(bound < lam / sigma**2 - 1e-9))
            p = _log_two_class(n0, n, sigma)
            for move in (-1, 1):  # one teacher's vote moves between the classes
                m0 = n0 + move
                if not 0 <= m0 <= n:
                    continue
                r = _log_two_class(m0, n, sigma)
                for i, a in enumerate(lam):
                    assert _renyi(p, r, a) <= bound[i] + 1e-9
                    checked += 1
    assert checked > 1000 and tighter > 10  # and the data-dependent bound does bite


def test_gnmax_account_reports_both_bounds():
    rng = np.random.default_rng(0)
    counts = np.zeros((1000, 10))
    top = rng.integers(0, 10, 1000)
    counts[np.arange(1000), top] = 240  # 250 teachers, strong consensus
    counts[np.arange(1000), (top + 1) % 10] = 10
    acc = account_gnmax([gnmax_event(counts, np.ones(1000, bool), 40.0)], 1e-5)
    assert acc.epsilon_rdp == pytest.approx(5.378, abs=2e-3)
    assert acc.epsilon_data_dependent < 1.0 < acc.epsilon
    assert acc.epsilon == pytest.approx(4.983, abs=2e-3)  # privacy.md §2.4 (PLD)
    d = acc.to_dict()
    assert "NOT itself differentially private" in d["epsilon_data_dependent_note"]


def test_rdp_calibrated_sigma_reaches_the_target_by_rdp():
    # the exact calibration (the default) is tested in tests/test_gnmax_calibration.py
    sigma = calibrate_gnmax_sigma(2.0, 500, 1e-5, accountant="rdp")
    eps, _ = epsilon_from_rdp(500 * gnmax_rdp_data_independent(sigma), 1e-5)
    assert eps == pytest.approx(2.0, rel=1e-4)


# ------------------------------------------------------------------ Laplace epsilon


def _laplace_cdf_diff(x: np.ndarray, b: float) -> np.ndarray:
    """CDF of L1 - L0 for iid Laplace(b) (closed form)."""
    ax = np.abs(x)
    tail = 0.5 * np.exp(-ax / b) * (1 + ax / (2 * b))
    return np.where(x >= 0, 1 - tail, tail)


def test_laplace_noisy_max_is_eps_dp_per_query_for_two_classes():
    eps = 0.7
    b = laplace_scale(eps)
    worst = 0.0
    for n in range(1, 40):
        for n0 in range(n + 1):
            # P(out = 0 | counts) = P(L1 - L0 < n0 - n1)
            p0 = _laplace_cdf_diff(np.array([2.0 * n0 - n]), b)[0]
            for move in (-1, 1):
                m0 = n0 + move
                if 0 <= m0 <= n:
                    r0 = _laplace_cdf_diff(np.array([2.0 * m0 - n]), b)[0]
                    worst = max(worst, abs(math.log(p0 / r0)),
                                abs(math.log((1 - p0) / (1 - r0))))
    assert worst <= eps + 1e-12
    assert worst > 0.9 * eps  # and ε is nearly attained: the calibration is not slack


def _laplace_rdp(lam: np.ndarray, s: float) -> np.ndarray:
    """Mironov (2017), Prop. 6: RDP of the Laplace mechanism with scale/sensitivity s."""
    return np.log(lam / (2 * lam - 1) * np.exp((lam - 1) / s)
                  + (lam - 1) / (2 * lam - 1) * np.exp(-lam / s)) / (lam - 1)


def test_laplace_accounting_against_closed_forms():
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    eps_q, q, delta = 0.1, 1000, 1e-5
    b = laplace_scale(eps_q)
    assert laplace_epsilon(b, q, delta, "basic") == pytest.approx(q * eps_q)
    orders = np.array(rdpa.RdpAccountant()._orders, dtype=float)
    closed, _ = rdpa.compute_epsilon(orders, q * _laplace_rdp(orders, b / 2.0), delta)
    assert laplace_epsilon(b, q, delta, "rdp") == pytest.approx(closed, rel=1e-6)
    assert laplace_epsilon(b, q, delta, "rdp") == pytest.approx(18.58, abs=0.01)  # §2.5
    account = account_laplace([LaplaceNoisyMaxEvent(b, 2.0, q)], delta)
    assert account.accountant == "pld" and account.epsilon == pytest.approx(17.42, abs=0.02)
    # non-disjoint teachers: L1 sensitivity 2n scales the per-query guarantee by n
    basic_25 = laplace_epsilon(b, q, delta, "basic", l1_sensitivity=2.0 * 25)
    assert basic_25 == pytest.approx(25 * q * eps_q)


def _kov_log_delta(eps: float, eps0: float, k: int) -> float:
    """log δ(ε) of k composed ε₀-DP mechanisms by Kairouz, Oh & Viswanath (2015), Thm. 3.3's
    sum: Σ_i C(k, i) max(0, e^{(k-i)ε₀} - e^{ε + iε₀}) / (1 + e^{ε₀})^k, in logs."""
    i = np.arange(k + 1)
    a, b = (k - i) * eps0, eps + i * eps0
    keep = a > b
    a, b, i = a[keep], b[keep], i[keep]
    log_terms = (special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(k - i + 1)
                 + a + np.log(-np.expm1(b - a)))
    return float(special.logsumexp(log_terms) - k * np.logaddexp(0.0, eps0))


@pytest.mark.parametrize("b,q,l1", [(31.46, 20, 2.0), (37.89, 1000, 2.0), (23.16, 20, 10.0),
                                    (6.76, 40, 6.0)])
def test_laplace_optimal_composition_against_kairouz_oh_viswanath(b, q, l1):
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant

    delta, eps0 = 1e-5, l1 / b
    eps = laplace_epsilon(b, q, delta, "optimal", l1)
    assert eps <= q * eps0
    assert _kov_log_delta(eps, eps0, q) == pytest.approx(math.log(delta), abs=1e-6)
    assert _kov_log_delta(eps * (1 - 1e-4), eps0, q) > math.log(delta)
    # an upper bound on the Laplace mechanisms' own (PLD) ε, as every ε₀-DP composition's
    pld = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    pld.compose(dpa.LaplaceDpEvent(noise_multiplier=b / l1), q)
    assert eps >= pld.get_epsilon(delta) * (1 - 1e-3)


def test_laplace_scale_is_calibrated_to_the_optimal_composition_where_it_is_tightest():
    from scipy.optimize import brentq

    delta, q = 1e-5, 20
    b = calibrate_laplace_scale(1.0, q, delta)
    assert laplace_epsilon(b, q, delta, "optimal") == pytest.approx(1.0, rel=1e-6)
    # the calibration before (the tighter of basic and RDP) needed more noise
    b_rdp = brentq(lambda s: laplace_epsilon(s, q, delta, "rdp") - 1.0, 1.0, 1e3, rtol=1e-12)
    assert b < 0.97 * b_rdp and laplace_epsilon(b, q, delta, "rdp") > 1.0
    account = account_laplace([LaplaceNoisyMaxEvent(b, 2.0, q)], delta)
    assert account.epsilon <= 1.0 * (1 + 1e-9)
    assert account.by_accountant["optimal"] == pytest.approx(1.0, rel=1e-6)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_epsilon(bad):
    with pytest.raises(FedLabelsError, match="epsilon"):
        laplace_scale(bad)


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -1e-5])
def test_bad_delta(bad):
    with pytest.raises(FedLabelsError, match="delta"):
        account_laplace([LaplaceNoisyMaxEvent(2.0, 2.0, 10)], bad)
    with pytest.raises(FedLabelsError, match="delta"):
        epsilon_from_rdp(np.ones(3), bad, [2.0, 3.0, 4.0])


def test_bad_sigma():
    with pytest.raises(FedLabelsError, match="sigma"):
        gnmax_aggregate(np.zeros((2, 3)), -1.0, np.random.default_rng(0))
    with pytest.raises(FedLabelsError, match="sigma > 0"):
        gnmax_event(np.zeros((2, 3)), np.ones(2, bool), 0.0)
    with pytest.raises(FedLabelsError, match="sigma must be a finite number > 0"):
        account_gnmax([GNMaxEvent(0.0, 2, 2)], 1e-5)
