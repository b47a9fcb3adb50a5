"""The distributed discrete Gaussian's accounting (privacy/distributed_discrete.py): Kairouz,
Liu & Steinke's bound on a sum of n discrete Gaussian shares checked against an independent
oracle, the exact Rényi divergence of the sum's pmf computed by convolution on a truncated
integer support; the single discrete Gaussian (n = 1); its event in a ledger."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import logsumexp

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.discrete_accounting import discrete_gaussian_epsilon
from fedlabels.privacy.distributed_discrete import (
    calibrate_distributed_noise_multiplier,
    distributed_discrete_epsilon,
    sum_rdp,
    sum_tau,
)
from fedlabels.privacy.events import DistributedDiscreteGaussianEvent
from fedlabels.privacy.ledger import Ledger, event_from_dict, event_to_dict

SUPPORT = 80  # |x| <= 80 per share: at s <= 1.5 the tail beyond is below e^{-1400}


def sum_log_pmf(share_sigma: float, shares: int) -> np.ndarray:
    """log pmf of the sum of ``shares`` N_Z(0, s²) on [-n·L, n·L], by convolution."""
    x = np.arange(-SUPPORT, SUPPORT + 1, dtype=np.float64)
    weights = -x ** 2 / (2.0 * share_sigma ** 2)
    one = np.exp(weights - logsumexp(weights))
    pmf = one
    for _ in range(shares - 1):
        pmf = np.convolve(pmf, one)
    return np.log(np.maximum(pmf, 1e-300))


def exact_renyi(share_sigma: float, shares: int, shift: int, alpha: float) -> float:
    """D_α(Z_n ‖ Z_n + shift), summed over the support where both pmfs are resolved."""
    lp = sum_log_pmf(share_sigma, shares)
    lq = np.full_like(lp, -np.inf)
    lq[shift:] = lp[:len(lp) - shift]
    ok = np.isfinite(lq) & (lp > -600.0) & (lq > -600.0)
    return float(logsumexp(alpha * lp[ok] + (1.0 - alpha) * lq[ok]) / (alpha - 1.0))


@pytest.mark.parametrize("share_sigma", [0.5, 0.7, 1.0])
@pytest.mark.parametrize("shares", [2, 3, 5])
def test_bound_is_at_least_the_exact_divergence_of_the_sum(share_sigma: float,
                                                            shares: int) -> None:
    assert sum_tau(share_sigma, shares) > 1e-9  # the τ terms are at work at these σ
    for shift in (1, 2, 3):
        for alpha in (1.5, 2.0, 4.0, 8.0, 20.0):
            exact = exact_renyi(share_sigma, shares, shift, alpha)
            bound = float(sum_rdp(np.array([alpha]), shift, shift, share_sigma, shares, 1)[0])
            assert bound >= exact * (1 - 1e-9), (share_sigma, shares, shift, alpha)
            # and the sum is no discrete Gaussian: the continuous-style α v²/(2ns²) alone
            # is not always an upper bound, which is why τ is there
    below = [exact_renyi(0.5, 2, 1, a) - a / (2 * 2 * 0.25) for a in (2.0, 4.0, 8.0)]
    assert max(below) > 0


def test_one_share_is_the_discrete_gaussian() -> None:
    """n = 1: τ = 0 and the bound is α v²/(2s²), CKS20's, exact at integer α."""
    assert sum_tau(0.8, 1) == 0.0
    for shift in (1, 2, 3):
        for alpha in (2.0, 3.0, 7.0):
            bound = float(sum_rdp(np.array([alpha]), shift, shift, 0.8, 1, 1)[0])
            assert bound == pytest.approx(alpha * shift ** 2 / (2 * 0.64), rel=1e-12)
            assert exact_renyi(0.8, 1, shift, alpha) == pytest.approx(bound, rel=1e-9)


def test_large_shares_account_as_the_central_discrete_gaussian() -> None:
    """Shares of std far above 1 make τ underflow: n shares of σΔ/√n then spend what one
    N_Z(0, (σΔ)²) spends (privacy/discrete_accounting.py at q = 1)."""
    sens, dim = 200.0, 300
    assert sum_tau(1.0 * sens / math.sqrt(4), 4) == 0.0
    assert distributed_discrete_epsilon(1.0, 4, sens, dim, 5, 1e-5) == pytest.approx(
        discrete_gaussian_epsilon(1.0, 1.0, 5, 1e-5), rel=1e-12)


def test_calibration_reaches_the_target_and_refuses_tiny_shares() -> None:
    sigma = calibrate_distributed_noise_multiplier(4.0, 1e-5, 3, 50.0, 100, 10)
    assert distributed_discrete_epsilon(sigma, 3, 50.0, 100, 10, 1e-5) <= 4.0
    assert distributed_discrete_epsilon(sigma * 0.99, 3, 50.0, 100, 10, 1e-5) > 4.0
    with pytest.raises(FedLabelsError, match=r"σ >= 0\.5"):
        sum_rdp(np.array([2.0]), 1.0, 1.0, 0.3, 2, 1)


def test_event_in_ledgers_round_trip_and_per_client() -> None:
    ev = DistributedDiscreteGaussianEvent(1.2, 3, 1.0, 0.01, 120.0, 400, clients=(0, 2))
    assert event_from_dict(event_to_dict(ev)) == ev
    server = Ledger(1e-5, per_client=True)
    server.record(ev, DistributedDiscreteGaussianEvent(1.2, 3, 1.0, 0.01, 120.0, 400,
                                                       clients=(0,)))
    one = distributed_discrete_epsilon(1.2, 3, 120.0, 400, 1, 1e-5)
    two = distributed_discrete_epsilon(1.2, 3, 120.0, 400, 2, 1e-5)
    from fedlabels.privacy.ledger import account_per_client

    worst, each = account_per_client(server.events, 1e-5)
    assert each[0].epsilon == pytest.approx(two) and each[2].epsilon == pytest.approx(one)
    assert worst.epsilon == pytest.approx(two)
    client = Ledger(1e-5, target=two * 1.0001)
    client.record(ev.client_part(0))  # type: ignore[arg-type]
    client.record(ev.client_part(0))  # type: ignore[arg-type]
    assert client.spent().epsilon == pytest.approx(two)
    with pytest.raises(FedLabelsError, match="budget"):
        client.record(ev.client_part(0))  # type: ignore[arg-type]
    assert ev.client_part(1) is None
