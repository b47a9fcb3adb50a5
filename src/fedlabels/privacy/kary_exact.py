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
(plus :data:`KARY_WINDOW_SLACK` counts) and adds a Chernoff bound of the probability outside
it as if every term there were 1: an upper bound of δ, above the full sum by ~1e-14 and a
rounding margin (summed in log space from a table of ln j!, each term raised by 64 ulps of
the largest log term). The window's probabilities do not depend on ε: they are collapsed
once per (n, p, k) to the distribution of #a - #b > 0 (losses <= 0 add nothing at ε >= 0).
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


@functools.lru_cache(maxsize=4)  # one n per calibration: its p varies, the table does not
def _log_factorials(n: int) -> np.ndarray:
    """ln(j!) for j = 0..n."""
    from scipy.special import gammaln

    table = gammaln(np.arange(n + 1, dtype=np.float64) + 1.0)
    table.setflags(write=False)
    return table


def _log_binom_pmf(lf: np.ndarray, x: np.ndarray, size: int, prob: float) -> np.ndarray:
    """ln P(Binomial(size, prob) = x) from the table ``lf`` of ln(j!)."""
    from scipy.special import xlog1py, xlogy

    return lf[size] - lf[x] - lf[size - x] + xlogy(x, prob) + xlog1py(size - x, -prob)


def _chernoff_tails(lo: np.ndarray, hi: np.ndarray, size: np.ndarray,
                    prob: float) -> np.ndarray:
    """Upper bounds of P(X < lo) + P(X > hi) for X ~ Binomial(size, prob) and a window
    [lo, hi] about its mean: P(X <= x) <= exp(-size · KL(x/size ‖ prob)) below the mean,
    and likewise above (Chernoff); 0 where the window reaches the support's end."""
    from scipy.special import xlog1py, xlogy

    def bound(x: np.ndarray) -> np.ndarray:
        frac = x / np.maximum(size, 1)
        kl = (xlogy(frac, frac) - xlogy(frac, prob) + xlogy(1.0 - frac, 1.0 - frac)
              - xlog1py(1.0 - frac, -prob))
        return np.exp(-size * np.maximum(kl, 0.0))

    below = np.where(lo > 0, bound(np.maximum(lo - 1, 0).astype(float)), 0.0)
    above = np.where(hi < size, bound(np.minimum(hi + 1, size).astype(float)), 0.0)
    return np.asarray(below + above, dtype=float)


@functools.lru_cache(maxsize=8)  # one (n, p, k) per bisection for ε; a ledger's check reuses it
def _kary_losses(n: int, p: float, k: int) -> tuple[float, np.ndarray, np.ndarray, float]:
    """a, the positive values d of #a - #b within the window, upper bounds of their
    probabilities, and an upper bound of the probability outside the window.

    The probabilities are summed in log space from a table of ln(j!) (each term a few
    table reads, not scipy's binomial pmf) and raised by a margin of 64 ulps of the
    largest log term, which bounds their rounding; the mass outside is bounded by
    Chernoff's tail bound. Both keep δ an upper bound."""
    a = kary_loss(p, k)
    r = p / k
    q = 1.0 - p + r
    informative = min(1.0, q + r)
    g = q / (q + r)
    lf = _log_factorials(n)
    m_lo, m_hi = (int(v) for v in _window(n, informative))
    m = np.arange(m_lo, m_hi + 1)
    w = np.exp(_log_binom_pmf(lf, m, n, informative))
    outside = float(_chernoff_tails(np.array([m_lo]), np.array([m_hi]), np.array([n]),
                                    informative)[0])
    i_lo, i_hi = _window(m, g)
    outside += float(np.sum(w * _chernoff_tails(i_lo, i_hi, m, g)))
    first = np.maximum(i_lo, m // 2 + 1)  # d = 2i - m > 0 only
    # ln P(i | m) = ln m! - ln i! - ln (m - i)! + i ln g + (m - i) ln(1 - g); 0 < g < 1
    slope = math.log(g) - math.log1p(-g)
    with np.errstate(divide="ignore"):  # w = 0: a row of no weight
        row_terms = lf[m] + m * math.log1p(-g) + np.log(w)
    by_d = np.zeros(n + 1)
    for start in range(0, len(m), _CHUNK_ROWS):
        rows = slice(start, start + _CHUNK_ROWS)
        mr, lo, hi = m[rows, None], first[rows, None], i_hi[rows, None]
        span = int(np.max(hi - lo, initial=-1)) + 1
        if span <= 0:
            continue
        i = np.minimum(lo + np.arange(span)[None, :], hi)  # beyond hi: weight 0 below
        weight = np.exp(row_terms[rows, None] - lf[i] - lf[mr - i] + i * slope)
        weight[lo + np.arange(span)[None, :] > hi] = 0.0
        d = np.maximum(2 * i - mr, 0)  # d <= 0 only where the weight is 0
        by_d += np.bincount(d.ravel(), weights=weight.ravel(), minlength=n + 1)
    terms = float(lf[n]) + n * sum(abs(math.log(v)) for v in
                                   (informative, 1.0 - informative, g, 1.0 - g) if v > 0.0)
    by_d *= math.exp(64 * np.finfo(float).eps * terms)  # the log terms' rounding, bounded
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
        delta = float(np.sum(pmf[mask] * -np.expm1(epsilon - losses[mask]))) + outside
        out.append(min(delta, 1.0))  # the rounding margin may lift a near-1 δ above 1
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
