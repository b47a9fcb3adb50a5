"""Plots a person can read: short legends, a large plot area, references always drawn,
interrupted runs flagged; the CLI table with the headline metric and honest warnings."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.reporting.plots import MAX_LABEL, accuracy_figure, legend_labels
from fedlabels.reporting.plots import run_name as run_name_of

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def runs():
    """FedCT and FedAvg (DP-FedCT with a changed option) beside local-only and centralized
    training, on unequal clients with partial participation for FedCT."""
    fed = fl.load_federation("breast_cancer", clients=5, seed=0, partition="quantity:1")
    assert len({len(c) for c in fed.clients}) > 1  # unequal client sizes
    return {
        "fedct": fl.run("fedct", fed, model="dt", rounds=4, seed=0, progress=False,
                        participation=0.6, quorum=0.8),
        "fedavg": fl.run("fedavg", fed, model="mlp(hidden=16)", rounds=3, period=5, seed=0,
                         progress=False),
        "local": fl.run("local", fed, model="dt", rounds=1, seed=0, progress=False),
        "centralized": fl.run("centralized", fed, model="dt", rounds=1, seed=0,
                              progress=False),
    }


def _interrupted(fed_name: str = "breast_cancer"):
    def stop(record):
        raise KeyboardInterrupt

    return fl.run("fedct", fed_name, model="dt", rounds=12, seed=0, progress=False,
                  on_round=stop)


def _legend_texts(fig):
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def _plot_fraction(fig):
    fig.canvas.draw()
    box = fig.axes[0].get_position()
    return box.width * box.height


def test_legends_are_short_and_the_plot_area_large(runs):
    results = list(runs.values())
    labels, _ = legend_labels(results)
    assert all(len(label) <= MAX_LABEL for label in labels), labels
    # changed options only, and the participation the other curve does not share
    assert labels[0] == "fedct · decision_tree (quorum=0.8), participation 0.6"
    assert labels[1] == "fedavg · mlp"
    fig = accuracy_figure(results)
    try:
        texts = _legend_texts(fig)
        assert max(len(t) for t in texts) <= MAX_LABEL + 30  # + the reference's value
        assert _plot_fraction(fig) >= 0.35
        assert fig.axes[0].get_xlabel() == "communication round"
        assert "accuracy" in fig.axes[0].get_ylabel() and fig.axes[0].get_title()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_local_and_centralized_are_drawn_as_labelled_references(runs):
    fig = accuracy_figure(list(runs.values()))
    try:
        texts = _legend_texts(fig)
        for method in ("local", "centralized"):
            value = runs[method].final["mean_accuracy"]
            (entry,) = [t for t in texts if t.startswith(f"{method} ·")]
            assert entry.endswith(f"{value:.3f} (reference)")
            lines = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == entry]
            assert lines and np.allclose(lines[0].get_ydata(), value)  # a horizontal line
        assert any(t.startswith("majority class") for t in texts)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_an_interrupted_run_is_flagged_in_the_legend_and_the_table(runs, capsys):
    res = _interrupted()
    assert res.extra.get("interrupted") and len(res.rounds) == 1
    labels, _ = legend_labels([runs["fedct"], res])
    assert labels[1].endswith("[interrupted after round 1 of 12]")
    assert "interrupted" not in labels[0]
    from fedlabels.results import format_table

    table = format_table([runs["fedct"].summary_row(), res.summary_row()])
    assert table.splitlines()[0].endswith("note")
    assert table.splitlines()[-1].endswith("interrupted after round 1 of 12")


def test_an_interrupted_curve_says_the_round_its_value_is_of(runs):
    """An interrupted run's entry read "[interrupted after round 1 of 12]: 0.912 at the
    end", in the plot and in the report's round figure: it never reached its end."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report import group_runs, summary_rows
    from fedlabels.reporting.report_figures import curves_figure

    res = _interrupted()
    value = f"{res.final['mean_accuracy']:.3f}"
    configs = group_runs([runs["fedct"], res])
    for fig in (accuracy_figure([runs["fedct"], res]),
                curves_figure(configs, summary_rows(configs))):
        try:
            _, labels = fig.axes[0].get_legend_handles_labels()
            (entry,) = [t for t in labels if "interrupted" in t]
            assert entry.endswith(f"{value} at round 1")
            (whole,) = [t for t in labels if t.startswith("fedct") and t != entry]
            assert whole.endswith(" at the end")
        finally:
            plt.close(fig)


