"""Spreads over seeds in a report: the accuracy curve's band is the sample standard
deviation (n - 1), and the VUL interval a t-interval clipped to [0, 1], the range of a VUL
(an AUC): near 1 or 0 the unclipped interval runs past it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedlabels.reporting.report import group_runs, summary_rows
from test_report import _result


@pytest.mark.parametrize("vuls", [[0.97, 0.995, 1.0], [0.0, 0.004, 0.05]])
def test_vul_interval_is_clipped_to_the_unit_interval(vuls):
    runs = [_result("fedct", s, [0.8], privacy={"vul": v}) for s, v in enumerate(vuls)]
    row = summary_rows(group_runs(runs))[0]
    lo, hi = stats.t.interval(0.95, len(vuls) - 1, loc=sum(vuls) / len(vuls),
                              scale=stats.sem(vuls))
    assert lo < 0 or hi > 1  # the case: the plain t-interval leaves [0, 1]
    assert (row["vul_low"], row["vul_high"]) == (pytest.approx(max(0.0, lo)),
                                                 pytest.approx(min(1.0, hi)))


def test_curve_spread_is_the_sample_standard_deviation_over_seeds():
    accs = [[0.6, 0.8, 0.9], [0.7, 0.9, 0.9], [0.5, 0.6, 0.95]]
    runs = [_result("fedct", s, a) for s, a in enumerate(accs)]
    rounds, mean, std = group_runs(runs)[0].curve()
    assert rounds.tolist() == [1, 2, 3]
    for j in range(3):
        col = [a[j] for a in accs]
        assert mean[j] == pytest.approx(sum(col) / 3)
        assert std[j] == pytest.approx(stats.tstd(col))
    assert np.all(std >= 0)
