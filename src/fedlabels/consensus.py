"""Consensus functions: turn the m clients' hard labels on U into one labelling.

Both take a vote matrix ``votes`` of shape (m, |U|) with integer labels in [0, C). Ties go
to the smallest class index, deterministically (as in the papers' code).
"""

from __future__ import annotations

import numpy as np

ABSTAIN = -1


def vote_counts(votes: np.ndarray, n_classes: int) -> np.ndarray:
    """Per-example class vote counts, shape (|U|, C)."""
    votes = np.asarray(votes)
    if votes.ndim != 2:
        raise ValueError(f"votes must have shape (m, n), got {votes.shape}")
    n = votes.shape[1]
    flat = (np.arange(n)[None, :] * n_classes + votes).ravel()
    return np.bincount(flat, minlength=n * n_classes).reshape(n, n_classes)


def majority_vote(votes: np.ndarray, n_classes: int) -> np.ndarray:
    """Plurality label per example; ties go to the smallest class index."""
    return vote_counts(votes, n_classes).argmax(axis=1)


def qualified_majority(votes: np.ndarray, n_classes: int, quorum: float) -> np.ndarray:
    """Label per example if the top class holds at least ``quorum`` of the votes.

    Examples below the quorum get :data:`ABSTAIN` (-1) and are left out of the pseudo-labelled
    set P for that round.
    """
    if not 0.0 < quorum <= 1.0:
        raise ValueError(f"quorum must lie in (0, 1], got {quorum}")
    counts = vote_counts(votes, n_classes)
    top = counts.argmax(axis=1)
    share = counts[np.arange(counts.shape[0]), top] / votes.shape[0]
    # a tiny tolerance so that e.g. 9/10 >= 0.9 holds despite floating point
    return np.where(share >= quorum - 1e-12, top, ABSTAIN)
