"""Accountants for noisy vote aggregation: GNMax (PATE) and Laplace noisy-max (LNMax, FREDY).

Like :mod:`fedlabels.privacy.accounting` (kept apart only for size): protocols record
:class:`~fedlabels.privacy.events.GNMaxEvent` and
:class:`~fedlabels.privacy.events.LaplaceNoisyMaxEvent` and these functions turn the lists
into (ε, δ). The per-query formulas live with the
mechanisms (:mod:`fedlabels.privacy.gnmax`, :mod:`fedlabels.privacy.noisy_max`).

GNMax (Papernot et al. 2018)
    ``exact_gaussian`` data-independent — the guarantee, and what σ is calibrated to: Q
    queries are Q Gaussian mechanisms of L2 sensitivity √2 (and, confident, Q threshold
    checks of sensitivity 1 with σ₁), post-processed by argmax; they compose exactly to one
    Gaussian mechanism with μ = √(2Q/σ² + Q/σ₁²), whose (ε, δ) is the analytic Gaussian's
    (Balle & Wang 2018). ``rdp``: Σ_queries λ/σ² (+ λ/(2σ₁²) per check), converted with
    dp-accounting's ``compute_epsilon``, reported beside it (looser). The data-dependent
    bound (Thm. 6 / Prop. 10) is RDP, reported separately and *not* itself DP.
Laplace noisy-max
    ``basic`` (pure sequential composition, Q·Δ₁/b, δ = 0), ``optimal`` (the optimal
    composition of Q pure (Δ₁/b)-DP mechanisms, Kairouz, Oh & Viswanath 2015: exact for
    randomized response, an upper bound for Laplace), ``rdp`` and ``pld`` from
    dp-accounting with ``LaplaceDpEvent(noise_multiplier = b / Δ₁)`` under ADD_OR_REMOVE_ONE
    (docs/privacy.md §2.5 and §2.8); the reported ε is the smallest (all are valid bounds).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.events import GNMaxEvent, LaplaceNoisyMaxEvent
from fedlabels.privacy.gnmax import (
    check_orders,
    check_sigma,
    gnmax_rdp_data_dependent_sum,
    gnmax_rdp_data_independent,
    threshold_rdp,
)
from fedlabels.privacy.noisy_max import VOTE_L1_SENSITIVITY
from fedlabels.privacy.search import bisect_monotone
from fedlabels.privacy.validation import check_delta

LAPLACE_ACCOUNTANTS = ("basic", "optimal", "rdp", "pld")

#: above this per-query ε the PLD grid (1e-4 discretisation) gets large and slow (about 15 s
#: for 2,000 queries at ε = 1 on a shared CPU) while basic/RDP are as tight; PLD is skipped
PLD_MAX_EPSILON_PER_QUERY = 0.5


# ------------------------------------------------------------------ conversions

def epsilon_from_rdp(rdp: np.ndarray, delta: float, orders: Any = None) -> tuple[float, float]:
    """(ε, optimal order) from composed RDP, via dp-accounting's ``compute_epsilon``."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    check_delta(delta)
    orders = check_orders(orders)
    rdp = np.asarray(rdp, dtype=float)
    if not np.isfinite(rdp).any():
        return math.inf, math.nan
    eps, order = rdpa.compute_epsilon(orders, rdp, delta)
    return float(eps), float(order)


def _gaussian_log_delta(mu: float, eps: float) -> float:
    """log δ(ε) of a Gaussian mechanism of ratio μ: log(Φ(μ/2 - ε/μ) - e^ε Φ(-μ/2 - ε/μ))."""
    from scipy import special  # lazily: importing fedlabels must not load scipy

    a = float(special.log_ndtr(mu / 2.0 - eps / mu))
    b = eps + float(special.log_ndtr(-mu / 2.0 - eps / mu))
    return a + math.log(-math.expm1(b - a)) if b < a else -math.inf


