"""A regression run's training-mean baseline (the constant predictor of the pooled private
training targets' mean), as classification has its majority class: recorded in the result,
drawn by ``fedlabels plot`` and the report, absent (no line, no error) from older results."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest

from fedlabels.api import run
from fedlabels.data import make_federation
from fedlabels.reporting.plots import accuracy_figure
from fedlabels.reporting.report import write_report
from fedlabels.reporting.report_page import fmt
from fedlabels.results import load_result

matplotlib.use("Agg")
import matplotlib.pyplot as plt

LO, HI = 0.0, 100.0


@pytest.fixture(scope="module")
def rows():
    """Private targets whose mean lies above the test targets' (so a mean of the wrong
    rows, or on the unit scale, is off); U is public features without targets."""
    rng = np.random.default_rng(3)
    X, X_test, X_public = (rng.normal(size=(n, 3)) for n in (90, 40, 30))
    y = 55.0 + 10.0 * X[:, 0] + rng.normal(size=90)
    y_test = 48.0 + 10.0 * X_test[:, 0] + rng.normal(size=40)
    return X, y, X_test, y_test, X_public


@pytest.fixture(scope="module")
def result(rows):
    X, y, X_test, y_test, X_public = rows
    fed = make_federation(X, y, X_test=X_test, y_test=y_test, X_public=X_public, clients=3,
                          task="regression", target_range=(LO, HI), seed=0)
    return run("local", fed, model="dt", rounds=1, seed=0, progress=False)


def test_the_baseline_is_the_private_targets_mean_scored_on_the_test_set(rows, result):
    """A regression result had no baseline: an RMSE of 55 could not be read against one."""
    _, y, _, y_test, _ = rows
    base = result.clinical["baseline"]
    mean = np.mean(y)  # every non-test row is a client's (U is X_public, without targets)
    assert base["mean"] == pytest.approx(mean, rel=1e-9)
    assert base["rmse"] == pytest.approx(np.sqrt(np.mean((y_test - mean) ** 2)), rel=1e-9)
    ss_tot = np.sum((y_test - y_test.mean()) ** 2)
    assert base["r2"] == pytest.approx(1 - np.sum((y_test - mean) ** 2) / ss_tot, rel=1e-9)
    assert base["n_test"] == len(y_test)


def test_the_plot_and_the_report_show_it(tmp_path, result):
    path = result.save_json(tmp_path / "reg.json")
    rmse = result.clinical["baseline"]["rmse"]
    fig = accuracy_figure([load_result(path)])
    try:
        entries = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        (entry,) = [t for t in entries if t.startswith("predict the training mean")]
        assert entry == f"predict the training mean: RMSE {rmse:.3f}"
        (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == entry]
        assert line.get_linestyle() == "-." and np.allclose(line.get_ydata(), rmse)
    finally:
        plt.close(fig)
    from fedlabels.reporting.report import group_runs, summary_rows
    from fedlabels.reporting.report_figures import curves_figure

    configs = group_runs([load_result(path)])
    fig = curves_figure(configs, summary_rows(configs))  # the report's RMSE figure
    try:
        _, labels = fig.axes[0].get_legend_handles_labels()
        assert f"predict the training mean: RMSE {rmse:.3f}" in labels
    finally:
        plt.close(fig)
    page = write_report([path], tmp_path / "rep")[0]["report"].read_text()
    assert "Predicting the training mean" in page and f"RMSE <b>{fmt(rmse)}</b>" in page


def test_an_older_result_without_it_plots_and_reports_without_it(tmp_path, result):
    path = result.save_json(tmp_path / "reg.json")
    data = json.loads(path.read_text())
    assert "baseline" in data["clinical"]
    del data["clinical"]  # as regression results were written before
    path.write_text(json.dumps(data))
    fig = accuracy_figure([load_result(path)])
    try:
        entries = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        assert entries and not any("training mean" in t for t in entries)
    finally:
        plt.close(fig)
    page = write_report([path], tmp_path / "rep")[0]["report"].read_text()
    assert "RMSE" in page and "training mean" not in page


def test_runs_of_other_test_sets_draw_a_band(tmp_path, result):
    """Seeds with other test sets give other baselines: one run's line would mislead."""
    path = result.save_json(tmp_path / "a.json")
    data = json.loads(path.read_text())
    data["seed"] = 1
    data["clinical"]["baseline"]["rmse"] += 2.0
    other = tmp_path / "b.json"
    other.write_text(json.dumps(data))
    low = result.clinical["baseline"]["rmse"]
    fig = accuracy_figure([load_result(path), load_result(other)])
    try:
        _, labels = fig.axes[0].get_legend_handles_labels()
        assert (f"predict the training mean: RMSE {low:.3f} to {low + 2:.3f} over the runs' "
                "test sets") in labels
    finally:
        plt.close(fig)


def test_the_warning_compares_with_the_baseline_the_report_draws(rows, result):
    """The warning said 'mean R² ≤ 0: no better than predicting the test mean', a predictor
    the report does not draw (its line is the training mean's RMSE): a run worse than the
    drawn line went unflagged where its R² was above 0, and one better than the line was
    flagged where its R² was not. It now compares the mean RMSE with the drawn baseline's;
    a result without the baseline keeps the R² sentence."""
    from fedlabels.results.caveats import regression_warning, run_warnings

    base = result.clinical["baseline"]
    assert base["r2"] < 0  # the private targets' mean lies above the test targets'
    below, above = base["rmse"] * 0.99, base["rmse"] * 1.01
    r2_below = 1 - (1 - base["r2"]) * 0.99**2  # R² of RMSE `below` on the same test set
    assert r2_below < 0  # beats the drawn line, not the test mean: no warning
    assert regression_warning(below, r2_below, base) is None
    line = regression_warning(above, 0.01, base)  # worse than the line, R² above 0
    assert line is not None and f"{above:.4g}" in line and f"{base['rmse']:.4g}" in line
    assert "training-mean baseline" in line and "test" not in line
    assert regression_warning(base["rmse"], None, base) is not None  # equal: not below
    assert regression_warning(above, 0.01, None) is None  # earlier results: R² only
    assert "test targets' own mean" in str(regression_warning(None, -0.2, None))
    import copy

    def warned(rmse: float, r2: float) -> list[str]:  # the run, its clients scored so
        res = copy.deepcopy(result)
        rec = res.final_record
        rec.rmse, rec.r2 = [rmse] * len(rec.rmse), [r2] * len(rec.r2)
        return [w for w in run_warnings(res) if "R²" in w or "RMSE" in w]

    assert warned(below, r2_below) == []
    assert warned(above, 0.01) == [line]


def test_a_model_of_noise_targets_is_flagged_against_the_training_mean():
    """Targets independent of the features: the clients' trees fit noise, and their test
    RMSE is above that of the training mean the report draws."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 3))
    y = 50.0 + 10.0 * rng.normal(size=200)
    fed = make_federation(X, y, clients=2, task="regression", target_range=(LO, HI), seed=0)
    res = run("local", fed, model="dt", rounds=1, seed=0, progress=False)
    from fedlabels.results.caveats import run_warnings

    assert res.final["mean_rmse"] > res.clinical["baseline"]["rmse"]
    assert [w for w in run_warnings(res) if "training-mean baseline's" in w]
