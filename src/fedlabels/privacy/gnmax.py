"""PATE's GNMax aggregator and its Rényi-DP analysis (Papernot et al., ICLR 2018).

Setting: ``n`` teachers with disjoint private data each vote for one of ``C`` classes on a
query; the vote counts ``n_1..n_C`` are released as ``argmax_i (n_i + N(0, σ²))``.

Neighbouring relation: one private record of one teacher changes (that teacher's vote may
move from one class to another), so the count vector changes by -1 in one class and +1 in
another: **L2 sensitivity √2**. That holds only when every record trains exactly one teacher
(disjoint teacher data); see docs/baselines.md for FREDY, where it does not.

* **Data-independent bound** (Prop. 8): RDP(λ) = λ / σ² per asked query — a Gaussian
  mechanism with noise multiplier σ/√2. The guarantee composes these Gaussian mechanisms
  exactly (one with μ = √(2Q)/σ; :mod:`fedlabels.privacy.vote_accounting`), tighter than
  the RDP sum, which is reported beside it.
* **Data-dependent bound** (Prop. 7, Thm. 6, Prop. 10): tighter when the teachers agree, but
  a function of the private votes; it is *not itself differentially private* unless released
  through smooth sensitivity (not implemented), so results report it as such.
* **Confident GNMax** (Alg. 1): a query is answered only if ``max_i n_i + N(0, σ₁²) ≥ T``;
  the threshold check is a Gaussian mechanism on the maximum count (L2 sensitivity 1), RDP
  λ / (2σ₁²) per query, charged for every query.

This module holds the mechanism (:func:`gnmax_aggregate`) and the per-query formulas only.
Callers record a :class:`~fedlabels.privacy.events.GNMaxEvent` (:func:`gnmax_event`) and
:func:`fedlabels.privacy.vote_accounting.account_gnmax` composes the events into (ε, δ): exactly
as one Gaussian mechanism (the guarantee), and by RDP (adds per order, converted with
dp-accounting's ``compute_epsilon``) beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.consensus import ABSTAIN
from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.events import GNMaxEvent

#: RDP orders used for PATE accounting (dense where the optimum usually lies)
DEFAULT_ORDERS = np.concatenate([np.linspace(1.01, 1.99, 50), np.arange(2.0, 100.0, 0.5),
                                 np.arange(100.0, 1001.0, 10.0)])


def check_sigma(sigma: Any, name: str = "noise sigma") -> float:
    """σ must be a finite number >= 0 (0 means no noise, i.e. plain PATE)."""
    if isinstance(sigma, bool) or not isinstance(sigma, int | float) \
            or not math.isfinite(sigma) or sigma < 0:
        raise FedLabelsError(f"{name} must be a finite number >= 0, got {sigma!r}; it is the "
                             "standard deviation of the Gaussian noise added to each vote "
                             "count (e.g. --noise-sigma 2.0).")
    return float(sigma)


# ------------------------------------------------------------------ the aggregator

@dataclass(frozen=True)
class GNMaxRelease:
    """What a (confident) GNMax aggregation released, plus the noise it drew (diagnostics)."""

    labels: np.ndarray          # (Q,) int64; ABSTAIN (-1) where confident GNMax declined
    answered: np.ndarray        # (Q,) bool
    noise: np.ndarray           # (Q, C) Gaussian noise added to the counts (NaN if unanswered)
    threshold_noise: np.ndarray | None = None  # (Q,) noise of the threshold check


def gnmax_aggregate(counts: np.ndarray, sigma: float, rng: np.random.Generator,
                    threshold: float | None = None,
                    threshold_sigma: float | None = None) -> GNMaxRelease:
    """(Confident) GNMax: ``argmax(counts + N(0, σ²))`` per query, vectorised.

    Parameters
    ----------
    counts : ndarray of shape (Q, C)
        Vote counts per query.
    sigma : float
        Standard deviation σ of the noise on each count; 0 gives the plain argmax (PATE).
    rng : numpy Generator
        Source of the noise (seeded by the caller).
    threshold, threshold_sigma : float, optional
        Confident GNMax: answer only queries with ``max(counts) + N(0, σ₁²) >= threshold``;
        the others get :data:`~fedlabels.consensus.ABSTAIN`.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2:
        raise FedLabelsError(f"vote counts must have shape (queries, classes), got "
                             f"{counts.shape}.")
    sigma = check_sigma(sigma)
    q: int = counts.shape[0]
    answered = np.ones(q, dtype=bool)
    t_noise: np.ndarray | None = None
    if threshold is not None:
        s1 = check_sigma(threshold_sigma if threshold_sigma is not None else 0.0,
                         "threshold sigma")
        t_noise = rng.normal(0.0, s1, size=q) if s1 > 0 else np.zeros(q)
        answered = counts.max(axis=1) + t_noise >= float(threshold)
    noise = rng.normal(0.0, sigma, size=counts.shape) if sigma > 0 else np.zeros(counts.shape)
    labels = np.argmax(counts + noise, axis=1).astype(np.int64)  # ties: smallest index
    labels[~answered] = ABSTAIN
    noise[~answered] = np.nan
    return GNMaxRelease(labels, answered, noise, t_noise)