def test_a_run_stopped_before_its_first_evaluation_keeps_the_palette(runs):
    """A run interrupted before round 1 finished has an empty '(not evaluated)' entry;
    it was drawn in matplotlib's own blue, outside the palette, next to the local
    reference's blue."""
    import copy

    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from fedlabels.reporting.plots import PALETTE

    empty = copy.deepcopy(runs["fedct"])
    empty.rounds = []
    empty.extra["interrupted"] = True
    fig = accuracy_figure([empty, runs["local"]])
    try:
        handles, labels = fig.axes[0].get_legend_handles_labels()
        (handle,) = [h for h, t in zip(handles, labels, strict=True) if "not evaluated" in t]
        assert to_hex(handle.get_color()).upper() in PALETTE
    finally:
        plt.close(fig)


def test_table_names_whole_datasets_and_regression_headers():
    from fedlabels.results import format_table

    row = {"method": "fedct", "dataset": "csv:data/a_very_long_table_name.csv", "seed": 0,
           "mean_acc": 0.9, "min_acc": 0.8, "max_acc": 0.95, "mean_rmse": None,
           "mean_r2": None, "bytes_up_per_client_round": 10.0, "wall_s": 1.0}
    assert "csv:data/a_very_long_table_name.csv" in format_table([row])
    reg = {**row, "mean_acc": None, "min_acc": None, "max_acc": None, "mean_rmse": 52.1,
           "mean_r2": 0.41, "min_rmse": 40.5, "max_rmse": 61.25}
    header, _, line = format_table([reg]).splitlines()
    assert "RMSE" in header and "R²" in header and "acc" not in header
    assert line.split()[2:6] == ["52.1", "40.5", "61.25", "0.410"]


def test_metric_picks_the_headline_and_chance_runs_are_warned(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--model", "logreg",
                 "--rounds", "2", "--no-progress", "--output", str(out),
                 "--metric", "auroc"]) == 0
    captured = capsys.readouterr()
    header, _, line = captured.out.splitlines()[:3]
    assert "mean AUROC" in header
    from fedlabels.results import load_result

    res = load_result(out)
    auroc = res.extra["clinical"]["metrics"]["auroc"]
    assert f"{auroc['mean']:.4f}" in line and f"{auroc['min']:.3f}" in line
    assert "warning" not in captured.err  # logistic regression learns this task
    # a run that learns nothing: a constant model at every client
    from sklearn.dummy import DummyClassifier

    res = fl.run("local", "breast_cancer", model=DummyClassifier(strategy="most_frequent"),
                 rounds=1, seed=0, progress=False)
    (warning,) = res.summary_row()["warnings"]
    assert "majority-class baseline" in warning and "within noise" in warning
    assert res.extra["clinical"]["metrics"]["auroc"]["mean"] == pytest.approx(0.5)


def test_progress_says_it_shows_accuracy_when_another_metric_is_chosen(tmp_path, capsys):
    """With --metric balanced_accuracy each progress line read 'mean accuracy 0.812' and
    nothing said that the rounds record accuracy only: a line before the run says so; none
    with the default metric or without progress."""
    out = tmp_path / "r.json"
    args = ["run", "--method", "fedct", "--dataset", "breast_cancer", "--model", "dt",
            "--rounds", "1", "--unlabeled", "60", "--output", str(out)]
    assert main([*args, "--metric", "balanced_accuracy"]) == 0
    err = capsys.readouterr().err.splitlines()
    rounds = [i for i, line in enumerate(err) if ": mean accuracy " in line]
    notes = [i for i, line in enumerate(err) if "--metric balanced_accuracy" in line]
    assert rounds and len(notes) == 1 and notes[0] < rounds[0]
    assert "mean test accuracy, the one metric the rounds record" in err[notes[0]]
    assert main([*args, "--overwrite"]) == 0
    assert "--metric" not in capsys.readouterr().err
    assert main([*args, "--overwrite", "--no-progress", "--metric", "auroc"]) == 0
    assert "--metric" not in capsys.readouterr().err


