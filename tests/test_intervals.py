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
