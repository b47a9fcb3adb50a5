"""core.intervals.t_half_width against scipy's own t-interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedlabels.core.intervals import t_half_width


@pytest.mark.parametrize("values", [[0.81, 0.79, 0.80], [1.0, 2.0], [3.0, 3.5, 2.0, 4.25, 3.0]])
def test_matches_scipy(values: list[float]) -> None:
    a = np.asarray(values)
    low, high = stats.t.interval(0.95, a.size - 1, loc=a.mean(), scale=stats.sem(a))
    assert t_half_width(values) == pytest.approx((high - low) / 2, rel=1e-12)


def test_one_value_has_no_interval() -> None:
    with pytest.raises(ValueError, match="two or more"):
        t_half_width([0.5])


def test_quantiles_are_scipy_stats_floats_bit_for_bit() -> None:
    """scipy.special's quantiles stand in for scipy.stats' (not imported): the same floats,
    so every interval a report or the demo prints is unchanged."""
    from fedlabels.core.intervals import normal_quantile

    rng = np.random.default_rng(0)
    for q in [0.975, 0.995, 0.95, *rng.uniform(0.5, 0.9999, 50)]:
        assert normal_quantile(q) == float(stats.norm.ppf(q))
    for n in range(2, 60):
        values = rng.normal(size=n)
        old = float(stats.t.ppf(0.975, n - 1)) * float(values.std(ddof=1)) / np.sqrt(n)
        assert t_half_width(values) == old


def test_intervals_do_not_import_scipy_stats() -> None:
    """A report's 'below the local-only reference' line imported scipy.stats
    (1-2 CPU-s) for one normal quantile; a t-interval did too."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from fedlabels.results.caveats import below_reference\n"
            "assert below_reference(0.8, 0.9, 'local', n_test=100)\n"
            "assert below_reference(0.8, 0.9, 'local', differences=[-0.1, -0.12, -0.09])\n"
            "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