@functools.lru_cache(maxsize=1024)  # pure; a ledger asks at every check
def gaussian_exact_epsilon(mu: float, delta: float) -> float:
    """Exact ε(δ) of a Gaussian mechanism with sensitivity/σ ratio ``mu`` (Balle & Wang 2018).

    δ(ε) = Φ(μ/2 - ε/μ) - e^ε Φ(-μ/2 - ε/μ), inverted by bisection in log space (the upper
    end: never below the exact ε). Q composed Gaussian mechanisms with ratios μ_i are
    exactly one with μ = sqrt(Σ μ_i²), so this is the tight (PLD) accounting of the
    data-independent GNMax analysis, without a PLD grid.
    """
    check_delta(delta)
    if mu <= 0:
        return 0.0
    target = math.log(delta)
    if _gaussian_log_delta(mu, 0.0) <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while _gaussian_log_delta(mu, hi) > target:
        lo, hi = hi, 2.0 * hi
    _, hi = bisect_monotone(lambda e: _gaussian_log_delta(mu, e) > target, lo, hi,
                            rel_tol=1e-10, max_iter=200)
    return hi


# ------------------------------------------------------------------ GNMax

#: the accountant of the GNMax guarantee (:func:`gnmax_exact_epsilon`)
GNMAX_ACCOUNTANT = "exact_gaussian"
#: what :data:`GNMAX_ACCOUNTANT` is, as a result states it
GNMAX_ACCOUNTANT_NOTE = (
    "exact_gaussian: the data-independent GNMax analysis (Papernot et al. 2018) is Q Gaussian "
    "mechanisms of L2 sensitivity √2 on the vote counts (and, confident, Q threshold checks "
    "of sensitivity 1 with σ₁), post-processed by argmax; they compose exactly to one "
    "Gaussian mechanism with μ = √(2Q/σ² + Q/σ₁²), whose (ε, δ) is the analytic Gaussian's "
    "(Balle & Wang 2018). The RDP bound of the same analysis is reported beside it (looser)")
#: the accountants a GNMax σ may be calibrated with (:func:`calibrate_gnmax_sigma`)
GNMAX_CALIBRATION_ACCOUNTANTS = (GNMAX_ACCOUNTANT, "rdp")


@dataclass(frozen=True)
class GNMaxAccount:
    """(ε, δ) of Q (confident) GNMax queries, data-independent and data-dependent."""

    epsilon: float                      # data-independent, exact Gaussian: the guarantee
    delta: float
    order: float                        # the optimal RDP order of ``epsilon_rdp``
    epsilon_rdp: float                  # data-independent RDP bound of the same queries
    epsilon_data_dependent: float | None  # NOT itself DP (a function of the private votes)
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
            "accountant": GNMAX_ACCOUNTANT, "accountant_note": GNMAX_ACCOUNTANT_NOTE,
            "rdp_order": self.order,
            "epsilon_by_accountant": {"exact_gaussian_data_independent": self.epsilon,
                                      "rdp_data_independent": self.epsilon_rdp},
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


def gnmax_setting(events: Sequence[GNMaxEvent]) -> tuple[float, float | None, float | None]:
    """The one (σ, threshold, σ₁) of ``events``, checked (GNMax accounting composes one
    setting); an error names what is wrong."""
    if not events:
        raise FedLabelsError("GNMax accounting needs at least one GNMaxEvent.")
    settings = {(ev.sigma, ev.threshold, ev.threshold_sigma) for ev in events}
    if len(settings) != 1:
        raise FedLabelsError("GNMax accounting expects one (σ, threshold, σ₁) for all events.")
    ((sigma, threshold, threshold_sigma),) = settings
    sigma = check_sigma(sigma)
    if sigma == 0:
        raise FedLabelsError("GNMax accounting needs noise sigma > 0 (sigma = 0 is plain "
                             "PATE, which is not differentially private).")
    if threshold is not None and (threshold_sigma is None or threshold_sigma <= 0):
        raise FedLabelsError(f"confident GNMax needs threshold_sigma > 0, got "
                             f"{threshold_sigma!r}.")
    return sigma, threshold, threshold_sigma if threshold is not None else None


def gnmax_mu(sigma: float, n_queries: int, threshold_sigma: float | None = None) -> float:
    """μ = √(Σ μ_i²) of Q GNMax queries: ratio √2/σ each (and 1/σ₁ per threshold check)."""
    mu2 = n_queries * 2.0 / sigma**2
    if threshold_sigma is not None:
        mu2 += n_queries / threshold_sigma**2
    return math.sqrt(mu2)


