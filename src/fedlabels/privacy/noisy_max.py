"""Laplace noisy-max (LNMax) vote aggregation with ε per query, and its accounting.

Per query the vote counts get independent Laplace(b) noise and the argmax is released
(PATE 2017's LNMax; FREDY's ``NoisyAgg``). **Sensitivity:** when one private record of one
teacher changes, that teacher's vote can move from one class to another: the count vector
changes by -1 and +1, **L1 sensitivity Δ₁ = 2**. Releasing the noisy counts is then
(Δ₁/b)-DP and the argmax is post-processing, so ``b = 2/ε`` gives **ε-DP per query**.

If a record can influence *every* teacher (FREDY: all teachers start each round from the
FedAvg model trained on all clients), all ``n`` votes can move at once: Δ₁ = 2n, and the same
noise gives only (n·ε)-DP per query (docs/privacy.md §2.6). :func:`account_laplace` takes the
L1 sensitivity explicitly.

Accountants: ``basic`` (pure sequential composition, Q·ε, δ = 0), ``rdp`` and ``pld`` from
dp-accounting with ``LaplaceDpEvent(noise_multiplier = b / Δ₁)`` under ADD_OR_REMOVE_ONE
(docs/privacy.md §2.5 and §2.8); the reported ε is the smallest (all are valid bounds).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.errors import FedLabelsError
from fedlabels.privacy.validation import check_delta, check_epsilon

#: L1 sensitivity of a vote-count vector when one teacher's vote moves
VOTE_L1_SENSITIVITY = 2.0

LAPLACE_ACCOUNTANTS = ("basic", "rdp", "pld")

#: above this per-query ε the PLD grid (1e-4 discretisation) gets large and slow (about 15 s
#: for 2,000 queries at ε = 1 on a shared CPU) while basic/RDP are as tight; PLD is skipped
PLD_MAX_EPSILON_PER_QUERY = 0.5


def laplace_scale(epsilon_per_query: float, l1_sensitivity: float = VOTE_L1_SENSITIVITY
                  ) -> float:
    """Laplace scale b = Δ₁ / ε that makes one noisy-max query ε-DP."""
    check_epsilon(epsilon_per_query, "epsilon per query")
    return float(l1_sensitivity) / float(epsilon_per_query)


@dataclass(frozen=True)
class NoisyMaxRelease:
    """Released labels and the noise that was drawn (kept for diagnostics and tests)."""

    labels: np.ndarray  # (Q,) int64
    noise: np.ndarray   # (Q, C)
    scale: float


def laplace_noisy_max(counts: np.ndarray, epsilon_per_query: float,
                      rng: np.random.Generator,
                      l1_sensitivity: float = VOTE_L1_SENSITIVITY) -> NoisyMaxRelease:
    """``argmax(counts + Laplace(b))`` per query with ``b = Δ₁/ε`` (vectorised).

    Parameters
    ----------
    counts : ndarray of shape (Q, C)
        Vote counts per query.
    epsilon_per_query : float
        Per-query ε for the given L1 sensitivity.
    rng : numpy Generator
        Source of the noise (seeded by the caller).
    l1_sensitivity : float, default=2
        Δ₁ used to calibrate the scale (2: one vote moves).
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2:
        raise FedLabelsError(f"vote counts must have shape (queries, classes), got "
                             f"{counts.shape}.")
    b = laplace_scale(epsilon_per_query, l1_sensitivity)
    noise = rng.laplace(0.0, b, size=counts.shape)
    return NoisyMaxRelease(np.argmax(counts + noise, axis=1).astype(np.int64), noise, b)


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
    import dp_accounting as dpa

    acc = _laplace_accountant(accountant)
    acc.compose(dpa.LaplaceDpEvent(noise_multiplier=scale / l1_sensitivity), n_queries)
    return float(acc.get_epsilon(delta))


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


def account_laplace(scale: float, n_queries: int, delta: float,
                    l1_sensitivity: float = VOTE_L1_SENSITIVITY,
                    accountants: tuple[str, ...] = LAPLACE_ACCOUNTANTS) -> LaplaceAccount:
    """Account for ``n_queries`` Laplace noisy-max releases with every accountant.

    ``basic`` is pure ε-DP (reported with δ = 0); ``rdp`` and ``pld`` give (ε, δ).
    """
    check_delta(delta)
    if not (isinstance(scale, int | float) and scale > 0 and math.isfinite(scale)):
        raise FedLabelsError(f"Laplace scale must be a finite number > 0, got {scale!r}.")
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
    best = min(results, key=results.get)
    return LaplaceAccount(results[best], 0.0 if best == "basic" else delta, best, results,
                          per_query, scale, l1_sensitivity, n_queries, details)
