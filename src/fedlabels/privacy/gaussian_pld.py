"""The PLD of one Poisson-subsampled Gaussian step, as dp-accounting builds it, bit for bit.

``from_gaussian_mechanism`` (dp-accounting 0.6.0: connect-the-dots, pessimistic, add or
remove one) finds the hockey-stick divergence at every point of its privacy-loss grid, and
inverts the privacy loss there in a Python loop, one point at a time. The grid spans the
privacy loss, so it grows as σ shrinks (at discretisation 1e-4, q 0.25: 39,000 points an
adjacency at σ 2, 165,000 at σ 0.6), and that loop was most of the cost of a PLD at a small
σ. Here the whole grid is inverted in numpy, with the operations of dp-accounting's scalar
code in the same order; a numpy ufunc gives an array's element the bits it gives the same
scalar, so the PLD is the same (``tests/test_gaussian_pld.py`` compares every array with
dp-accounting's own, and each inverted point with its ``inverse_privacy_loss``).
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import numpy as np


def gaussian_pld(noise_multiplier: float, sampling_rate: float, discretization: float) -> Any:
    """The PLD of one step: ``from_gaussian_mechanism(noise_multiplier,
    value_discretization_interval=discretization, sampling_prob=sampling_rate)`` under
    ``ADD_OR_REMOVE_ONE`` (dp-accounting's own at q = 1, whose inversion is one line)."""
    import dp_accounting as dpa
    from dp_accounting.pld import privacy_loss_distribution as pld
    from dp_accounting.pld import privacy_loss_mechanism as plm

    if sampling_rate >= 1.0:
        return pld.from_gaussian_mechanism(
            standard_deviation=noise_multiplier, value_discretization_interval=discretization,
            sampling_prob=sampling_rate,
            neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    loss_class = _vectorised_loss_class()

    def one(adjacency: Any) -> Any:  # as from_gaussian_mechanism's single_gaussian_pld
        return pld._create_pld_pmf_from_monotone_privacy_loss(
            loss_class(noise_multiplier, sampling_prob=sampling_rate,
                       adjacency_type=adjacency),
            pessimistic_estimate=True, value_discretization_interval=discretization,
            use_connect_dots=True)

    return pld.PrivacyLossDistribution(one(plm.AdjacencyType.REMOVE),
                                       one(plm.AdjacencyType.ADD))


@functools.cache
def _vectorised_loss_class() -> Any:
    """``GaussianPrivacyLoss`` with ``get_delta_for_epsilon`` inverting the grid at once
    (defined on first use: dp-accounting is an optional dependency)."""
    from dp_accounting.pld import privacy_loss_mechanism as plm

    class VectorisedGaussianLoss(plm.GaussianPrivacyLoss):
        def get_delta_for_epsilon(self, epsilon: Any) -> Any:
            """dp-accounting's ``AdditiveNoisePrivacyLoss.get_delta_for_epsilon`` at q < 1
            (add or remove), its per-point ``inverse_privacy_loss`` done on the array."""
            add = self.adjacency_type == plm.AdjacencyType.ADD
            is_scalar = isinstance(epsilon, numbers.Number)
            epsilons = np.array([epsilon]) if is_scalar else np.asarray(epsilon)
            deltas = np.zeros_like(epsilons, dtype=float)
            if add:
                inverse_indices = epsilons < -math.log1p(-self.sampling_prob)
            else:
                inverse_indices = epsilons > math.log1p(-self.sampling_prob)
                other_indices = np.logical_not(inverse_indices)
                deltas[other_indices] = -np.expm1(epsilons[other_indices])
            inverted = epsilons[inverse_indices]
            x_cutoffs = inverse_privacy_losses(inverted, self.sampling_prob,
                                               self.sensitivity,
                                               self._standard_deviation ** 2, add)
            deltas[inverse_indices] = (
                self.mu_upper_cdf(x_cutoffs) -
                np.exp(inverted + self.mu_lower_log_cdf(x_cutoffs)))
            deltas = np.clip(deltas, 0, 1)
            return float(deltas[0]) if is_scalar else deltas

    return VectorisedGaussianLoss


def inverse_privacy_losses(losses: np.ndarray, q: float, sensitivity: float,
                           variance: float, add: bool) -> np.ndarray:
    """``GaussianPrivacyLoss.inverse_privacy_loss`` at each of ``losses`` (0 < q < 1): the
    largest x whose privacy loss is at least it, element by element as dp-accounting's
    ``_inverse_privacy_loss_add`` / ``_remove`` and ``common.log_a_times_exp_b_plus_c``."""
    edge = -math.log(1 - q) if add else math.log(1 - q)
    # math.isclose(loss, edge) (rel_tol 1e-9): the inverse of an infinite loss there
    at_edge = np.abs(losses - edge) <= 1e-9 * np.maximum(np.abs(losses), abs(edge))
    beyond = (losses > edge) if add else (losses <= edge)
    if np.any(beyond & ~at_edge):
        raise ValueError(f"privacy_loss beyond the edge {edge} of sampling_prob {q}.")
    b = -losses if add else losses
    a, c = 1 / q, 1 - 1 / q  # log(a exp(b) + c), c < 0: _log_sub(b + log a, log(-c))
    d = b + np.log(a)
    log_minus_c = np.log(-c)
    if np.any((log_minus_c >= d) & (b != 0) & ~at_edge):
        raise ValueError("a must be greater than b in dp-accounting's _log_sub.")
    with np.errstate(all="ignore"):  # at the edge, replaced below as dp-accounting does
        without = d + np.log1p(-np.exp(log_minus_c - d))
    without = np.where(b == 0, np.log(a + c), without)
    if add:
        without = -without
    x = -0.5 * sensitivity - without * variance / sensitivity
    if add:
        x = sensitivity + x
    return np.where(at_edge, -math.inf if add else math.inf, x)