def gnmax_exact_epsilon(sigma: float, n_queries: int, delta: float,
                        threshold_sigma: float | None = None) -> float:
    """Tight data-independent ε of Q GNMax queries (and threshold checks), exact Gaussian:
    the GNMax guarantee."""
    return gaussian_exact_epsilon(gnmax_mu(sigma, n_queries, threshold_sigma), delta)


def account_gnmax(events: Sequence[GNMaxEvent], delta: float,
                  orders: Any = None) -> GNMaxAccount:
    """(ε, δ) of a run of (confident) GNMax batches, one :class:`GNMaxEvent` each.

    Data-independent (the guarantee): every asked query is a Gaussian mechanism, answered or
    not (the set of answered queries is itself private), plus, with a threshold, its check;
    ε by the exact composition (:func:`gnmax_exact_epsilon`), and the RDP bound λ/σ² (+
    λ/(2σ₁²)) a query beside it. Data-dependent (reported, not DP): the threshold checks
    plus Thm. 6 on the answered queries' log q̃ (Papernot et al. 2018, §4.3); ``None`` when
    an event carries no log q̃.
    """
    check_delta(delta)
    orders = check_orders(orders)
    sigma, threshold, threshold_sigma = gnmax_setting(events)
    n_q = sum(ev.n_queries for ev in events)
    n_answered = sum(ev.n_answered for ev in events)
    rdp = np.zeros_like(orders)
    rdp_thr = np.zeros_like(orders)
    for ev in events:
        rdp += ev.n_queries * gnmax_rdp_data_independent(sigma, orders)
        if threshold_sigma is not None:  # set exactly when confident (gnmax_setting)
            rdp_thr += ev.n_queries * threshold_rdp(threshold_sigma, orders)
    eps_rdp, order = epsilon_from_rdp(rdp + rdp_thr, delta, orders)
    eps = min(gnmax_exact_epsilon(sigma, n_q, delta, threshold_sigma), eps_rdp)
    eps_dd = order_dd = None
    known = [ev.data_dependent_log_q for ev in events if ev.data_dependent_log_q is not None]
    if len(known) == len(events):
        log_q = [lq for batch in known for lq in batch]
        dd = gnmax_rdp_data_dependent_sum(log_q, sigma, orders) + rdp_thr
        eps_dd, order_dd = epsilon_from_rdp(dd, delta, orders)
        eps_dd = min(eps_dd, eps)
    return GNMaxAccount(eps, delta, order, eps_rdp, eps_dd, order_dd, n_q, n_answered, sigma,
                        threshold, threshold_sigma)


def gnmax_epsilon(sigma: float, n_queries: int, delta: float, orders: Any = None) -> float:
    """ε at δ of Q plain GNMax queries by the data-independent RDP bound (looser than
    :func:`gnmax_exact_epsilon`, the guarantee)."""
    orders = check_orders(orders)
    return epsilon_from_rdp(n_queries * orders / sigma**2, delta, orders)[0]


def calibrate_gnmax_sigma(target_epsilon: float, n_queries: int, delta: float,
                          orders: Any = None, accountant: str = GNMAX_ACCOUNTANT) -> float:
    """The smallest σ (to 1e-9 relative, rounded up) whose Q plain GNMax queries are
    (``target_epsilon``, δ)-DP by ``accountant``: ``exact_gaussian`` (the guarantee's, the
    default) or ``rdp`` (the looser RDP bound, on ``orders``; more noise)."""
    check_delta(delta)
    if accountant not in GNMAX_CALIBRATION_ACCOUNTANTS:
        raise FedLabelsError(f"unknown GNMax calibration accountant {accountant!r}; use one "
                             f"of {', '.join(GNMAX_CALIBRATION_ACCOUNTANTS)}.")
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise FedLabelsError(f"target epsilon must be a finite number > 0, got "
                             f"{target_epsilon!r}.")
    orders_key = tuple(check_orders(orders).tolist()) if accountant == "rdp" else ()
    return _calibrated_gnmax_sigma(float(target_epsilon), int(n_queries), float(delta),
                                   accountant, orders_key)


