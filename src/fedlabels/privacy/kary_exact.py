"""The exact (ε, δ) of composed k-ary randomized response (the ``exact`` accountant of k-ary RR).

One response with noise parameter p (dp-accounting's: with probability p the output is
uniform over the k classes) keeps the label with probability q = 1 - p + p/k and gives each
other class r = p/k; ε₁ = a = ln(q/r). On a neighbouring pair whose true labels are a and b
the privacy loss ln(P(o)/Q(o)) takes three values: +a (output a, probability q under P),
-a (output b, r) and 0 (the k - 2 other classes). The pair is the same for every a != b up to
renaming the classes, and swapping a and b swaps P and Q, so δ is the same both ways.

n = R · s*_labels responses: the releases of two datasets whose labels differ in at most
s*_labels places differ, each round, in at most s*_labels independent responses, each such
pair the one above; the responses on equal labels have equal distributions (loss 0). Each
round's release conditioned on the earlier outputs (the labels of round t depend on the
consensus of the rounds before) is the same mechanism, so its pair is dominated by this
fixed pair whatever the history, and the adaptive composition of mechanisms dominated by
one pair is dominated by the product of that pair (Zhu, Dong & Wang 2022, Thm. 10): the
δ(ε) of the n-fold product below is the tight δ of the run, not a bound from a relaxation.

δ(ε) = E_P[(1 - e^{ε - L})₊] with L = (#a - #b)·a. The number m of informative outputs (a or
b) is Binomial(n, q + r) and, given m, #a is Binomial(m, q / (q + r)): k-ary RR on the pair is
binary RR with flip probability 1 / (e^a + 1), answered with probability q + r. The sum runs
over a window of (m, #a) within :data:`KARY_WINDOW_SDS` standard deviations of each mean
(plus :data:`KARY_WINDOW_SLACK` counts) and adds the whole probability outside it as if every
term there were 1: an upper bound of δ, equal to the full sum to float precision. The
window's probabilities do not depend on ε: they are collapsed once per (n, p, k) to the
distribution of #a - #b > 0 (losses <= 0 add nothing at ε >= 0).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from fedlabels.privacy.search import bisect_monotone

#: the window's half-width in standard deviations of m and of #a given m (the probability
#: outside is added to δ, so this trades tightness below float precision for speed only)
KARY_WINDOW_SDS = 8.0
KARY_WINDOW_SLACK = 32
#: rows of m summed at a time (bounds the memory of the window's grid)
_CHUNK_ROWS = 256


def kary_loss(p: float, k: int) -> float:
    """ε₁ = ln(q / r) of one k-ary response with noise parameter ``p``."""
    return math.log(k / p - k + 1.0)


def _window(n: np.ndarray | int, prob: float) -> tuple[np.ndarray, np.ndarray]:
    mean = np.asarray(n, dtype=float) * prob
    width = KARY_WINDOW_SDS * np.sqrt(mean * (1.0 - prob)) + KARY_WINDOW_SLACK
    lo = np.maximum(0, np.floor(mean - width)).astype(np.int64)
    hi = np.minimum(n, np.ceil(mean + width)).astype(np.int64)
    return lo, hi


@functools.lru_cache(maxsize=8)  # one (n, p, k) per bisection for ε; a ledger's check reuses it
def _kary_losses(n: int, p: float, k: int) -> tuple[float, np.ndarray, np.ndarray, float]:
    """a, the positive values d of #a - #b within the window, their probabilities, and the
    probability outside the window."""
    from scipy import stats  # lazy: scipy.stats costs ~1 CPU-s at import

    a = kary_loss(p, k)
    r = p / k
    q = 1.0 - p + r
    informative = min(1.0, q + r)
    g = q / (q + r)
    m_lo, m_hi = (int(v) for v in _window(n, informative))
    outside = (float(stats.binom.cdf(m_lo - 1, n, informative)) if m_lo > 0 else 0.0) \
        + (float(stats.binom.sf(m_hi, n, informative)) if m_hi < n else 0.0)
    by_d = np.zeros(n + 1)
    for start in range(m_lo, m_hi + 1, _CHUNK_ROWS):
        m = np.arange(start, min(start + _CHUNK_ROWS, m_hi + 1))
        w = stats.binom.pmf(m, n, informative)
        i_lo, i_hi = _window(m, g)
        outside += float(np.sum(w * (stats.binom.cdf(i_lo - 1, m, g)
                                     + stats.binom.sf(i_hi, m, g))))
        first = np.maximum(i_lo, m // 2 + 1)  # d = 2i - m > 0 only
        span = int(np.max(i_hi - first, initial=-1)) + 1
        if span <= 0:
            continue
        i = first[:, None] + np.arange(span)[None, :]
        inside = i <= i_hi[:, None]
        mm = np.broadcast_to(m[:, None], i.shape)
        weight = w[:, None] * stats.binom.pmf(np.where(inside, i, 0), mm, g)
        d = 2 * i - mm
        np.add.at(by_d, d[inside], weight[inside])
    d_pos = np.flatnonzero(by_d)
    pmf = by_d[d_pos]
    losses = d_pos * a
    losses.setflags(write=False)
    pmf.setflags(write=False)
    return a, losses, pmf, outside


def kary_deltas(epsilons: Sequence[float], n: int, p: float, k: int) -> list[float]:
    """δ(ε) of ``n`` composed k-ary responses (noise parameter ``p``, ``k`` classes) for
    each ε >= 0 (see the module docstring)."""
    a, losses, pmf, outside = _kary_losses(n, p, k)
    out = []
    for epsilon in epsilons:
        if epsilon >= n * a:  # no outcome's loss exceeds ε
            out.append(0.0)
            continue
        mask = losses > epsilon
        out.append(float(np.sum(pmf[mask] * -np.expm1(epsilon - losses[mask]))) + outside)
    return out


def kary_delta_for_epsilon(epsilon: float, n: int, p: float, k: int) -> float:
    """δ(ε) of ``n`` composed k-ary responses (noise parameter ``p``, ``k`` classes)."""
    return kary_deltas((epsilon,), n, p, k)[0]


@functools.lru_cache(maxsize=1024)  # pure; a ledger accounts the same releases at each check
def kary_epsilon_exact(n: int, p: float, k: int, delta: float) -> float:
    """The smallest ε with δ(ε) <= δ for ``n`` composed k-ary responses (to 1e-10, rounded
    up: the bisection's upper end)."""
    hi = n * kary_loss(p, k)
    if kary_delta_for_epsilon(0.0, n, p, k) <= delta:
        return 0.0
    _, hi = bisect_monotone(lambda e: kary_delta_for_epsilon(e, n, p, k) > delta,
                            0.0, hi, rel_tol=1e-10, max_iter=200, tol_floor=1.0)
    return hi


__all__ = ["KARY_WINDOW_SDS", "KARY_WINDOW_SLACK", "kary_delta_for_epsilon", "kary_deltas",
           "kary_epsilon_exact", "kary_loss"]