def test_demo_plot_shows_references_and_fits(demo_run):
    from PIL import Image

    from fedlabels.demo import demo_warnings

    rows = [{"method": "fedct/decision_tree", "dataset": "d", "mean_acc": 0.80,
             "warnings": []},
            {"method": "local/decision_tree", "dataset": "d", "mean_acc": 0.84, "warnings": []}]
    (line,) = demo_warnings(rows)
    assert "fedct/decision_tree" in line and "below the local-only reference 0.840" in line
    folder, err = demo_run  # `fedlabels demo --no-progress`, run once for the session
    with Image.open(folder / "accuracy.png") as img:
        assert img.size[0] <= 1000 and img.size[1] <= 700
    assert "warning" not in err  # the demo's runs all learn


def test_an_extended_run_is_flagged(runs):
    from copy import deepcopy

    from fedlabels.results.caveats import rounds_status

    res = deepcopy(runs["local"])
    assert rounds_status(res) is None
    res.extra["provenance"] = {"resumed": [{"from_round": 1, "rounds_planned_before": 1,
                                            "rounds_planned": 3}]}
    assert rounds_status(res) == "extended from 1 to 3 rounds"
    assert legend_labels([res])[0][0].endswith("[extended from 1 to 3 rounds]")


def test_a_metric_that_does_not_apply_says_why(tmp_path, capsys):
    assert main(["run", "--method", "local", "--dataset", "wine", "--model", "dt",
                 "--rounds", "1", "--no-progress", "--output", str(tmp_path / "w.json"),
                 "--metric", "sensitivity"]) == 0
    captured = capsys.readouterr()
    assert "n/a" in captured.out.splitlines()[2]
    assert "--metric sensitivity is n/a for this run: it applies to binary tasks only" in \
        captured.err


def test_runs_alike_but_for_model_arguments_or_period_are_told_apart():
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    results = [fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, period=2, seed=0,
                      progress=False),
               fl.run("fedct", fed, model="mlp(hidden=8)", rounds=1, period=3, seed=0,
                      progress=False),
               fl.run("fedct", fed, model="mlp(hidden=16)", rounds=1, period=2, seed=0,
                      progress=False)]
    labels, _ = legend_labels(results)
    assert labels == ["fedct · mlp (model=mlp(hidden=8), period=2)",
                      "fedct · mlp (model=mlp(hidden=8), period=3)",
                      "fedct · mlp (model=mlp(hidden=16), period=2)"]
    labels, _ = legend_labels([results[0], results[0]])  # identical runs: still numbered
    assert labels[0].endswith("#1") and labels[1].endswith("#2")
    import copy

    long = [copy.deepcopy(results[0]) for _ in range(2)]
    for k, res in enumerate(long):  # options that differ only past the cut
        res.config["options"] = {"a_rather_long_option_name_indeed": 0.123456, "z": k}
    assert run_name_of(long[0]).endswith("z=0)")  # whole: what tells them apart is at the end
    labels, _ = legend_labels(long)
    assert labels[0].endswith("z=0)") and labels[1].endswith("z=1)")  # not cut, not numbered
    fig = accuracy_figure(long)  # the long entries are wrapped, not cut
    try:
        texts = _legend_texts(fig)
        assert any("z=0)" in t for t in texts) and any("z=1)" in t for t in texts)
        assert all(len(line) <= MAX_LABEL for t in texts for line in t.split("\n"))
        assert not any("…" in t for t in texts)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    fig = accuracy_figure(results * 2)  # six long labels: one column, within the figure
    try:
        fig.canvas.draw()
        (legend,) = fig.legends
        assert legend.get_window_extent().width <= fig.bbox.width
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_a_one_round_run_ticks_its_round_alone():
    """One or two rounds: the ticks are those rounds (the locator gave 0.96, 0.98, ...)."""
    from fedlabels.reporting.plots import accuracy_figure

    for rounds in (1, 2):
        result = fl.run("fedct", "breast_cancer", model="dt", rounds=rounds, progress=False)
        fig = accuracy_figure([result])
        ax = fig.axes[0]
        fig.canvas.draw()
        assert list(ax.get_xticks()) == list(range(1, rounds + 1))


