"""The 95 % t-interval of a mean, written once (a normal 1.96 · s / √n over 3 seeds covers
about 81 %, and such an interval once stood in the docs' privacy tables)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def t_half_width(values: Sequence[float] | Any, confidence: float = 0.95) -> float:
    """Half-width of the two-sided t-interval of the mean of ``values`` (two or more):
    t((1 + confidence) / 2, n - 1) · s / √n, s the sample standard deviation."""
    import numpy as np
    from scipy import stats

    a = np.asarray(values, dtype=float)
    if a.size < 2:
        raise ValueError(f"a t-interval needs two or more values, got {a.size}")
    return float(stats.t.ppf((1 + confidence) / 2, a.size - 1)) * float(a.std(ddof=1)) \
        / math.sqrt(a.size)
