"""Rényi-DP accounting of the discrete Gaussian on DP-FedAvg's integer sum.

One round adds N_Z(0, (σΔ)²) to every coordinate of an integer sum whose ℓ2 sensitivity
(add/remove one client) is Δ (:mod:`fedlabels.privacy.discrete_gaussian`).

**Full participation (q = 1).** For an integer shift m, completing the square gives
D_α(N_Z(0, s²) ‖ N_Z(m, s²)) = α m²/(2s²) + log(θ(c)/θ(0))/(α − 1), θ(c) = Σ_x e^{−(x−c)²/2s²},
c = (1 − α) m: the correction vanishes for integer α (θ is 1-periodic) and is ≤ 0 otherwise
(θ peaks at integers), so D_α ≤ α m²/(2s²) for every real α > 1 (Canonne, Kamath & Steinke
2020, Thm 4 and §4). Rényi divergence adds over independent coordinates, so an integer shift
v costs at most α‖v‖²/(2s²) ≤ α/(2σ²): the continuous Gaussian's RDP curve, composed over the
rounds and converted to (ε, δ) by dp-accounting's RDP conversion
(``rdp_privacy_accountant.compute_epsilon``, CKS20 Prop. 12, valid for any mechanism). The
analytic-Gaussian and PLD accountants model the continuous Gaussian's privacy profile and do
not apply.

**Poisson client sampling (q < 1).** The sampled-Gaussian RDP (Mironov, Talwar & Zhang 2019)
uses the continuous Gaussian's rotation invariance, which the discrete one lacks. Instead,
for integer α ≥ 2, the general bound of Zhu & Wang (ICML 2019, "Poisson subsampled Rényi
differential privacy"), valid for any mechanism with RDP ε(·) and both directions of
add/remove:

    ε'(α) ≤ log[(1−q)^{α−1}(1 + (α−1)q) + C(α,2) q² (1−q)^{α−2} e^{ε(2)}
               + 3 Σ_{ℓ=3}^{α} C(α,ℓ) q^ℓ (1−q)^{α−ℓ} e^{(ℓ−1)ε(ℓ)}] / (α − 1),

with ε(ℓ) = ℓ/(2σ²) (as implemented in autodp's ``rdp_acct.general_upperbound``, read at
commit 06489ea), and never more than ε(α) itself (Rényi divergence is jointly quasi-convex,
van Erven & Harremoës 2014, Thm 13, so a mixture is never further than its worst component).
tests/test_discrete_gaussian.py checks it against both directions of the exact divergence of
the one-dimensional subsampled discrete Gaussian, summed term by term, and against the
continuous sampled-Gaussian RDP.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.accounting import PrivacySpent, require_dp_accounting
from fedlabels.privacy.search import smallest_noise
from fedlabels.privacy.validation import (
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_sampling_rate,
)

#: the one accountant of discrete-Gaussian rounds
DISCRETE_ACCOUNTANTS = ("rdp",)

#: the integer orders of the subsampled bound (dp-accounting's default integer orders)
INTEGER_ORDERS = (*range(2, 64), 128, 256, 512, 1024)


def _orders(sampling_rate: float) -> np.ndarray:
    if sampling_rate >= 1.0:
        from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

        return np.asarray(DEFAULT_RDP_ORDERS, dtype=np.float64)
    return np.asarray(INTEGER_ORDERS, dtype=np.float64)


def poisson_general_rdp(rdp: np.ndarray, q: float, alpha: int) -> float:
    """Zhu & Wang's bound on the RDP at integer order ``alpha`` >= 2 of a mechanism whose RDP
    at orders 0, 1, ..., alpha is ``rdp`` (``rdp[l]`` = ε(l); entries 0 and 1 unused), run on
    a Poisson sample with rate ``q`` < 1; capped at ε(alpha)."""
    from scipy.special import gammaln, logsumexp

    if alpha < 2 or not 0.0 < q < 1.0:
        raise FedLabelsError(f"the Poisson bound needs an integer order >= 2 and 0 < q < 1, "
                             f"got {alpha}, {q}.")
    a = float(alpha)
    log_q, log_1q = math.log(q), math.log1p(-q)
    terms = [(a - 1.0) * log_1q + math.log1p((a - 1.0) * q),
             math.log(a * (a - 1.0) / 2.0) + 2.0 * log_q + (a - 2.0) * log_1q + rdp[2]]
    if alpha >= 3:
        ell = np.arange(3, alpha + 1, dtype=np.float64)
        log_binom = gammaln(a + 1.0) - gammaln(ell + 1.0) - gammaln(a - ell + 1.0)
        terms.append(float(logsumexp(math.log(3.0) + log_binom + ell * log_q
                                     + (a - ell) * log_1q + (ell - 1.0) * rdp[3:alpha + 1])))
    return min(float(logsumexp(terms)) / (a - 1.0), float(rdp[alpha]))


@functools.lru_cache(maxsize=256)
def discrete_gaussian_rdp(noise_multiplier: float, sampling_rate: float
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The orders and RDP curve of one round: α/(2σ²) at q = 1 (every real order of
    dp-accounting's default), Zhu & Wang's bound at integer orders at q < 1."""
    check_noise_multiplier(noise_multiplier)
    check_sampling_rate(sampling_rate)
    orders = _orders(sampling_rate)
    if sampling_rate >= 1.0:
        curve = orders / (2.0 * noise_multiplier ** 2)
    else:
        top = int(orders.max())
        base = np.arange(top + 1, dtype=np.float64) / (2.0 * noise_multiplier ** 2)
        curve = np.array([poisson_general_rdp(base, sampling_rate, int(a)) for a in orders])
    orders.setflags(write=False)
    curve.setflags(write=False)
    return orders, curve


