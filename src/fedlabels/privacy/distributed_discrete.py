"""Rényi-DP of the distributed discrete Gaussian: a sum of n discrete Gaussian shares.

Under secure aggregation (DP-FedAvg ``aggregation="secure"``) every client adds its own
share N_Z(0, s²) to its integer update, and the server learns only the sum of a group's
vectors: the noise is Z_n = X_1 + ... + X_n, n independent N_Z(0, s²) per coordinate. That
sum is not a discrete Gaussian. Kairouz, Liu & Steinke (ICML 2021, "The Distributed
Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation", Prop. 14,
s ≥ 1/2) bound it for every integer shift v ∈ Z^d and every order α ≥ 1:

    D_α(Z_n ‖ Z_n + v) ≤ min{ α‖v‖₂²/(2ns²) + τd,
                              (α/2)(‖v‖₂²/(ns²) + 2‖v‖₁τ/(√n s) + τ²d),
                              (α/2)(‖v‖₂/(√n s) + τ√d)² },
    τ = 10 Σ_{k=1}^{n-1} exp(−2π²s² k/(k+1)),

so the sum is within τ (per coordinate) of the discrete Gaussian N_Z(0, ns²). For n = 1
(τ = 0) it is CKS20's α‖v‖²/(2s²). DP-FedAvg's shift is one client's integer vector:
‖v‖₂ ≤ Δ = S/γ + √d/2, and ‖v‖₁ ≤ min(√d Δ, Δ²) (an integer's |v_i| ≤ v_i²).

More shares than n only add independent noise (post-processing), so a client that answers
groups of at least ``min_group`` members and adds variance (σΔ)²/min_group accounts each
release as n = min_group shares of s = σΔ/√min_group: α/(2σ²) plus the τ terms.
tests/test_distributed_discrete.py checks the bound against the exact Rényi divergence of
the convolution of n one-dimensional discrete Gaussians, and against n = 1.

The per-release RDP curve (dp-accounting's default orders) is composed over the releases
and converted to (ε, δ) by dp-accounting's RDP conversion, as the discrete Gaussian's
(:mod:`fedlabels.privacy.discrete_accounting`). No subsampling: the server picks the group,
so against the server there is no secret sample to amplify by.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.accounting import PrivacySpent, require_dp_accounting
from fedlabels.privacy.search import smallest_noise
from fedlabels.privacy.validation import check_delta, check_epsilon, check_noise_multiplier

#: the smallest share standard deviation the bound holds for (KLS21 Prop. 14)
MIN_SHARE_SIGMA = 0.5


def sum_tau(share_sigma: float, shares: int) -> float:
    """τ = 10 Σ_{k=1}^{n-1} exp(−2π²s² k/(k+1)) of ``shares`` = n shares of std s."""
    if shares < 1:
        raise FedLabelsError(f"a sum needs at least 1 share, got {shares}.")
    k = np.arange(1, shares, dtype=np.float64)
    return float(10.0 * np.sum(np.exp(-2.0 * math.pi ** 2 * share_sigma ** 2 * k / (k + 1))))


def sum_rdp(orders: np.ndarray, l2: float, l1: float, share_sigma: float, shares: int,
            dim: int) -> np.ndarray:
    """KLS21 Prop. 14: the bound on D_α(Z_n ‖ Z_n + v) at each of ``orders`` for a shift of
    ℓ2 norm ``l2`` and ℓ1 norm ``l1`` in ``dim`` coordinates, n = ``shares`` shares of
    N_Z(0, s²) with s = ``share_sigma`` >= 1/2."""
    if not share_sigma >= MIN_SHARE_SIGMA:
        raise FedLabelsError(f"the bound on a sum of discrete Gaussians needs each share's "
                             f"σ >= {MIN_SHARE_SIGMA}, got {share_sigma!r}; add more noise.")
    a = np.asarray(orders, dtype=np.float64)
    tau = sum_tau(share_sigma, shares)
    scale = math.sqrt(shares) * share_sigma  # √n s
    first = a * l2 ** 2 / (2.0 * scale ** 2) + tau * dim
    second = a / 2.0 * (l2 ** 2 / scale ** 2 + 2.0 * l1 * tau / scale + tau ** 2 * dim)
    third = a / 2.0 * (l2 / scale + tau * math.sqrt(dim)) ** 2
    out: np.ndarray = np.minimum(np.minimum(first, second), third)
    return out


def shift_l1(sensitivity: float, dim: int) -> float:
    """The ℓ1 bound of an integer vector of ℓ2 norm at most Δ in d coordinates:
    min(√d Δ, Δ²)."""
    return min(math.sqrt(dim) * sensitivity, sensitivity ** 2)


@functools.lru_cache(maxsize=256)
def distributed_discrete_rdp(noise_multiplier: float, shares: int, sensitivity: float,
                             dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The orders and RDP curve of one release: ``shares`` shares of std σΔ/√shares on a sum
    of ℓ2 sensitivity Δ (grid units) in ``dim`` coordinates."""
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    check_noise_multiplier(noise_multiplier)
    orders = np.asarray(DEFAULT_RDP_ORDERS, dtype=np.float64)
    share_sigma = noise_multiplier * sensitivity / math.sqrt(shares)
    curve = sum_rdp(orders, sensitivity, shift_l1(sensitivity, dim), share_sigma, shares, dim)
    orders.setflags(write=False)
    curve.setflags(write=False)
    return orders, curve