# ------------------------------------------------------------------ RDP, data-independent

def check_orders(orders: Any = None) -> np.ndarray:
    """The RDP orders as a float array (default :data:`DEFAULT_ORDERS`); all must be > 1."""
    out = np.atleast_1d(np.asarray(DEFAULT_ORDERS if orders is None else orders, dtype=float))
    if np.any(out <= 1):
        raise FedLabelsError("RDP orders must all be > 1.")
    return out


def gnmax_rdp_data_independent(sigma: float, orders: Any = None) -> np.ndarray:
    """RDP(λ) = λ/σ² of one GNMax query (Prop. 8; L2 sensitivity √2)."""
    sigma = check_sigma(sigma)
    if sigma == 0:
        return np.full(check_orders(orders).shape, np.inf)
    return check_orders(orders) / sigma**2


def threshold_rdp(threshold_sigma: float, orders: Any = None) -> np.ndarray:
    """RDP(λ) = λ/(2σ₁²) of confident GNMax's threshold check (max count: sensitivity 1)."""
    s1 = check_sigma(threshold_sigma, "threshold sigma")
    if s1 == 0:
        return np.full(check_orders(orders).shape, np.inf)
    return check_orders(orders) / (2.0 * s1**2)


# ------------------------------------------------------------------ RDP, data-dependent

def gnmax_log_q(counts: np.ndarray, sigma: float) -> np.ndarray:
    """log q̃ per query: a bound on Pr[GNMax ≠ argmax counts] (Prop. 7, union bound).

    q̃ = Σ_{i≠i*} ½ erfc((n_{i*} - n_i) / (2σ)), capped at 1 - 1/C; computed in log space.
    """
    from scipy import special, stats  # lazily: importing fedlabels must not load scipy

    counts = np.asarray(counts, dtype=np.float64)
    n_classes = counts.shape[1]
    top = counts.argmax(axis=1)
    gaps = counts[np.arange(len(counts)), top][:, None] - counts       # (Q, C), >= 0
    logs = stats.norm.logsf(gaps, scale=math.sqrt(2.0) * sigma)
    logs[np.arange(len(counts)), top] = -np.inf
    logq = special.logsumexp(logs, axis=1)
    return np.minimum(logq, math.log1p(-1.0 / n_classes))