def test_the_majority_baseline_is_that_of_every_run_not_the_first(runs):
    """Runs whose test sets differ (other seeds, an audit's split) have other baselines;
    the plot drew the first run's alone and named it for all."""
    import copy

    import matplotlib.pyplot as plt

    other = copy.deepcopy(runs["fedct"])
    other.seed = 1
    base = dict(other.extra["clinical"]["baseline"])
    other.extra["clinical"]["baseline"] = {**base, "accuracy": 0.5}
    fig = accuracy_figure([runs["fedct"], other])
    try:
        (entry,) = [t for t in _legend_texts(fig) if t.startswith("majority class")]
        assert f"0.500 to {base['accuracy']:.3f}" in entry
        assert not [ln for ln in fig.axes[0].get_lines() if ln.get_label() == entry]
    finally:
        plt.close(fig)
    fig = accuracy_figure([runs["fedct"], runs["fedavg"]])  # one test set: one line
    try:
        (entry,) = [t for t in _legend_texts(fig) if t.startswith("majority class")]
        assert entry.endswith(f": {base['accuracy']:.3f}")
        assert [ln for ln in fig.axes[0].get_lines() if ln.get_label() == entry]
    finally:
        plt.close(fig)


def test_an_estimated_baseline_does_not_widen_a_measured_one(runs):
    """A run without a measured baseline (PATE scores its student, so no ``clinical``) has
    one estimated from the training classes; beside measured runs of the same test set it
    drew a band "0.605 to 0.612 over the runs' test sets". Alone it says it is estimated."""
    import copy

    import matplotlib.pyplot as plt

    from fedlabels.results.caveats import majority_baseline

    pate = copy.deepcopy(runs["fedct"])
    pate.extra["clinical"] = {"unavailable": "scores something else"}
    measured, estimated = majority_baseline(runs["fedct"]), majority_baseline(pate)
    assert estimated["estimated"] and estimated["accuracy"] != measured["accuracy"]
    for results, value, note in (([runs["fedct"], pate], measured["accuracy"], False),
                                 ([pate], estimated["accuracy"], True)):
        fig = accuracy_figure(results)
        try:
            _, labels = fig.axes[0].get_legend_handles_labels()
            (entry,) = [t for t in labels if t.startswith("majority class")]
            assert f": {value:.3f}" in entry and " to " not in entry
            assert ("estimated from the training classes" in entry) is note
            (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == entry]
            assert line.get_ydata()[0] == pytest.approx(value)
        finally:
            plt.close(fig)


def test_the_title_says_what_all_runs_share_dataset_clients_rounds_seed(runs):
    """A one-run plot did not say its seed or rounds anywhere."""
    import matplotlib.pyplot as plt

    fig = accuracy_figure([runs["fedct"]])
    try:
        assert fig.axes[0].get_title().startswith(
            "breast_cancer, m = 5, partition quantity:1, R = 4, participation 0.6, seed 0:")
    finally:
        plt.close(fig)


def test_partial_participation_and_the_partition_are_said_in_plot_and_report(runs):
    """50 clients at participation 0.3 on a label-skewed partition: neither the plot's
    title, nor its legend, nor the report's titles said so; the curves read like full
    rounds of iid clients."""
    import copy

    import matplotlib.pyplot as plt

    from fedlabels.reporting.report import group_runs
    from fedlabels.reporting.report_figures import what_ran

    full = copy.deepcopy(runs["fedct"])
    full.config["participation"] = None
    fig = accuracy_figure([runs["fedct"], full, runs["local"]])
    try:  # shared: in the title; not shared: in the entry of the run it applies to
        title = fig.axes[0].get_title().replace("\n    ", " ")
        assert title.startswith("breast_cancer, m = 5, partition quantity:1, R = 4, seed 0:")
        _, labels = fig.axes[0].get_legend_handles_labels()
        assert labels[0] == (f"fedct · decision_tree (quorum=0.8), participation 0.6: "
                             f"{runs['fedct'].final['mean_accuracy']:.3f} at the end")
        assert labels[1].startswith("fedct · decision_tree (quorum=0.8): ")
        assert not [lb for lb in labels if lb.startswith("local") and "particip" in lb]
    finally:
        plt.close(fig)
    assert what_ran(group_runs([runs["fedct"], runs["local"]])) == (
        "breast_cancer, m = 5, partition quantity:1, R = 4, participation 0.6, seed 0")
    assert what_ran(group_runs([runs["fedct"], full])) == (
        "breast_cancer, m = 5, partition quantity:1, R = 4, participation 0.6, 1, seed 0")


