"""The discrete Gaussian of DP-FedAvg's ``noise="discrete"``: the sampler against the exact pmf,
the RDP accounting against Rényi divergences summed term by term (both directions of the
Poisson-subsampled mechanism) and the fixed-point encoding's sensitivity bound
(the protocol: tests/test_dp_fedavg_discrete.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import numpy_generator, reproducible
from fedlabels.privacy.accounting import _rdp_of_one_step, gaussian_epsilon, tightest_gaussian
from fedlabels.privacy.discrete_accounting import (
    INTEGER_ORDERS,
    calibrate_discrete_noise_multiplier,
    discrete_gaussian_epsilon,
    discrete_gaussian_rdp,
    poisson_general_rdp,
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

DELTA = 1e-5


# ------------------------------------------------------------------ exact oracles

def _log_pmf(x: np.ndarray, mu: float, s: float) -> np.ndarray:
    """log N_Z(mu, s²) at the integers x, the normaliser summed over mu ± 60 s."""
    r = np.arange(math.floor(mu - 60 * s) - 5, math.ceil(mu + 60 * s) + 6, dtype=np.float64)
    return -(x - mu) ** 2 / (2 * s * s) - logsumexp(-(r - mu) ** 2 / (2 * s * s))


def _divergences(q: float, s: float, m: int, alpha: float) -> tuple[float, float]:
    """D_α(mix ‖ P) and D_α(P ‖ mix) for P = N_Z(0, s²), mix = (1 − q) P + q N_Z(m, s²), summed
    over every integer that carries mass (the summand peaks near α·m)."""
    span = int(80 * s) + 50 + math.ceil(alpha) * m
    x = np.arange(-span, span + m * math.ceil(alpha) + 1, dtype=np.float64)
    lp, lm = _log_pmf(x, 0.0, s), _log_pmf(x, float(m), s)
    lmix = lm if q >= 1.0 else np.logaddexp(math.log1p(-q) + lp, math.log(q) + lm)
    forward = float(logsumexp(alpha * lmix + (1 - alpha) * lp)) / (alpha - 1)
    backward = float(logsumexp(alpha * lp + (1 - alpha) * lmix)) / (alpha - 1)
    return forward, backward


# ------------------------------------------------------------------ sampler

@pytest.mark.parametrize("sigma", [0.6, 3.7, 40.0])
def test_sampler_matches_the_exact_pmf(sigma: float) -> None:
    n = 200_000
    with reproducible(11):
        draws = sample_discrete_gaussian(sigma, n, numpy_generator())
    assert draws.dtype == np.int64
    support = np.arange(-int(12 * sigma) - 12, int(12 * sigma) + 13)
    pmf = np.exp(_log_pmf(support.astype(np.float64), 0.0, sigma))
    assert draws.min() >= support[0] and draws.max() <= support[-1]
    counts = np.bincount(draws - support[0], minlength=support.size)
    expected = n * pmf
    # cells with expected count >= 20, the tails pooled into one cell each
    keep = expected >= 20
    lo, hi = np.argmax(keep), len(keep) - np.argmax(keep[::-1])
    obs = np.r_[counts[:lo].sum(), counts[lo:hi], counts[hi:].sum()]
    exp_ = np.r_[expected[:lo].sum(), expected[lo:hi], expected[hi:].sum()]
    exp_ *= obs.sum() / exp_.sum()
    p_value = stats.chisquare(obs, exp_).pvalue
    assert p_value > 1e-3, p_value
    variance = float(np.sum(pmf * support ** 2))  # N_Z's variance (below σ² for small σ)
    assert draws.var() == pytest.approx(variance, rel=0.02)
    assert abs(draws.mean()) < 5 * math.sqrt(variance / n)
    assert abs(np.mean(draws > 0) - np.mean(draws < 0)) < 5 / math.sqrt(n)


def test_sampler_is_reproducible_only_in_the_reproducible_mode() -> None:
    with reproducible(3):
        a = sample_discrete_gaussian(5.0, 1000, numpy_generator())
    with reproducible(3):
        b = sample_discrete_gaussian(5.0, 1000, numpy_generator())
    np.testing.assert_array_equal(a, b)
    c = sample_discrete_gaussian(5.0, 1000, numpy_generator())  # OS entropy
    assert not np.array_equal(a, c)
    with pytest.raises(FedLabelsError, match="σ"):
        sample_discrete_gaussian(0.0, 3, numpy_generator())


# ------------------------------------------------------------------ RDP

@pytest.mark.parametrize("s", [0.5, 1.3, 4.0])
@pytest.mark.parametrize("m", [1, 2])
def test_full_participation_divergence_is_the_continuous_curve(s: float, m: int) -> None:
    """D_α(N_Z(0, s²) ‖ N_Z(m, s²)) summed: α m²/(2s²) at integer α, at most that between."""
    for alpha in (1.5, 2.0, 2.7, 3.0, 7.3, 10.0):
        divergence, _ = _divergences(1.0, s, m, alpha)
        curve = alpha * m * m / (2 * s * s)
        if float(alpha).is_integer():
            assert divergence == pytest.approx(curve, rel=1e-9, abs=1e-12)
        else:
            assert divergence <= curve * (1 + 1e-9)
    # the accountant's one-round curve at σ = s/m (Δ = m) bounds the summed divergence
    orders, rdp = discrete_gaussian_rdp(s / m, 1.0)
    for alpha, r in zip(orders[::7], rdp[::7], strict=True):
        assert _divergences(1.0, s, m, float(alpha))[0] <= r * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize("q", [0.01, 0.1, 0.5, 0.9])
@pytest.mark.parametrize(("s", "m"), [(0.6, 1), (1.0, 1), (2.0, 1), (5.0, 3), (3.0, 2)])
def test_poisson_bound_dominates_both_exact_directions_and_the_continuous_rdp(
        q: float, s: float, m: int) -> None:
    sigma = s / m
    orders, curve = discrete_gaussian_rdp(sigma, q)
    cont_orders, cont = _rdp_of_one_step(sigma, q)
    cont_at = dict(zip((float(a) for a in cont_orders), cont, strict=True))
    for alpha in (2, 3, 4, 6, 10, 20, 40):
        forward, backward = _divergences(q, s, m, alpha)
        bound = float(curve[list(orders).index(alpha)])
        assert bound >= forward * (1 - 1e-9) - 1e-12
        assert bound >= backward * (1 - 1e-9) - 1e-12
        assert bound >= cont_at[float(alpha)] * (1 - 1e-9) - 1e-12
        assert bound <= alpha / (2 * sigma ** 2) * (1 + 1e-12)  # never above q = 1


def test_poisson_bound_transcribes_zhu_wang_at_order_three() -> None:
    """Order 3 written out by hand: (1−q)²(1+2q) + 3q²(1−q)e^{ε(2)} + 3·q³·e^{2ε(3)}."""
    for q, sigma in ((0.05, 1.0), (0.3, 0.7), (0.6, 2.0)):
        eps = np.arange(4) / (2 * sigma ** 2)
        by_hand = math.log((1 - q) ** 2 * (1 + 2 * q) + 3 * q ** 2 * (1 - q) * math.exp(eps[2])
                           + 3 * q ** 3 * math.exp(2 * eps[3])) / 2
        assert poisson_general_rdp(eps, q, 3) == pytest.approx(min(by_hand, eps[3]), rel=1e-12)


def test_accountant_is_monotone_and_never_below_the_continuous_one() -> None:
    for q in (1.0, 0.3):
        eps = [discrete_gaussian_epsilon(1.2, q, t, DELTA) for t in (1, 5, 25)]
        assert eps == sorted(eps) and eps[0] < eps[-1]
        by_sigma = [discrete_gaussian_epsilon(s, q, 10, DELTA) for s in (0.8, 1.6, 3.2)]
        assert by_sigma == sorted(by_sigma, reverse=True)
        for sigma in (0.8, 2.0, 6.0):
            continuous = tightest_gaussian(sigma, q, 10, DELTA,
                                           ("analytic", "rdp") if q == 1.0 else ("rdp",))
            assert discrete_gaussian_epsilon(sigma, q, 10, DELTA) >= continuous.epsilon
    # at q = 1 the discrete curve is the continuous Gaussian's: the same RDP ε
    assert discrete_gaussian_epsilon(1.5, 1.0, 7, DELTA) == pytest.approx(
        gaussian_epsilon(1.5, 1.0, 7, DELTA, "rdp"), rel=1e-6)


@pytest.mark.parametrize("q", [1.0, 0.2])
def test_calibration_is_the_smallest_sigma_within_the_target(q: float) -> None:
    sigma = calibrate_discrete_noise_multiplier(4.0, DELTA, q, 20)
    assert discrete_gaussian_epsilon(sigma, q, 20, DELTA) <= 4.0
    assert discrete_gaussian_epsilon(sigma * (1 - 1e-4), q, 20, DELTA) > 4.0


def test_subsampled_orders_are_integers() -> None:
    orders, _ = discrete_gaussian_rdp(1.0, 0.5)
    assert all(float(a).is_integer() and a >= 2 for a in orders)
    assert tuple(int(a) for a in orders) == INTEGER_ORDERS


# ------------------------------------------------------------------ fixed-point encoding

def test_encoding_stays_within_its_integer_sensitivity() -> None:
    rng = np.random.default_rng(0)
    clip, d = 0.7, 5_000
    grid = default_grid(clip, d)
    delta = integer_sensitivity(clip, grid, d)
    assert delta == pytest.approx(1.01 * clip / grid)  # the default: rounding adds 1 %
    for scale in (1e-3, 0.7 / math.sqrt(d), 10.0):
        u = (rng.standard_normal(d) * scale).astype(np.float32)
        z, norm = encode_update(u, clip, grid)
        assert z.dtype == payload_dtype(clip, grid) == np.int16
        assert squared_norm(z) <= delta ** 2
        assert norm == pytest.approx(float(np.linalg.norm(u.astype(np.float64))))
        clipped = u.astype(np.float64) * min(1.0, clip / norm)
        assert np.max(np.abs(z * grid - clipped)) <= grid / 2 * (1 + 1e-9)
    # the √d/2 term at its worst: every coordinate half a step from two integers (rint
    # rounds 1.5 up to 2, 2.5 down to 2: the odd ones move away from zero)
    half = np.full(d, 1.5 * grid, dtype=np.float64)
    z, _ = encode_update(half, clip, grid)
    assert squared_norm(z) == 4 * d <= delta ** 2


def test_encoding_shrinks_until_the_integer_check_holds(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Were float rounding to push ‖z‖ past Δ, the update is shrunk and rounded again: here
    Δ is made 0.1 % too small for the clipped update, and the result still fits it."""
    import fedlabels.privacy.discrete_gaussian as dg

    clip, grid, d = 1.0, 1e-3, 100
    tight = 0.999 * clip / grid
    monkeypatch.setattr(dg, "integer_sensitivity", lambda c, g, n: tight)
    u = np.full(d, 1.0, dtype=np.float32)  # clipped to norm 1: ‖x/γ‖ = 1000 > Δ
    z, _ = dg.encode_update(u, clip, grid)
    assert squared_norm(z) <= tight ** 2 and squared_norm(z) > (0.99 * tight) ** 2


