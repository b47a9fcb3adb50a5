"""Consensus functions: turn the m clients' hard labels on U into one labelling.

Both take a vote matrix ``votes`` of shape (m, |U|) with integer labels in [0, C). Ties go
to the smallest class index, deterministically (as in the papers' code), unless
``ties="abstain"``: then a tied example gets :data:`ABSTAIN` (the majority and the qualified
majority only).
"""

from __future__ import annotations

import numpy as np

ABSTAIN = -1
TIE_RULES = ("smallest", "abstain")
_CHANCE_BLOCK = 1 << 22  # floats of peer_kappa's chance products held at once (32 MB)


def vote_counts(votes: np.ndarray, n_classes: int,
                weights: np.ndarray | None = None) -> np.ndarray:
    """Per-example class vote counts, shape (|U|, C); with ``weights`` (one per client, shape
    (m,)) each vote counts its client's weight (float sums)."""
    votes = np.asarray(votes)
    if votes.ndim != 2:
        raise ValueError(f"votes must have shape (m, n), got {votes.shape}")
    n = votes.shape[1]
    flat = (np.arange(n)[None, :] * n_classes + votes).ravel()
    per_vote = None if weights is None else np.repeat(np.asarray(weights, np.float64), n)
    return np.bincount(flat, weights=per_vote, minlength=n * n_classes).reshape(n, n_classes)


def plurality(counts: np.ndarray, ties: str = "smallest") -> np.ndarray:
    """The top class per row of ``counts`` (|U|, C): ties go to the smallest class index
    (``ties="smallest"``) or get :data:`ABSTAIN` (``ties="abstain"``)."""
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {TIE_RULES}, got {ties!r}")
    top = counts.argmax(axis=1)
    if ties == "smallest":
        return top
    tied = (counts == counts.max(axis=1, keepdims=True)).sum(axis=1) > 1
    return np.where(tied, ABSTAIN, top)


def majority_vote(votes: np.ndarray, n_classes: int, ties: str = "smallest") -> np.ndarray:
    """Plurality label per example; ties go to the smallest class index, or abstain
    (``ties="abstain"``)."""
    return plurality(vote_counts(votes, n_classes), ties)


def qualified_majority(votes: np.ndarray, n_classes: int, quorum: float,
                       ties: str = "smallest") -> np.ndarray:
    """Label per example if the top class holds at least ``quorum`` of the votes.

    Examples below the quorum get :data:`ABSTAIN` (-1) and are left out of the pseudo-labelled
    set P for that round; so do ties when ``ties="abstain"`` (a tie at or above the quorum
    needs a quorum of at most 0.5).
    """
    if not 0.0 < quorum <= 1.0:
        raise ValueError(f"quorum must lie in (0, 1], got {quorum}")
    counts = vote_counts(votes, n_classes)
    top = plurality(counts, ties)
    share = counts.max(axis=1) / votes.shape[0]
    # a tiny tolerance so that e.g. 9/10 >= 0.9 holds despite floating point
    return np.where(share >= quorum - 1e-12, top, ABSTAIN)


def weighted_vote(votes: np.ndarray, n_classes: int, weights: np.ndarray,
                  quorum: float | None = None) -> np.ndarray:
    """Plurality of votes weighted per client (ties: smallest class); with ``quorum``,
    :data:`ABSTAIN` where the top class holds less than that share of the total weight."""
    counts = vote_counts(votes, n_classes, weights)
    top = counts.argmax(axis=1)
    if quorum is None:
        return top
    share = counts[np.arange(counts.shape[0]), top] / float(np.sum(weights))
    return np.where(share >= quorum - 1e-12, top, ABSTAIN)