def test_a_dp_curve_says_its_guarantee_and_the_epsilon_it_spent():
    """A DP-FedAvg and a DP-FedCT curve both read 'epsilon=8.0': a client-level ε against
    observers of the model and a record-level ε against the server read alike, and the
    entry gave the budget, not the ε spent. Both per-round figures now say them."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.report import group_runs, summary_rows
    from fedlabels.reporting.report_figures import curves_figure
    from fedlabels.results.run_result import guarantee_text

    dp = fl.run("dp-fedct", "breast_cancer", model="dt", rounds=2, seed=0, progress=False,
                options={"epsilon": 8.0, "mechanism": "xor"})
    plain = fl.run("fedct", "breast_cancer", model="dt", rounds=2, seed=0, progress=False)
    privacy = dp.extra["privacy"]
    assert privacy["guarantee"] == "formal"
    expected = guarantee_text(privacy)  # "formal, <unit>, against <party>"
    assert ", against " in expected
    configs = group_runs([dp, plain])
    for fig in (accuracy_figure([dp, plain]), curves_figure(configs, summary_rows(configs))):
        try:
            _, labels = fig.axes[0].get_legend_handles_labels()
            (entry,) = [t for t in labels if t.startswith("dp-fedct")]
            assert expected in entry and f"ε = {privacy['epsilon']:.2f} spent" in entry
            (other,) = [t for t in labels if t.startswith("fedct")]
            assert "\n" not in other and "ε" not in other  # no guarantee: nothing added
        finally:
            plt.close(fig)


def test_a_long_dataset_name_wraps_the_title_within_the_figure(runs):
    """A csv: dataset's path went into the title on one line, wider than the figure."""
    import copy

    import matplotlib.pyplot as plt

    res = copy.deepcopy(runs["fedct"])
    res.dataset = "csv:/data/" + "a_rather_long_folder_name/" * 6 + "patients.csv:diagnosis"
    fig = accuracy_figure([res])
    try:
        fig.canvas.draw()
        title = fig.axes[0].title
        assert res.dataset.split("/")[-1] in title.get_text().replace("\n", "")
        assert title.get_window_extent().width <= fig.bbox.width
    finally:
        plt.close(fig)


def test_a_curve_drawn_over_an_identical_one_says_so(runs):
    """Two runs with the same accuracy every round (two configurations of a method that
    converged alike) drew one curve over the other: the hidden one had a legend entry and
    no line. (Two seeds of one configuration are one line since 2026-11-30.)"""
    import copy

    import matplotlib.pyplot as plt

    twin = copy.deepcopy(runs["fedct"])
    twin.config["eval_every"] = 2  # another configuration with the same curve
    fig = accuracy_figure([runs["fedct"], twin, runs["fedavg"]])
    texts = _legend_texts(fig)
    plt.close(fig)
    hidden = [t for t in texts if "the same curve as" in t.replace("\n    ", " ")]
    assert len(hidden) == 1 and "fedavg" not in hidden[0]
    flat = [t.replace("\n    ", " ") for t in texts]  # as wrapped into the legend
    first, _, under = hidden[0].replace("\n    ", " ").partition(" (the same curve as ")
    assert first.split(":")[0] in flat[1] and under.rstrip(")") in flat[0]  # #2 under #1


