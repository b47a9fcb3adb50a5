"""The 95 % t-interval of a mean, written once (a normal 1.96 · s / √n over 3 seeds covers
about 81 %, and such an interval once stood in the docs' privacy tables).

The quantiles are scipy.special's, the very functions ``scipy.stats.t.ppf`` and
``norm.ppf`` evaluate (the same floats), without importing ``scipy.stats`` (1-2 CPU-s, paid
by every ``fedlabels report`` for one number)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def t_half_width(values: Sequence[float] | Any, confidence: float = 0.95) -> float:
    """Half-width of the two-sided t-interval of the mean of ``values`` (two or more):
    t((1 + confidence) / 2, n - 1) · s / √n, s the sample standard deviation."""
    import numpy as np
    from scipy import special

    a = np.asarray(values, dtype=float)
    if a.size < 2:
        raise ValueError(f"a t-interval needs two or more values, got {a.size}")
    return float(special.stdtrit(a.size - 1, (1 + confidence) / 2)) * float(a.std(ddof=1)) \
        / math.sqrt(a.size)


def normal_quantile(q: float) -> float:
    """The standard normal's ``q``-quantile (``scipy.stats.norm.ppf(q)``)."""
    from scipy import special

    return float(special.ndtri(q))
