"""PATE's GNMax aggregator and its Rényi-DP analysis (Papernot et al., ICLR 2018).

Setting: ``n`` teachers with disjoint private data each vote for one of ``C`` classes on a
query; the vote counts ``n_1..n_C`` are released as ``argmax_i (n_i + N(0, σ²))``.

Neighbouring relation: one private record of one teacher changes (that teacher's vote may
move from one class to another), so the count vector changes by -1 in one class and +1 in
another: **L2 sensitivity √2**. That holds only when every record trains exactly one teacher
(disjoint teacher data); see docs/baselines.md for FREDY, where it does not.

* **Data-independent bound** (Prop. 8): RDP(λ) = λ / σ² per answered query — a Gaussian
  mechanism with noise multiplier σ/√2. This is the guarantee.
* **Data-dependent bound** (Prop. 7, Thm. 6, Prop. 10): tighter when the teachers agree, but
  a function of the private votes; it is *not itself differentially private* unless released
  through smooth sensitivity (not implemented), so results report it as such.
* **Confident GNMax** (Alg. 1): a query is answered only if ``max_i n_i + N(0, σ₁²) ≥ T``;
  the threshold check is a Gaussian mechanism on the maximum count (L2 sensitivity 1), RDP
  λ / (2σ₁²) per query, charged for every query.

Composition over queries adds RDP per order; :func:`epsilon_from_rdp` converts with
dp-accounting's ``compute_epsilon``. Only the per-query formulas are ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special, stats

from fedlabels.consensus import ABSTAIN
from fedlabels.errors import FedLabelsError
from fedlabels.privacy.search import bisect_monotone
from fedlabels.privacy.validation import check_delta

#: RDP orders used for PATE accounting (dense where the optimum usually lies)
DEFAULT_ORDERS = np.concatenate([np.linspace(1.01, 1.99, 50), np.arange(2.0, 100.0, 0.5),
                                 np.arange(100.0, 1001.0, 10.0)])

#: the neighbouring relation assumed by the GNMax / LNMax sensitivities
DISJOINT_TEACHERS = ("record-level: one private record of one teacher changes; each record "
                     "trains exactly one teacher (disjoint teacher data), so one vote moves")


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
    q = counts.shape[0]
    answered = np.ones(q, dtype=bool)
    t_noise = None
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

def _orders(orders: Any) -> np.ndarray:
    out = np.atleast_1d(np.asarray(DEFAULT_ORDERS if orders is None else orders, dtype=float))
    if np.any(out <= 1):
        raise FedLabelsError("RDP orders must all be > 1.")
    return out


def gnmax_rdp_data_independent(sigma: float, orders: Any = None) -> np.ndarray:
    """RDP(λ) = λ/σ² of one GNMax query (Prop. 8; L2 sensitivity √2)."""
    sigma = check_sigma(sigma)
    if sigma == 0:
        return np.full(_orders(orders).shape, np.inf)
    return _orders(orders) / sigma**2


def threshold_rdp(threshold_sigma: float, orders: Any = None) -> np.ndarray:
    """RDP(λ) = λ/(2σ₁²) of confident GNMax's threshold check (max count: sensitivity 1)."""
    s1 = check_sigma(threshold_sigma, "threshold sigma")
    if s1 == 0:
        return np.full(_orders(orders).shape, np.inf)
    return _orders(orders) / (2.0 * s1**2)


