"""Laplace noisy-max (LNMax) vote aggregation with ε per query (the mechanism only).

Per query the vote counts get independent Laplace(b) noise and the argmax is released
(PATE 2017's LNMax; FREDY's ``NoisyAgg``). **Sensitivity:** when one private record of one
teacher changes, that teacher's vote can move from one class to another: the count vector
changes by -1 and +1, **L1 sensitivity Δ₁ = 2**. Releasing the noisy counts is then
(Δ₁/b)-DP and the argmax is post-processing, so ``b = 2/ε`` gives **ε-DP per query**.

If a record can influence *every* teacher (FREDY: all teachers start each round from the
FedAvg model trained on all clients), all ``n`` votes can move at once: Δ₁ = 2n, and the same
noise gives only (n·ε)-DP per query (docs/privacy.md §2.6). The recorded
:class:`~fedlabels.privacy.events.LaplaceNoisyMaxEvent` therefore takes the L1 sensitivity
explicitly; :func:`fedlabels.privacy.vote_accounting.account_laplace` composes the events
(basic, RDP and PLD accountants).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.validation import check_epsilon

#: L1 sensitivity of a vote-count vector when one teacher's vote moves
VOTE_L1_SENSITIVITY = 2.0


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
