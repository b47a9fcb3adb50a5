"""benchmarks/privacy_utility_record.py: its '± 95 % interval over seeds' is one."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from conftest import load_benchmark


@pytest.mark.parametrize("values", [[0.816, 0.815, 0.818], [0.51, 0.55, 0.58, 0.52]])
def test_the_interval_over_seeds_is_the_95_percent_t_interval(values):
    """Three or four seeds: t(0.975, n-1), not the normal 1.96 (about 81 % at n = 3)."""
    script = load_benchmark("privacy_utility_record")
    mean, half = script._mean_ci(values)
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values),
                              scale=stats.sem(values))
    assert (mean - half, mean + half) == (pytest.approx(lo), pytest.approx(hi))
    assert script._mean_ci([0.7]) == (0.7, 0.0)