def _log1mexp(x: np.ndarray | float) -> np.ndarray | float:
    """log(1 - exp(x)) for x < 0, numerically stable."""
    x = np.asarray(x, dtype=float)
    return np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def gnmax_rdp_data_dependent(log_q: float, sigma: float, orders: Any = None) -> np.ndarray:
    """Per-order RDP of one GNMax query given log q̃ (Thm. 6 with Prop. 10's higher orders).

    Takes the minimum of the data-dependent bound and λ/σ²; where Thm. 6's conditions fail
    the data-independent value is returned.
    """
    orders = check_orders(orders)
    sigma = check_sigma(sigma)
    if sigma == 0:
        return np.full(orders.shape, np.inf)
    var = sigma**2
    ret = orders / var
    if np.isneginf(log_q):
        return np.zeros_like(orders)
    mu2 = math.sqrt(var * -log_q)
    mu1 = mu2 + 1.0
    eps1, eps2 = mu1 / var, mu2 / var
    mask = (orders <= mu1) & (mu2 > 1.0)
    if not mask.any():
        return ret
    # q̃ e^{ε₂} < 1, and q̃ <= e^{(μ₂-1)ε₂} / ((μ₁/(μ₁-1))·(μ₂/(μ₂-1)))^{μ₂}
    cond_a = -log_q > eps2
    cond_b = log_q <= (mu2 - 1.0) * eps2 - mu2 * (math.log(mu1 / (mu1 - 1.0))
                                                  + math.log(mu2 / (mu2 - 1.0)))
    if not (cond_a and cond_b):
        return ret
    log1q = float(_log1mexp(log_q))
    log_A = log1q - float(_log1mexp((log_q + eps2) * (mu2 - 1.0) / mu2))
    log_B = eps1 - log_q / (mu1 - 1.0)
    lam = orders[mask]
    log_s = np.logaddexp(log1q + (lam - 1.0) * log_A, log_q + (lam - 1.0) * log_B)
    ret[mask] = np.minimum(ret[mask], log_s / (lam - 1.0))
    return ret


def gnmax_rdp_data_dependent_sum(log_q: Any, sigma: float, orders: Any = None) -> np.ndarray:
    """Σ of :func:`gnmax_rdp_data_dependent` over queries given their log q̃ values."""
    orders = check_orders(orders)
    total = np.zeros_like(orders)
    log_q = np.asarray(log_q, dtype=float)
    if log_q.size == 0:
        return total
    # queries with the same log q̃ share one evaluation (votes are integer counts)
    uniq, mult = np.unique(np.round(log_q, 12), return_counts=True)
    for lq, k in zip(uniq, mult, strict=True):
        total += k * gnmax_rdp_data_dependent(float(lq), sigma, orders)
    return total


def gnmax_rdp_data_dependent_total(counts: np.ndarray, sigma: float,
                                   orders: Any = None) -> np.ndarray:
    """Σ over queries of :func:`gnmax_rdp_data_dependent` (answered queries only)."""
    if len(counts) == 0:
        return np.zeros_like(check_orders(orders))
    return gnmax_rdp_data_dependent_sum(gnmax_log_q(counts, sigma), sigma, orders)


# ------------------------------------------------------------------ the event

def gnmax_event(counts: np.ndarray, answered: np.ndarray, sigma: float,
                threshold: float | None = None, threshold_sigma: float | None = None,
                data_dependent: bool = True) -> GNMaxEvent:
    """The :class:`~fedlabels.privacy.events.GNMaxEvent` of one :func:`gnmax_aggregate` call.

    ``data_dependent`` also stores log q̃ of the answered queries (from the private counts;
    feeds only the data-dependent bound, which is not itself DP). Requires σ > 0.
    """
    sigma = check_sigma(sigma)
    if sigma == 0:
        raise FedLabelsError("GNMax accounting needs noise sigma > 0 (sigma = 0 is plain "
                             "PATE, which is not differentially private).")
    counts = np.asarray(counts, dtype=np.float64)
    answered = np.asarray(answered, dtype=bool)
    log_q = None
    if data_dependent:
        answered_counts = counts[answered]
        log_q = tuple(float(v) for v in gnmax_log_q(answered_counts, sigma)) \
            if len(answered_counts) else ()
    return GNMaxEvent(sigma, len(counts), int(answered.sum()), threshold,
                      threshold_sigma if threshold is not None else None, log_q)