def test_a_long_run_gets_a_readable_curve_not_a_bar_of_markers(runs):
    """A marker on each of 3,000 rounds drew a solid bar over the curve: at most
    MAX_MARKERS markers, the line still through every round."""
    from copy import deepcopy
    from dataclasses import replace

    from fedlabels.reporting.plots import MAX_MARKERS

    res = deepcopy(runs["fedct"])
    last = res.rounds[-1]
    res.rounds = [replace(last, round=r) for r in range(1, 3001)]
    fig = accuracy_figure([res])
    curve = max(fig.axes[0].lines, key=lambda ln: len(ln.get_xdata()))
    n, every = len(curve.get_xdata()), curve.get_markevery()
    assert n == 3000
    assert 0 < (n if every is None else len(range(0, n, every))) <= MAX_MARKERS


def test_plot_accuracy_replaces_an_existing_file_only_when_told(runs, tmp_path):
    """plot_accuracy (called by the demo, benchmarks and users' scripts) replaced an existing
    file without asking, where fl.plot and ``fedlabels plot`` refuse without overwrite."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.reporting.plots import plot_accuracy

    mine = tmp_path / "figure.png"
    mine.write_bytes(b"a user's own figure")
    with pytest.raises(FedLabelsError, match=r"figure\.png exists; pass overwrite=True"):
        plot_accuracy([runs["fedct"]], mine)
    assert mine.read_bytes() == b"a user's own figure"
    with pytest.raises(FedLabelsError, match="exists; pass overwrite=True"):  # as fl.plot
        fl.plot([runs["fedct"]], mine)
    assert plot_accuracy([runs["fedct"]], mine, overwrite=True) == mine
    assert mine.read_bytes().startswith(b"\x89PNG")
    new = tmp_path / "new.pdf"  # a new file needs no flag
    assert plot_accuracy([runs["fedct"]], new) == new and new.read_bytes()[:4] == b"%PDF"


def test_references_of_one_model_from_two_seeds_are_told_apart(runs):
    """Two local-only runs of one model (seeds 0 and 1, now one configuration's line; here
    two configurations) were both drawn dashed in the colour of the curve with that model:
    two identical lines, one legend style."""
    fed = fl.load_federation("breast_cancer", clients=5, seed=1, partition="quantity:1",
                             unlabeled=100)
    other = fl.run("local", fed, model="dt", rounds=1, seed=1, progress=False)
    fig = accuracy_figure([runs["fedct"], runs["local"], other])
    try:
        texts = _legend_texts(fig)
        refs = [ln for ln in fig.axes[0].get_lines()
                if ln.get_label() in texts and ln.get_label().startswith("local ·")]
        assert len(refs) == 2
        looks = {(matplotlib.colors.to_hex(ln.get_color()), ln.get_linestyle()) for ln in refs}
        assert len(looks) == 2  # each reference its own look
        assert {ln.get_linestyle() for ln in refs} == {"--"}  # both still local-only's dash
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_the_title_gives_the_curves_rounds_whatever_the_references_ran(runs):
    """References ran fl.run's default 20 rounds beside curves of 4: R left the plot's
    title (the report's title said R = 4), and appeared nowhere on the plot."""
    import matplotlib.pyplot as plt

    fed = fl.load_federation("breast_cancer", clients=5, seed=0, partition="quantity:1")
    local = fl.run("local", fed, model="dt", seed=0, progress=False)
    assert local.config["rounds"] != runs["fedct"].config["rounds"]
    fig = accuracy_figure([runs["fedct"], local])
    try:
        assert fig.axes[0].get_title().startswith(
            "breast_cancer, m = 5, partition quantity:1, R = 4, participation 0.6, seed 0:")
        assert not [t for t in _legend_texts(fig) if "R = " in t]
    finally:
        plt.close(fig)


@pytest.mark.parametrize("suffix", [": 0.789 at the end", ": 0.789 at round 59",
                                    ": 0.912 (reference)", ": 0.956 (no DP)",
                                    ": 0.849 (not audited)"])
def test_a_legend_entry_is_never_broken_inside_its_value(suffix):
    """A long entry wrapped inside its value: 'fedct · ...: 0.789 at the' / '    end', and
    the privacy figures' lines without ε or VUL: 'fedavg · ...: 0.956 (no' / '    DP)'."""
    import matplotlib.pyplot as plt

    from fedlabels.reporting.plots import new_figure, place_legend

    value = suffix[2:]
    for extra in range(0, 40):
        label = "fedct · mlp(hidden=64-32,lr=0.01) " + "x" * extra + suffix
        fig, ax = new_figure()
        try:
            ax.plot([1, 2], [0.5, 0.6], label=label)
            place_legend(fig, ax)
            (text,) = _legend_texts(fig)
        finally:
            plt.close(fig)
        lines = text.split("\n")
        assert text.replace("\n    ", " ") == label  # only the breaks added
        assert any(line.strip().endswith(value) for line in lines), lines  # one line
        assert all(len(line) <= MAX_LABEL for line in lines)


def test_a_curve_below_the_majority_line_that_learnt_says_its_balanced_accuracy():
    """On a table with 9.5 % positives a class-weighted model's curve sat at accuracy 0.68,
    far below the majority-class line at 0.905, and read as learning nothing, though its
    balanced accuracy was 0.61 (chance 0.5); its entry (in fedlabels plot and the report's
    round figure) now says so, and a run that answers the commonest class does not."""
    import warnings

    from sklearn.linear_model import LogisticRegression

    from fedlabels.reporting.report import group_runs, summary_rows
    from fedlabels.reporting.report_figures import curves_figure

    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, 4))
    y = np.where(X[:, 0] + rng.normal(scale=1.0, size=1500) > 2.0, "yes", "no")
    fed = fl.make_federation(X, y, clients=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fl.RunCaveatWarning)
        weighted = fl.run("fedct", fed, model=LogisticRegression(class_weight="balanced"),
                          rounds=2, seed=0, progress=False)
        local = fl.run("local", fed, model=LogisticRegression(class_weight="balanced"),
                       seed=0, progress=False)
        plain = fl.run("fedct", fed, model="dt(max_depth=1)", rounds=2, seed=0,
                       progress=False)
    assert weighted.mean_accuracy < weighted.clinical["baseline"]["accuracy"]
    ba = weighted.clinical["metrics"]["balanced_accuracy"]["mean"]
    note = f"balanced accuracy {ba:.3f} ± "
    configs = group_runs([weighted, local, plain])
    for fig in (accuracy_figure([weighted, local, plain]),
                curves_figure(configs, summary_rows(configs))):
        try:
            texts = [" ".join(t.split()) for t in _legend_texts(fig)]
            (entry,) = [t for t in texts if t.startswith("fedct · LogisticRegression")]
            assert note in entry and "above chance 0.500: it learnt (imbalanced classes)" \
                in entry
            (ref,) = [t for t in texts if t.startswith("local")]
            assert "above chance 0.500: it learnt (imbalanced classes)" in ref
            assert not [t for t in texts if "decision_tree" in t and "it learnt" in t]
        finally:
            matplotlib.pyplot.close(fig)