@functools.lru_cache(maxsize=256)
def distributed_discrete_epsilon(noise_multiplier: float, shares: int, sensitivity: float,
                                 dim: int, releases: int, delta: float) -> float:
    """ε at δ of ``releases`` distributed discrete Gaussian releases, by RDP."""
    require_dp_accounting()
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    check_delta(delta)
    if releases < 1:
        raise FedLabelsError(f"releases must be >= 1, got {releases}.")
    orders, curve = distributed_discrete_rdp(noise_multiplier, shares, sensitivity, dim)
    return float(compute_epsilon(orders, releases * curve, delta)[0])


def distributed_discrete_spent(noise_multiplier: float, shares: int, sensitivity: float,
                               dim: int, releases: int, delta: float) -> PrivacySpent:
    eps = distributed_discrete_epsilon(noise_multiplier, shares, sensitivity, dim, releases,
                                       delta)
    return PrivacySpent(eps, delta, "rdp", {"rdp": eps})


@functools.lru_cache(maxsize=64)
def calibrate_distributed_noise_multiplier(target_epsilon: float, delta: float, shares: int,
                                           sensitivity: float, dim: int,
                                           releases: int) -> float:
    """The smallest σ (to 1e-6 relative, rounded up) whose ``releases`` releases are
    (``target_epsilon``, ``delta``)-DP by :func:`distributed_discrete_epsilon`, for the ℓ2
    ``sensitivity`` Δ of a ``dim``-dimensional sum of ``shares`` shares; each share's std
    σΔ/√shares is kept >= 1/2."""
    check_epsilon(target_epsilon, "target epsilon")
    check_delta(delta)
    lowest = MIN_SHARE_SIGMA * math.sqrt(shares) / sensitivity  # σ of a share std of 1/2

    def eps(sigma: float) -> float:
        return distributed_discrete_epsilon(sigma, shares, sensitivity, dim, releases, delta)

    lo = max(1e-3, lowest)
    return smallest_noise(eps, target_epsilon, lo, 2.0 * lo, f"{releases} release(s)")


__all__ = ["MIN_SHARE_SIGMA", "calibrate_distributed_noise_multiplier",
           "distributed_discrete_epsilon", "distributed_discrete_rdp",
           "distributed_discrete_spent", "shift_l1", "sum_rdp", "sum_tau"]