@functools.lru_cache(maxsize=256)  # pure, and every party asks alike
def _calibrated_gnmax_sigma(target_epsilon: float, n_queries: int, delta: float,
                            accountant: str, orders_key: tuple[float, ...]) -> float:
    if accountant == "rdp":
        orders = np.asarray(orders_key, dtype=float)

        def too_little(sigma: float) -> bool:
            return gnmax_epsilon(sigma, n_queries, delta, orders) > target_epsilon
    else:
        log_delta = math.log(delta)

        def too_little(sigma: float) -> bool:  # ε(μ) > target ⟺ δ(target; μ) > δ
            mu = gnmax_mu(sigma, n_queries)
            return _gaussian_log_delta(mu, target_epsilon) > log_delta

    lo, hi = 1e-3, 1.0
    while too_little(hi):
        hi *= 2.0
        if hi > 1e9:
            raise FedLabelsError(f"cannot reach epsilon {target_epsilon} with GNMax.")
    _, hi = bisect_monotone(too_little, lo, hi, rel_tol=1e-9, max_iter=100)
    return hi


# ------------------------------------------------------------------ Laplace noisy-max

def _laplace_accountant(name: str) -> Any:
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    rel = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE  # PLD forbids REPLACE_ONE for Laplace
    if name == "rdp":
        logging.getLogger("absl").setLevel(logging.ERROR)
        return rdp_privacy_accountant.RdpAccountant(neighboring_relation=rel)
    if name == "pld":
        return pld_privacy_accountant.PLDAccountant(neighboring_relation=rel)
    raise FedLabelsError(f"unknown accountant {name!r}; use one of "
                         f"{', '.join(LAPLACE_ACCOUNTANTS)}.")


# pure in its arguments; a PLD over many queries takes about a second, and a ledger asks at
# every check
@functools.lru_cache(maxsize=1024)
def laplace_epsilon(scale: float, n_queries: int, delta: float, accountant: str,
                    l1_sensitivity: float = VOTE_L1_SENSITIVITY) -> float:
    """ε of ``n_queries`` Laplace noisy-max releases of scale ``b`` and L1 sensitivity Δ₁."""
    if n_queries < 0:
        raise FedLabelsError(f"number of queries must be >= 0, got {n_queries}.")
    if n_queries == 0:
        return 0.0
    per_query = l1_sensitivity / scale
    if accountant == "basic":
        return n_queries * per_query
    if accountant == "optimal":
        return pure_composition_epsilon(per_query, n_queries, delta)
    import dp_accounting as dpa

    acc = _laplace_accountant(accountant)
    acc.compose(dpa.LaplaceDpEvent(noise_multiplier=scale / l1_sensitivity), n_queries)
    return float(acc.get_epsilon(delta))


def pure_composition_epsilon(epsilon_per_query: float, n_queries: int, delta: float) -> float:
    """ε at δ of ``n_queries`` adaptively composed pure ε₀-DP mechanisms by the optimal
    composition theorem (Kairouz, Oh & Viswanath 2015, Thm. 3.3): tight over all ε₀-DP
    mechanisms and attained by binary randomized response of flip probability 1/(1 + e^ε₀),
    so it is Q-fold randomized response's exact ε
    (:func:`~fedlabels.privacy.accounting.rr_epsilon_exact`); never above Q·ε₀."""
    from fedlabels.privacy.accounting import rr_epsilon_exact

    flip = 1.0 / (1.0 + math.exp(min(epsilon_per_query, 700.0)))
    if not flip > 0.0 or not (0.0 < epsilon_per_query < 700.0):
        return n_queries * epsilon_per_query  # beyond float64: basic composition
    return min(rr_epsilon_exact(n_queries, flip, delta), n_queries * epsilon_per_query)


#: the accountants a Laplace scale is calibrated with (PLD is tighter, about 0.05-0.1 s a
#: call at the sizes calibrated here, so a bisection would take seconds at every party)
LAPLACE_CALIBRATION_ACCOUNTANTS = ("basic", "optimal", "rdp")