def _cielab(colour: str) -> np.ndarray:
    """CIELAB (D65) of a colour, from its sRGB."""
    from matplotlib.colors import to_rgb

    c = np.array(to_rgb(colour))
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                    [0.0193, 0.1192, 0.9505]]) @ c / [0.95047, 1.0, 1.08883]
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_twenty_configurations_have_twenty_colours_and_the_first_seven_stay():
    """With 7 colours the 8th configuration took the 1st one's colour, told apart by its
    marker only. Now the first 20 have colours of their own, any two of them and the
    baselines' grey (0.45) at least 20 CIELAB units apart (a just-visible difference is
    about 2), and every configuration a (colour, marker) of its own."""
    from fedlabels.reporting.plots import MARKERS, PALETTE, style

    okabe_ito = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000"]
    assert [style(i)[0] for i in range(7)] == okabe_ito
    assert len({style(i)[0] for i in range(20)}) == 20
    n = len(PALETTE) * len(MARKERS)
    assert n >= 140 and len({style(i) for i in range(n)}) == n
    labs = [_cielab(c) for c in (*PALETTE, "0.45")]
    assert min(np.linalg.norm(a - b) for i, a in enumerate(labs) for b in labs[i + 1:]) >= 20


def _toy(method: str, seed: int, accs: list[float], rounds: int | None = None):
    """A result of two clients whose mean accuracy per round is ``accs``."""
    from fedlabels.results import RoundRecord, RunResult

    records = [RoundRecord(round=i + 1, local_steps=None, accuracies=[a - 0.05, a + 0.05],
                           server={}, bytes_up=[1, 1], bytes_down=[1, 1], seconds=0.1)
               for i, a in enumerate(accs)]
    return RunResult(method=method, dataset="toy", seed=seed,
                     config={"method": method, "rounds": rounds or len(accs), "seed": seed},
                     federation={"n_clients": 2}, models=["dt", "dt"], rounds=records,
                     communication={}, wall_seconds=1.0)