@functools.lru_cache(maxsize=256)
def discrete_gaussian_epsilon(noise_multiplier: float, sampling_rate: float, rounds: int,
                              delta: float) -> float:
    """ε at δ of ``rounds`` discrete-Gaussian rounds (add/remove one client), by RDP."""
    require_dp_accounting()
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    check_delta(delta)
    if rounds < 1:
        raise FedLabelsError(f"rounds must be >= 1, got {rounds}.")
    orders, curve = discrete_gaussian_rdp(noise_multiplier, sampling_rate)
    return float(compute_epsilon(orders, rounds * curve, delta)[0])


def discrete_gaussian_spent(noise_multiplier: float, sampling_rate: float, rounds: int,
                            delta: float) -> PrivacySpent:
    eps = discrete_gaussian_epsilon(noise_multiplier, sampling_rate, rounds, delta)
    return PrivacySpent(eps, delta, "rdp", {"rdp": eps})


@functools.lru_cache(maxsize=64)
def calibrate_discrete_noise_multiplier(target_epsilon: float, delta: float,
                                        sampling_rate: float, rounds: int) -> float:
    """The smallest σ (to 1e-6 relative, rounded up) whose ``rounds`` discrete-Gaussian
    rounds are (target ε, δ)-DP by :func:`discrete_gaussian_epsilon`."""
    check_epsilon(target_epsilon, "target epsilon")
    check_delta(delta)
    check_sampling_rate(sampling_rate)

    def eps(sigma: float) -> float:
        return discrete_gaussian_epsilon(sigma, sampling_rate, rounds, delta)

    return smallest_noise(eps, target_epsilon, 1e-3, 1.0, f"{rounds} round(s)")


__all__ = ["DISCRETE_ACCOUNTANTS", "INTEGER_ORDERS", "calibrate_discrete_noise_multiplier",
           "discrete_gaussian_epsilon", "discrete_gaussian_rdp", "discrete_gaussian_spent",
           "poisson_general_rdp"]