def test_squared_norm_is_exact_where_floats_and_int64_are_not() -> None:
    z = np.array([3_037_000_499, 3_037_000_499, 1], dtype=np.int64)  # squares near 2^63
    assert squared_norm(z) == 2 * 3_037_000_499 ** 2 + 1
    extreme = np.array([np.iinfo(np.int64).min, 7, np.iinfo(np.int64).max], dtype=np.int64)
    assert squared_norm(extreme) == 2**126 + 49 + (2**63 - 1) ** 2
    assert squared_norm(np.array([2**64 - 1], dtype=np.uint64)) == (2**64 - 1) ** 2
    assert squared_norm(np.arange(-300, 300, dtype=np.int16)) == sum(v * v for v in
                                                                      range(-300, 300))


def test_integer_sum_plus_noise_cannot_overflow_int64() -> None:
    # MLP 784-512-512-10 at the default grid, 10,000 clients, σ = 100: far inside int64
    d = 669_706
    grid = default_grid(1.0, d)
    check_headroom(1.0, grid, d, 10_000, 100.0)
    assert 10_000 * (1.0 / grid + 1) + 40 * 100.0 * integer_sensitivity(1.0, grid, d) < 2**62
    with pytest.raises(FedLabelsError, match="int64"):
        check_headroom(1.0, 1e-15, d, 10_000, 1.0)
    with pytest.raises(FedLabelsError, match="coarser --grid"):
        payload_dtype(1.0, 1e-20)