def test_a_sweep_over_seeds_is_one_line_a_configuration_with_a_band_over_seeds():
    """fedlabels plot drew every run of a sweep as a line of its own (31 curves for 31
    seeds); runs that differ only in their seed are one line, their mean, in a band from
    the lowest seed to the highest, grouped as fedlabels report groups them."""
    from fedlabels.reporting.report import group_runs

    fedct = [_toy("fedct", s, [0.5 + 0.1 * s, 0.6 + 0.1 * s]) for s in range(4)]
    longer = [_toy("fedct", s, [0.4, 0.5, 0.6], rounds=3) for s in (0, 1)]
    local = [_toy("local", s, [0.3 + 0.1 * s]) for s in range(4)]
    results = [*fedct, *longer, *local]
    assert len(group_runs(results)) == 3  # as the report counts them
    fig = accuracy_figure(results)
    ax = fig.axes[0]
    drawn = [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    curves = [ln for ln in drawn if len(ln.get_xdata()) > 1 and ln.get_linestyle() == "-"]
    assert len(curves) == 2  # the two fedct configurations, not six runs
    first = next(c for c in curves if len(c.get_xdata()) == 2)
    assert first.get_ydata().tolist() == pytest.approx([0.65, 0.75])  # the seeds' mean
    bands = [c for c in ax.collections if len(c.get_paths())]
    band = next(b for b in bands if b.get_facecolor()[0][:3].tolist()
                == pytest.approx(list(matplotlib.colors.to_rgb(first.get_color()))))
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(0.5) and ys.max() == pytest.approx(0.9)  # min–max seeds
    refs = [ln for ln in drawn if ln.get_linestyle() == "--"]
    assert len(refs) == 1 and refs[0].get_ydata()[0] == pytest.approx(0.45)  # 4 seeds' mean
    texts = _legend_texts(fig)
    assert sum("mean of 4 seeds" in t for t in texts) == 2  # fedct and local
    assert sum("mean of 2 seeds" in t and "R = 3" in t for t in texts) == 1
    assert "min–max over seeds" in ax.get_ylabel()
    assert not any("seed 0" in t for t in texts)
    matplotlib.pyplot.close(fig)


def test_plot_takes_reports_metric_names_and_refuses_all_but_accuracy(runs, tmp_path, capsys):
    """fedlabels report took --metric and plot did not (argparse: 'unrecognized arguments');
    a round records accuracy alone, so plot takes report's names and draws accuracy, and
    refuses another in one line (before reading any result) naming report --metric."""
    out = tmp_path / "a.png"
    for metric in ("balanced_accuracy", "macro_f1", "auroc"):
        assert main(["plot", str(tmp_path / "absent.json"), "--metric", metric,
                     "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--metric {metric} cannot be plotted per round" in err
        assert f"fedlabels report RESULT... -o report.html --metric {metric}" in err
        with pytest.raises(fl.FedLabelsError, match=f"metric={metric!r}"):
            fl.plot(runs["fedct"], out, metric=metric)
    with pytest.raises(SystemExit) as exited:  # argparse's choices, as report's
        main(["plot", "x.json", "--metric", "f1", "-o", str(out)])
    assert exited.value.code == 2
    assert "choose from 'accuracy', 'balanced_accuracy'" in capsys.readouterr().err
    with pytest.raises(fl.FedLabelsError, match="did you mean 'macro_f1'"):
        fl.plot(runs["fedct"], out, metric="macro_f2")
    assert not out.exists()
    saved = runs["fedct"].save(tmp_path / "r.json")
    assert main(["plot", str(saved), "--metric", "accuracy", "-o", str(out)]) == 0
    assert out.stat().st_size > 0