def epsilon_from_rdp(rdp: np.ndarray, delta: float, orders: Any = None) -> tuple[float, float]:
    """(ε, optimal order) from composed RDP, via dp-accounting's ``compute_epsilon``."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    check_delta(delta)
    orders = _orders(orders)
    rdp = np.asarray(rdp, dtype=float)
    if not np.isfinite(rdp).any():
        return math.inf, math.nan
    eps, order = rdpa.compute_epsilon(orders, rdp, delta)
    return float(eps), float(order)


# ------------------------------------------------------------------ RDP, data-dependent

def gnmax_log_q(counts: np.ndarray, sigma: float) -> np.ndarray:
    """log q̃ per query: a bound on Pr[GNMax ≠ argmax counts] (Prop. 7, union bound).

    q̃ = Σ_{i≠i*} ½ erfc((n_{i*} - n_i) / (2σ)), capped at 1 - 1/C; computed in log space.
    """
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
    orders = _orders(orders)
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


def gnmax_rdp_data_dependent_total(counts: np.ndarray, sigma: float,
                                   orders: Any = None) -> np.ndarray:
    """Σ over queries of :func:`gnmax_rdp_data_dependent` (answered queries only)."""
    orders = _orders(orders)
    total = np.zeros_like(orders)
    if len(counts) == 0:
        return total
    log_q = gnmax_log_q(counts, sigma)
    # queries with the same log q̃ share one evaluation (votes are integer counts)
    uniq, mult = np.unique(np.round(log_q, 12), return_counts=True)
    for lq, k in zip(uniq, mult, strict=True):
        total += k * gnmax_rdp_data_dependent(float(lq), sigma, orders)
    return total


# ------------------------------------------------------------------ a whole run

@dataclass(frozen=True)
class GNMaxAccount:
    """(ε, δ) of Q (confident) GNMax queries, data-independent and data-dependent."""

    epsilon: float                      # data-independent RDP bound: the guarantee
    delta: float
    order: float
    epsilon_pld: float | None           # exact (PLD-tight) ε of the same Gaussian mechanisms
    epsilon_data_dependent: float | None
    order_data_dependent: float | None
    n_queries: int
    n_answered: int
    sigma: float
    threshold: float | None = None
    threshold_sigma: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon, "delta": self.delta,
            "accountant": "rdp (GNMax data-independent bound, Papernot et al. 2018 Prop. 8; "
                          "dp-accounting compute_epsilon)",
            "rdp_order": self.order,
            "epsilon_by_accountant": {"rdp_data_independent": self.epsilon,
                                      "exact_gaussian_data_independent": self.epsilon_pld},
            "epsilon_data_dependent": self.epsilon_data_dependent,
            "epsilon_data_dependent_note": (
                "data-dependent RDP bound (Thm. 6 / Prop. 10): computed from the private vote "
                "counts, so it is NOT itself differentially private (no smooth-sensitivity "
                "release); the guarantee is 'epsilon'"),
            "mechanism": "confident GNMax" if self.threshold is not None else "GNMax",
            "noise_sigma": self.sigma, "threshold": self.threshold,
            "threshold_sigma": self.threshold_sigma,
            "queries": self.n_queries, "answered": self.n_answered,
            "sensitivity": "L2 sqrt(2) on the vote counts (one vote moves); threshold check "
                           "L2 1 on the maximum count",
            **self.details,
        }


def gaussian_exact_epsilon(mu: float, delta: float) -> float:
    """Exact ε(δ) of a Gaussian mechanism with sensitivity/σ ratio ``mu`` (Balle & Wang 2018).

    δ(ε) = Φ(μ/2 - ε/μ) - e^ε Φ(-μ/2 - ε/μ), inverted by bisection in log space. Q composed
    Gaussian mechanisms with ratios μ_i are exactly one with μ = sqrt(Σ μ_i²), so this is the
    tight (PLD) accounting of the data-independent GNMax analysis, without a PLD grid.
    """
    check_delta(delta)
    if mu <= 0:
        return 0.0

    def log_delta(eps: float) -> float:
        a = special.log_ndtr(mu / 2.0 - eps / mu)
        b = eps + special.log_ndtr(-mu / 2.0 - eps / mu)
        return a + float(np.log(-np.expm1(b - a))) if b < a else -np.inf

    target = math.log(delta)
    if log_delta(0.0) <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while log_delta(hi) > target:
        lo, hi = hi, 2.0 * hi
    _, hi = bisect_monotone(lambda e: log_delta(e) > target, lo, hi, rel_tol=1e-10,
                            max_iter=200)
    return hi


def gnmax_pld_epsilon(sigma: float, n_queries: int, delta: float,
                      threshold_sigma: float | None = None) -> float:
    """Tight data-independent ε of Q GNMax queries (and threshold checks), exact Gaussian.

    Each query is a Gaussian mechanism with ratio √2/σ (and √1/σ₁ for the check).
    """
    mu2 = n_queries * 2.0 / sigma**2
    if threshold_sigma is not None:
        mu2 += n_queries / threshold_sigma**2
    return gaussian_exact_epsilon(math.sqrt(mu2), delta)


def account_gnmax(counts: np.ndarray, answered: np.ndarray, sigma: float, delta: float,
                  threshold: float | None = None, threshold_sigma: float | None = None,
                  orders: Any = None, with_pld: bool = True) -> GNMaxAccount:
    """Account for one (confident) GNMax run over ``len(counts)`` queries.

    Data-independent: every query pays λ/σ² (answered or not — the set of answered queries
    is itself private) plus, with a threshold, λ/(2σ₁²). Data-dependent: the threshold check
    on every query plus Thm. 6 on the answered ones (Papernot et al. 2018, §4.3).
    """
    check_delta(delta)
    orders = _orders(orders)
    n_q = len(counts)
    sigma = check_sigma(sigma)
    if sigma == 0:
        raise FedLabelsError("GNMax accounting needs noise sigma > 0 (sigma = 0 is plain "
                             "PATE, which is not differentially private).")
    per_query = gnmax_rdp_data_independent(sigma, orders)
    rdp_thr = np.zeros_like(orders)
    if threshold is not None:
        if threshold_sigma is None or threshold_sigma <= 0:
            raise FedLabelsError(f"confident GNMax needs threshold_sigma > 0, got "
                                 f"{threshold_sigma!r}.")
        rdp_thr = n_q * threshold_rdp(threshold_sigma, orders)
    eps, order = epsilon_from_rdp(n_q * per_query + rdp_thr, delta, orders)
    answered = np.asarray(answered, dtype=bool)
    dd = gnmax_rdp_data_dependent_total(np.asarray(counts)[answered], sigma, orders) + rdp_thr
    eps_dd, order_dd = epsilon_from_rdp(dd, delta, orders)
    eps_pld = None
    if with_pld and n_q > 0:
        eps_pld = gnmax_pld_epsilon(sigma, n_q, delta,
                                    threshold_sigma if threshold is not None else None)
    return GNMaxAccount(eps, delta, order, eps_pld, min(eps_dd, eps), order_dd, n_q,
                        int(answered.sum()), sigma, threshold,
                        threshold_sigma if threshold is not None else None)


def calibrate_gnmax_sigma(target_epsilon: float, n_queries: int, delta: float,
                          orders: Any = None) -> float:
    """The smallest σ whose Q-query data-independent GNMax bound is at most ``target_epsilon``."""
    check_delta(delta)
    orders = _orders(orders)

    def eps(sigma: float) -> float:
        return epsilon_from_rdp(n_queries * orders / sigma**2, delta, orders)[0]

    lo, hi = 1e-3, 1.0
    while eps(hi) > target_epsilon:
        hi *= 2.0
        if hi > 1e9:
            raise FedLabelsError(f"cannot reach epsilon {target_epsilon} with GNMax.")
    _, hi = bisect_monotone(lambda s: eps(s) > target_epsilon, lo, hi, rel_tol=1e-9,
                            max_iter=100)
    return hi