def laplace_total_epsilon(scale: float, n_queries: int, delta: float,
                          l1_sensitivity: float = VOTE_L1_SENSITIVITY,
                          accountants: tuple[str, ...] = LAPLACE_CALIBRATION_ACCOUNTANTS
                          ) -> float:
    """The smallest ε over ``accountants`` of Q noisy-max queries of scale b (a valid bound)."""
    return min(laplace_epsilon(scale, n_queries, delta, name, l1_sensitivity)
               for name in accountants)


def calibrate_laplace_scale(target_epsilon: float, n_queries: int, delta: float,
                            l1_sensitivity: float = VOTE_L1_SENSITIVITY) -> float:
    """The smallest Laplace scale b whose Q-query composition (basic, optimal or RDP,
    whichever is tightest) is at most ``target_epsilon`` at δ; bisection on b (ε falls as b
    grows)."""
    check_delta(delta)
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise FedLabelsError(f"target epsilon must be a finite number > 0, got "
                             f"{target_epsilon!r}.")
    if n_queries < 1:
        raise FedLabelsError(f"number of queries must be >= 1, got {n_queries}.")

    def eps(scale: float) -> float:
        return laplace_total_epsilon(scale, n_queries, delta, l1_sensitivity)

    hi = n_queries * l1_sensitivity / target_epsilon  # basic composition: exactly the target
    lo = hi
    while eps(lo) <= target_epsilon and lo > 1e-12 * hi:
        lo *= 0.5
    _, hi = bisect_monotone(lambda b: eps(b) > target_epsilon, lo, hi, rel_tol=1e-9,
                            max_iter=100)
    return hi


@dataclass(frozen=True)
class LaplaceAccount:
    """(ε, δ) of Q noisy-max queries: the tightest accountant and all of them."""

    epsilon: float
    delta: float
    accountant: str
    by_accountant: dict[str, float]
    epsilon_per_query: float
    scale: float
    l1_sensitivity: float
    n_queries: int
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "accountant": self.accountant,
                "epsilon_by_accountant": dict(self.by_accountant),
                "epsilon_per_query": self.epsilon_per_query, "laplace_scale": self.scale,
                "l1_sensitivity": self.l1_sensitivity, "queries": self.n_queries,
                **self.details}


def account_laplace(events: Sequence[LaplaceNoisyMaxEvent], delta: float,
                    accountants: tuple[str, ...] = LAPLACE_ACCOUNTANTS) -> LaplaceAccount:
    """(ε, δ) of a run of Laplace noisy-max batches, one :class:`LaplaceNoisyMaxEvent` each.

    All events must share one (scale b, L1 sensitivity Δ₁); their queries compose. ``basic``
    is pure ε-DP (reported with δ = 0); ``rdp`` and ``pld`` give (ε, δ).
    """
    check_delta(delta)
    if not events:
        raise FedLabelsError("Laplace noisy-max accounting needs at least one event.")
    settings = {(ev.scale, ev.l1_sensitivity) for ev in events}
    if len(settings) != 1:
        raise FedLabelsError("Laplace noisy-max accounting expects one (scale, L1 sensitivity) "
                             "for all events.")
    ((scale, l1_sensitivity),) = settings
    if not (isinstance(scale, int | float) and scale > 0 and math.isfinite(scale)):
        raise FedLabelsError(f"Laplace scale must be a finite number > 0, got {scale!r}.")
    n_queries = sum(ev.n_queries for ev in events)
    per_query = l1_sensitivity / scale
    results: dict[str, float] = {}
    details: dict[str, Any] = {}
    for name in accountants:
        if name == "pld" and per_query > PLD_MAX_EPSILON_PER_QUERY:
            details["pld_skipped"] = (f"per-query epsilon {per_query:.3g} > "
                                      f"{PLD_MAX_EPSILON_PER_QUERY}: the PLD grid would be slow; "
                                      "RDP is within a few percent of PLD there")
            continue
        results[name] = laplace_epsilon(scale, n_queries, delta, name, l1_sensitivity)
    best = min(results, key=results.__getitem__)
    return LaplaceAccount(results[best], 0.0 if best == "basic" else delta, best, results,
                          per_query, scale, l1_sensitivity, n_queries, details)
