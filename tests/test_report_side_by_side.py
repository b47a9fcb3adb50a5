"""The report's ε figure draws configurations at one ε side by side: DP-FedCT's and
DP-FedAvg's points at ε = 1 (and their bars) lay on each other, one hidden."""

from __future__ import annotations

import pytest

from fedlabels.reporting.report import group_runs, summary_rows
from fedlabels.reporting.report_figures import EPSILON_AXIS, privacy_figure
from fedlabels.results import RoundRecord, RunResult


def _dp(method: str, epsilon: float, acc: float) -> RunResult:
    record = RoundRecord(round=1, local_steps=None, accuracies=[acc] * 2, server={},
                         bytes_up=[10] * 2, bytes_down=[5] * 2, seconds=0.1)
    privacy = {"guarantee": "formal", "epsilon": epsilon, "delta": 1e-5}
    return RunResult(method=method, dataset="toy", seed=0,
                     config={"method": method, "rounds": 1, "seed": 0,
                             "options": {"epsilon": round(epsilon)}},
                     federation={"n_clients": 2}, models=["dt"] * 2, rounds=[record],
                     communication={"bytes_up_total": 20, "bytes_down_total": 10},
                     wall_seconds=1.0, extra={"privacy": privacy})


def test_points_at_one_epsilon_are_side_by_side_and_others_where_they_are():
    import matplotlib.pyplot as plt

    runs = [_dp("dp-fedct", 0.99996, 0.5), _dp("dp-fedavg", 1.0, 0.5),
            _dp("dp-fedct", 4.0, 0.6)]
    rows = summary_rows(group_runs(runs))
    fig = privacy_figure(rows, "epsilon_mean", "epsilon_std", EPSILON_AXIS, "t", "no DP")
    try:
        ax = fig.axes[0]
        drawn = {c.get_label(): float(c.lines[0].get_xdata()[0]) for c in ax.containers}
        x = [drawn[r["configuration"]] for r in rows]
        span = ax.get_xlim()[1] - ax.get_xlim()[0]
        assert abs(x[0] - x[1]) >= 0.01 * span  # apart, so neither hides the other
        assert (x[0] + x[1]) / 2 == pytest.approx(0.99998, abs=0.001 * span)  # about ε
        assert max(abs(x[0] - 1), abs(x[1] - 1)) <= 0.02 * span
        assert x[2] == 4.0  # alone at its ε: where it is
        assert "side by side" in ax.get_xlabel()
    finally:
        plt.close(fig)