def trimmed_vote(votes: np.ndarray, n_classes: int, n_drop: int,
                 quorum: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The vote without the ``n_drop`` clients that disagree most with the provisional
    plurality (ties: the lower client index is dropped first); returns (labels, the rows
    dropped). With ``quorum`` the remaining votes form a qualified majority."""
    votes = np.asarray(votes)
    provisional = majority_vote(votes, n_classes)
    disagreement = (votes != provisional[None, :]).mean(axis=1)
    dropped = np.sort(np.argsort(-disagreement, kind="stable")[:n_drop])
    kept = np.delete(votes, dropped, axis=0)
    labels = (majority_vote(kept, n_classes) if quorum is None
              else qualified_majority(kept, n_classes, quorum))
    return labels, dropped


def kappa_rows(a: np.ndarray, b: np.ndarray, n_classes: int) -> np.ndarray:
    """Cohen's κ of each row of ``a`` with the same row of ``b`` (both (m, n) labels), shape
    (m,): 1 for full agreement, about 0 for random or constant labels, negative below chance.
    Where chance agreement is 1 (both constant and equal) κ is 0: agreeing on a constant
    shows no skill."""
    a, b = np.asarray(a), np.broadcast_to(np.asarray(b), np.shape(a))
    m, n = a.shape
    if n == 0:
        return np.zeros(m)
    observed = (a == b).mean(axis=1)
    rows = np.arange(m)[:, None] * n_classes
    def marginals(x: np.ndarray) -> np.ndarray:
        return np.bincount((rows + x).ravel(), minlength=m * n_classes).reshape(m, -1) / n
    chance = (marginals(a) * marginals(b)).sum(axis=1)
    safe = np.where(chance < 1.0, 1.0 - chance, 1.0)
    return np.where(chance < 1.0, (observed - chance) / safe, 0.0)


def agreement_kappa(votes: np.ndarray, consensus: np.ndarray, n_classes: int) -> np.ndarray:
    """Cohen's κ of each client's votes with the consensus, over the examples it did not
    abstain on (:func:`kappa_rows`), shape (m,)."""
    keep = np.asarray(consensus) != ABSTAIN
    return kappa_rows(np.asarray(votes)[:, keep], np.asarray(consensus)[keep], n_classes)


def peer_kappa(votes: np.ndarray, n_classes: int) -> np.ndarray:
    """Each client's mean positive part of Cohen's κ with every other client, shape (m,).

    Every pair's κ is :func:`kappa_rows`'s to the bit, without a Python loop over clients:
    the agreements are sums of one-hot matrix products (whole counts, exact in float32
    below 2^24 examples), the chance agreements the marginals' products in blocks of rows.
    """
    votes = np.asarray(votes)
    m, n = votes.shape
    if n == 0:
        return np.zeros(m)
    exact = np.float32 if n < 2 ** 24 else np.float64
    agree = np.zeros((m, m), exact)
    for c in np.unique(votes):
        hot = (votes == c).astype(exact)
        agree += hot @ hot.T
    observed = agree.astype(np.float64) / n
    rows = np.arange(m)[:, None] * n_classes
    share = np.bincount((rows + votes).ravel(), minlength=m * n_classes).reshape(m, -1) / n
    chance = np.empty((m, m))
    step = max(1, _CHANCE_BLOCK // max(m * n_classes, 1))
    for j in range(0, m, step):  # row j: client j's marginals times each client's
        chance[j:j + step] = (share[None, :, :] * share[j:j + step, None, :]).sum(axis=2)
    safe = np.where(chance < 1.0, 1.0 - chance, 1.0)
    pairs = np.maximum(np.where(chance < 1.0, (observed - chance) / safe, 0.0), 0.0)
    return (pairs.sum(axis=0) - np.diag(pairs)) / max(m - 1, 1)


def leave_one_out_kappa(votes: np.ndarray, n_classes: int, weights: np.ndarray) -> np.ndarray:
    """Cohen's κ of each client with the weighted plurality of the *other* clients, shape
    (m,): no client can agree with a vote it dominates itself."""
    votes, weights = np.asarray(votes), np.asarray(weights, np.float64)
    n = votes.shape[1]
    counts, cols = vote_counts(votes, n_classes, weights), np.arange(n)
    # the others' counts are the counts with the client's own vote taken out, so their
    # argmax needs no (m, n, C) copy: the best class besides the client's vote (the first
    # or second of the counts) against the client's reduced count, ties to the smaller index
    first = counts.argmax(axis=1)
    rest = counts.astype(np.float64)  # a copy; float even for an empty U
    rest[cols, first] = -np.inf
    best = np.where(votes == first, rest.argmax(axis=1), first)  # (m, n)
    best_count, own = counts[cols, best], counts[cols, votes] - weights[:, None]
    wins = (own > best_count) | ((own == best_count) & (votes < best))
    return kappa_rows(votes, np.where(wins, votes, best), n_classes)


def balanced_vote(votes: np.ndarray, n_classes: int,
                  quorum: float | None = None) -> np.ndarray:
    """Plurality in which client i's vote for class c weighs ``1 / (C · p_ic)``, p_ic the
    share of the examples that client i labels c (floored at one example): a client that
    labels almost everything c (it saw little else: pathological non-iid) says little with a
    vote for c, a rare vote says more; balanced labellings (p_ic = 1/C) weigh 1. With
    ``quorum``, :data:`ABSTAIN` where the top class holds less than that share of the
    example's total vote weight. Ties: the smallest class index."""
    votes = np.asarray(votes)
    m, n = votes.shape
    rows = np.arange(m)[:, None] * n_classes
    share = np.bincount((rows + votes).ravel(), minlength=m * n_classes).reshape(m, -1) / n
    weight = 1.0 / (n_classes * np.maximum(share, 1.0 / n))  # (m, C)
    per_vote = np.take_along_axis(weight, votes, axis=1)  # (m, n)
    flat = (np.arange(n)[None, :] * n_classes + votes).ravel()
    counts = np.bincount(flat, weights=per_vote.ravel(),
                         minlength=n * n_classes).reshape(n, n_classes)
    top = counts.argmax(axis=1)
    if quorum is None:
        return top
    top_share = counts[np.arange(n), top] / per_vote.sum(axis=0)
    return np.where(top_share >= quorum - 1e-12, top, ABSTAIN)
