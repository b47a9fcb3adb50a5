"""Regression (issue 16): numeric targets, FedCT's median / trimmed-mean consensus of
quantised predictions, RMSE and R², and the errors for what does not apply."""

from __future__ import annotations

import json
import warnings
from typing import ClassVar

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import mean_squared_error, r2_score

from fedlabels.api import run
from fedlabels.cli import main
from fedlabels.comm import Message
from fedlabels.consensus_regression import (
    dequantise,
    median,
    pack_levels,
    quantise,
    trimmed_mean,
    unpack_levels,
)
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.metrics import regression_scores
from fedlabels.data import load_federation, make_federation
from fedlabels.method.base import Settings
from fedlabels.methods import get_method
from fedlabels.methods.fedct.fedct import FedCTOptions
from fedlabels.methods.fedct.regression import FedCTRegressionServer
from fedlabels.results import format_table, load_result


@pytest.fixture(scope="module")
def diabetes():
    # unequal client sizes (quantity skew: 37, 23, 18, 22, 104 examples)
    return load_federation("diabetes", clients=5, seed=0, partition="quantity:1")


@pytest.mark.parametrize("consensus", ["median", "trimmed-mean"])
def test_fedct_regression_beats_local_only(diabetes, consensus):
    local = run("local", diabetes, model="dt", rounds=3, seed=0, progress=False)
    fedct = run("fedct", diabetes, model="dt", rounds=3, seed=0, progress=False,
                options={"target_consensus": consensus, "bits": 8})
    assert len(set(diabetes.summary()["client_sizes"])) > 1
    assert fedct.final["mean_rmse"] < local.final["mean_rmse"]
    assert fedct.final["mean_r2"] > local.final["mean_r2"]
    # 8 bits per prediction on U, bit-packed: |U| bytes per client per round
    assert fedct.rounds[0].bytes_up[0] < len(diabetes.X_public) + 200


@pytest.mark.parametrize("m", [4, 5, 7])
def test_consensus_matches_numpy_and_scipy(m):
    rng = np.random.default_rng(m)
    values = rng.random((m, 33)) * rng.integers(1, 5, size=(m, 1))  # clients on unequal scales
    np.testing.assert_allclose(median(values), np.median(values, axis=0))
    for trim in (0.0, 0.1, 0.2, 0.34, 0.49):
        np.testing.assert_allclose(trimmed_mean(values, trim),
                                   stats.trim_mean(values, trim, axis=0))


def test_server_consensus_of_the_replies_that_arrived():
    """The server's broadcast is the quantised median of the (dequantised) predictions of
    the clients that replied: 3 of 5 here."""
    bits, n = 6, 40
    rng = np.random.default_rng(1)
    sent = {cid: quantise(rng.random(n), bits) for cid in (0, 2, 3)}

    class Grid:
        client_ids: ClassVar[list[int]] = [0, 2, 3]

        def exchange(self, messages, rnd):
            return {c: Message("fedct.predictions",
                               arrays={"predictions": pack_levels(sent[c], bits)})
                    for c in messages}

    settings = Settings(n_classes=0, n_clients=5, task="regression",
                        target_range=(10.0, 20.0),
                        options=FedCTOptions(bits=bits, target_consensus="median"))
    server = FedCTRegressionServer(settings, n)
    server.run_round(0, Grid())
    expected = quantise(np.median([dequantise(sent[c], bits) for c in sent], axis=0), bits)
    np.testing.assert_array_equal(server.targets, expected)
    broadcast = server.train_message(1).arrays["consensus"]
    np.testing.assert_array_equal(unpack_levels(broadcast, n, bits), expected)


@pytest.mark.parametrize("bits", [1, 3, 8, 16])
def test_quantisation_round_trip_within_half_a_step(bits):
    rng = np.random.default_rng(bits)
    x = rng.random(1001)
    levels = quantise(x, bits)
    packed = pack_levels(levels, bits)
    assert len(packed) == -(-len(x) * bits // 8)  # exactly `bits` bits per value
    back = dequantise(unpack_levels(packed, len(x), bits), bits)
    assert np.max(np.abs(back - x)) <= 0.5 / (2**bits - 1) + 1e-12
    # out of the declared range: clipped to its ends
    np.testing.assert_array_equal(dequantise(quantise(np.array([-3.0, 7.0]), bits), bits),
                                  [0.0, 1.0])


def test_rmse_and_r2_against_scikit_learn():
    rng = np.random.default_rng(0)
    y, p = rng.random(50), rng.random(50)
    lo, hi = -4.0, 11.0
    scores = regression_scores(y, p, (lo, hi))
    y_orig, p_orig = lo + (hi - lo) * y, lo + (hi - lo) * p
    assert scores["rmse"] == pytest.approx(np.sqrt(mean_squared_error(y_orig, p_orig)))
    assert scores["r2"] == pytest.approx(r2_score(y_orig, p_orig))


def test_csv_regression_from_the_cli(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 3))
    y = 3.0 * X[:, 0] - 2.0 * X[:, 1] + 0.1 * rng.normal(size=240) + 50.0
    table = tmp_path / "t.csv"
    rows = ["a,b,c,price"] + [f"{u:.5f},{v:.5f},{w:.5f},{t:.5f}"
                              for (u, v, w), t in zip(X, y, strict=True)]
    table.write_text("\n".join(rows) + "\n")
    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", f"csv:{table}:price", "--task",
                 "regression", "--target-range", "35,65", "--model", "logreg", "--rounds",
                 "2", "--clients", "4", "--output", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["federation"]["task"] == "regression"
    assert data["federation"]["target_range"] == [35.0, 65.0]
    assert data["final"]["mean_r2"] > 0.9 and data["final"]["mean_rmse"] < 2.0
    # without --task regression the numeric target is not a class label
    with pytest.raises(FedLabelsError, match="regression target"):
        load_federation(f"csv:{table}:price", clients=4)


def test_what_does_not_apply_to_regression_is_an_error(diabetes):
    for method, options in (("dp-fedct", {"epsilon": 8.0}), ("pate", {}), ("dd", {})):
        with pytest.raises(FedLabelsError, match="does not support a regression task"):
            run(method, diabetes, model="dt", rounds=1, progress=False, options=options)
    with pytest.raises(FedLabelsError, match="splits by class label"):
        load_federation("diabetes", clients=5, partition="dirichlet:0.5")
    with pytest.raises(FedLabelsError, match=r"no regression counterpart.*decision_tree"):
        run("local", diabetes, model="rulefit", rounds=1, progress=False)
    with pytest.raises(FedLabelsError, match="quorum applies to classification"):
        run("fedct", diabetes, model="dt", rounds=1, progress=False, options={"quorum": 0.6})
    with pytest.raises(FedLabelsError, match="--task applies to csv"):
        load_federation("breast_cancer", task="regression")
    with pytest.raises(FedLabelsError, match="regression task only"):
        run("fedct", "breast_cancer", model="dt", rounds=1, progress=False,
            options={"bits": 4})
    with pytest.raises(FedLabelsError, match="target_trim applies only"):
        get_method("fedct").validate(5, Settings(n_classes=0, task="regression", options=(
            FedCTOptions(target_trim=0.1))), [])
    from fedlabels.audit import audit_federation

    with pytest.raises(FedLabelsError, match="regression task, which it does not cover"):
        audit_federation("fedct", diabetes, ["dt"], rounds=1, progress=False)


def test_fedavg_mlp_regression_and_result_round_trip(tmp_path):
    X = np.random.default_rng(0).normal(size=(300, 4))
    fed = make_federation(X, X @ [1.0, -2.0, 0.5, 0.0], clients=3, unlabeled=60,
                          task="regression", seed=0)
    res = run("fedavg", fed, model="mlp(hidden=16,lr=0.01)", rounds=4, period=25, seed=0,
              progress=False)
    assert res.final["mean_r2"] > 0.9
    path = res.save_json(tmp_path / "r.json")
    back = load_result(path)
    assert back.final == res.final  # JSON keeps floats exactly
    assert back.rounds[-1].rmse == res.rounds[-1].rmse and back.rounds[0].accuracies is None
    row = back.summary_row()
    assert row["mean_rmse"] == pytest.approx(res.final["mean_rmse"]) and row["mean_acc"] is None
    assert "RMSE" in format_table([row])


@pytest.mark.parametrize("method, model", [("fedct", "dt"), ("fedavg", "mlp(hidden=8)")])
def test_every_value_a_regression_client_sends_is_declared(method, model, monkeypatch):
    import fedlabels.engines.inprocess as inprocess

    log: list[Message] = []

    class Recording(inprocess.InProcessGrid):
        def exchange(self, messages, rnd):
            replies = super().exchange(messages, rnd)
            log.extend(replies.values())
            return replies

    monkeypatch.setattr(inprocess, "InProcessGrid", Recording)
    X = np.random.default_rng(0).normal(size=(80, 3))
    fed = make_federation(X, X[:, 0], clients=3, unlabeled=20, task="regression")
    run(method, fed, model=model, rounds=2, period=5, progress=False)
    threat = get_method(method).threat_model
    sent = {(r.kind, source, key) for r in log if r.category != "control"
            for source, keys in (("arrays", r.arrays), ("config", r.config)) for key in keys}
    assert ("evaluate.reply", "config", "rmse") in sent
    assert all(threat.payload(kind, key, source) is not None for kind, source, key in sent)


def test_a_declared_range_must_hold_every_target():
    """FedCT clips its releases to the declared range: a target outside it was learnt wrongly
    without a word (R² 0.19 instead of 0.41 on a make_regression table with range 0,10)."""
    X = np.random.default_rng(0).normal(size=(200, 3))
    y = X @ [10.0, -5.0, 2.0]
    with pytest.raises(FedLabelsError, match=r"lie outside the declared target range \[0, 10\]"):
        make_federation(X, y, clients=3, unlabeled=50, task="regression", target_range=(0, 10))
    y_test = np.full(20, y.max() + 1.0)  # the test rows count too
    with pytest.raises(FedLabelsError, match="20 of 220 targets lie outside"):
        make_federation(X, y, X_test=X[:20], y_test=y_test, clients=3, unlabeled=50,
                        task="regression", target_range=(y.min(), y.max()))
    fed = make_federation(X, y, clients=3, unlabeled=50, task="regression",
                          target_range=(y.min(), y.max()))
    assert fed.info["target_range_source"] == "declared"


def test_a_target_range_is_typed_as_each_form_it_takes():
    """target_range was typed Any: make_federation, load_federation and the recorded settings
    name TargetRangeLike (fl.run's keywords too, checked by mypy), and each form it names is
    one range."""
    from typing import get_type_hints

    from fedlabels.data.loaded_with import loaded_with
    from fedlabels.data.loading import load_federation
    from fedlabels.data.targets import TargetRangeLike

    for function in (make_federation, load_federation, loaded_with):
        assert get_type_hints(function)["target_range"] == TargetRangeLike, function
    X = np.random.default_rng(0).normal(size=(120, 3))
    y = np.clip(X @ [3.0, -1.0, 1.0], -9.5, 9.5)
    forms = ["-10,10", [-10, 10], (-10.0, 10.0), np.array([-10, 10]),
             (np.float32(-10), np.int64(10))]
    for form in forms:
        fed = make_federation(X, y, clients=3, unlabeled=40, task="regression",
                              target_range=form)
        assert fed.target_range == (-10.0, 10.0), form
        assert fed.info["target_range"] == [-10.0, 10.0]


def test_a_range_taken_from_the_data_is_said_once_per_run(tmp_path, capsys):
    """Without --target-range the range is the table's smallest and largest target, public
    to every party: a run said nothing of it (only the result's target_range_source did)."""
    from fedlabels.core.errors import FedLabelsWarning, RunCaveatWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X @ [10.0, -5.0, 2.0]
    table = make_federation(X, y, clients=3, unlabeled=50, task="regression", seed=0)
    lo, hi = table.info["target_range"]
    assert (lo, hi) == (y.min(), y.max())
    with pytest.warns(RunCaveatWarning) as caught:
        run("local", table, model="logreg", rounds=1, seed=0, progress=False)
    said = [str(w.message) for w in caught if "target range" in str(w.message)]
    assert said == [f"the target range [{lo:g}, {hi:g}] was taken from the data (its smallest "
                    "and largest target, test rows included) and is shared with every party, "
                    "so it discloses those two targets; declare a documented range with "
                    "--target-range LO,HI (Python: target_range=(LO, HI))"]
    declared = make_federation(X, y, clients=3, unlabeled=50, task="regression", seed=0,
                               target_range=(-100, 100))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FedLabelsWarning)
        run("local", declared, model="logreg", rounds=1, seed=0, progress=False)
    csv = tmp_path / "t.csv"  # the CLI prints it once, under the run
    rows = np.column_stack([X, y])
    csv.write_text("a,b,c,y\n" + "".join(",".join(map(repr, r)) + "\n" for r in rows.tolist()))
    args = ["run", "--dataset", f"csv:{csv}:y", "--task", "regression", "--method", "local",
            "--model", "logreg", "--rounds", "1", "--no-progress", "--output",
            str(tmp_path / "r.json")]
    assert main(args) == 0
    assert capsys.readouterr().err.count("was taken from the data") == 1
    assert main([*args, "--target-range=-100,100", "--overwrite"]) == 0
    assert "was taken from the data" not in capsys.readouterr().err


def test_constant_and_overflowing_targets_are_refused():
    X = np.random.default_rng(0).normal(size=(200, 3))
    # a declared range made a constant target pass; its R² came out as -2e26 (float noise)
    with pytest.raises(FedLabelsError, match="every target equals 7"):
        make_federation(X, np.full(200, 7.0), clients=3, unlabeled=50, task="regression",
                        target_range=(0, 10))
    # hi - lo overflowed to inf: every unit target became 0 or NaN
    y = np.random.default_rng(1).uniform(-1.0, 1.0, 200) * 1.5e308
    with pytest.raises(FedLabelsError, match="wider than a float64 can hold"):
        make_federation(X, y, clients=3, unlabeled=50, task="regression")


def test_predict_gives_targets_in_their_units(tmp_path):
    """Predicting with a regression run's models was refused ("not supported yet")."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = 30.0 * X[:, 0] - 20.0 * X[:, 1] + rng.normal(size=300) + 500.0
    fed = make_federation(X[:240], y[:240], X_test=X[240:], y_test=y[240:], clients=3,
                          unlabeled=60, task="regression", seed=0)
    result = run("fedct", fed, model="logreg", rounds=2, seed=0, progress=False)
    final = result.final
    per_client = [result.predict(X[240:], client=k) for k in range(3)]
    for k, pred in enumerate(per_client):  # the reported test scores, by scikit-learn
        assert np.sqrt(mean_squared_error(y[240:], pred)) == pytest.approx(
            final["client_rmse"][k], rel=1e-6)
        assert r2_score(y[240:], pred) == pytest.approx(final["client_r2"][k], rel=1e-6)
    np.testing.assert_allclose(result.predict(X[240:]), np.median(per_client, axis=0))
    # from the files the CLI writes: the models file keeps the target range
    table = tmp_path / "t.csv"
    table.write_text("a,b,c,y\n" + "".join(f"{u},{v},{w},{t}\n" for (u, v, w), t
                                            in zip(X, y, strict=True)))
    out, preds = tmp_path / "r.json", tmp_path / "p.csv"
    assert main(["run", "--method", "fedct", "--dataset", f"csv:{table}:y", "--task",
                 "regression", "--model", "logreg", "--rounds", "2", "--clients", "3",
                 "--output", str(out), "--no-progress"]) == 0
    assert main(["predict", str(out), str(table), "-o", str(preds)]) == 0
    import pandas as pd

    frame = pd.read_csv(preds)
    assert r2_score(frame["y"], frame["prediction"]) > 0.99
    assert np.sqrt(mean_squared_error(frame["y"], frame["prediction"])) < 3.0


def test_inspect_a_linear_regressor_in_the_targets_units():
    """`fedlabels inspect` of a regression run with logreg (Ridge) crashed: AttributeError
    'Ridge' object has no attribute 'classes_'."""
    from sklearn.base import clone

    from fedlabels.reporting.inspect import inspect_models

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = 40.0 * X[:, 0] - 7.0 * X[:, 2] + rng.normal(size=200) + 300.0
    fed = make_federation(X, y, clients=3, unlabeled=50, task="regression", seed=0)
    result = run("centralized", fed, model="logreg", rounds=1, seed=0, progress=False)
    [desc] = inspect_models(result)
    # ridge is equivariant under the affine map of the target: refit on original units
    pooled = fed.pooled()
    lo, hi = fed.target_range
    oracle = clone(result.client_models[0]).fit(pooled.X, lo + (hi - lo) * pooled.y)
    shown = dict(desc["coefficients"]["target"])
    for name, coef in zip(fed.feature_names, oracle.coef_, strict=True):
        assert shown.get(name, 0.0) == pytest.approx(coef, rel=1e-4, abs=1e-6)
    assert desc["intercept"] == pytest.approx(oracle.intercept_, rel=1e-6)
    assert "target's units" in desc["text"]


def test_a_numeric_target_read_as_classes_says_what_to_do():
    """An integer quantity (a rounded price) became hundreds of classes without a word from
    fedlabels; a float target's error did not say how to run it as regression."""
    from fedlabels.core.errors import FedLabelsWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    price = np.round(100.0 * X[:, 0] + 500.0).astype(np.int64)
    with pytest.warns(FedLabelsWarning, match="integer classes for 400 rows.*--task regression"
                      ), pytest.raises(FedLabelsError, match="occur in no client's rows"):
        make_federation(X, price, clients=3, unlabeled=80)  # a price no client holds
    with pytest.raises(FedLabelsError, match="use --task regression"):
        make_federation(X, price + 0.5, clients=3, unlabeled=80)
    few = np.arange(400) % 25  # 25 classes of 16 rows: a class label, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", FedLabelsWarning)
        make_federation(X, few, clients=3, unlabeled=80)


def test_a_classification_metric_is_refused_before_a_regression_run(tmp_path, capsys):
    """--metric macro_f1 on diabetes ran the whole run, then warned that it did not apply."""
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", "diabetes", "--metric", "macro_f1", "--rounds", "1",
                 "--output", str(out), "--no-progress"]) == 2
    assert "--metric macro_f1 applies to classification" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_plot_and_report_refuse_a_mix_of_tasks(tmp_path, diabetes):
    """A regression and a classification run in one plot drew RMSE (76) on the axis
    'mean client test accuracy'; the report page did the same."""
    from fedlabels.reporting.plots import plot_accuracy
    from fedlabels.reporting.report import write_report

    reg = run("local", diabetes, model="dt", rounds=1, seed=0, progress=False)
    cls = run("local", "breast_cancer", model="dt", rounds=1, seed=0, clients=3,
              progress=False)
    paths = [reg.save_json(tmp_path / "reg.json"), cls.save_json(tmp_path / "cls.json")]
    results = [load_result(p) for p in paths]
    with pytest.raises(FedLabelsError, match="mix regression runs"):
        plot_accuracy(results, tmp_path / "mix.png")
    with pytest.raises(FedLabelsError, match="mix regression runs"):
        write_report(paths, tmp_path / "rep")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cls.json", "reg.json"]
    plot_accuracy(results[:1], tmp_path / "reg.png")  # one task: as before


def test_a_declared_range_far_wider_than_the_targets_is_warned_of():
    """With --target-range -1e5,1e5 on targets spanning ±500 every 8-bit release rounded to
    one of two levels and FedCT's RMSE rose from 4.6 to 105 without a word."""
    from fedlabels.core.errors import FedLabelsWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X @ [100.0, -50.0, 20.0]
    wide = make_federation(X, y, clients=3, unlabeled=50, task="regression", seed=0,
                           target_range=(-1e5, 1e5))
    with pytest.warns(FedLabelsWarning, match=r"one level .* is 784\.3 of the target's units"):
        run("fedct", wide, model="logreg", rounds=1, seed=0, progress=False)
    tight = make_federation(X, y, clients=3, unlabeled=50, task="regression", seed=0,
                            target_range=(y.min(), y.max()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FedLabelsWarning)
        run("fedct", tight, model="logreg", rounds=1, seed=0, progress=False)
        run("fedct", wide, model="logreg", rounds=1, seed=0, progress=False,
            options={"bits": 16})  # a level of 3.05 units: fine


def test_inspect_a_regression_tree_shows_leaves_in_the_targets_units():
    """A regression tree was 'no built-in interpretation'; its leaves are now printed in
    the target's units, equal to scikit-learn's tree fitted on the original targets."""
    import re

    from sklearn.base import clone

    from fedlabels.reporting.inspect import inspect_models

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = 40.0 * (X[:, 0] > 0) - 7.0 * X[:, 2] + 300.0
    fed = make_federation(X, y, clients=3, unlabeled=50, task="regression", seed=0)
    result = run("centralized", fed, model="dt(max_depth=2)", rounds=1, seed=0, progress=False)
    [desc] = inspect_models(result)
    shown = sorted(float(v) for v in re.findall(r"value: (\S+)", desc["text"]))
    pooled = fed.pooled()
    lo, hi = fed.target_range
    oracle = clone(result.client_models[0]).fit(pooled.X, lo + (hi - lo) * pooled.y).tree_
    leaves = sorted(oracle.value[oracle.children_left == -1].ravel())
    assert desc["kind"] == "decision_tree" and len(shown) == len(leaves) == 4
    np.testing.assert_allclose(shown, leaves, rtol=1e-5)


def test_report_refuses_a_classification_metric_on_regression_runs(tmp_path, diabetes):
    """`fedlabels report --metric auroc` on regression results was accepted and ignored."""
    from fedlabels.reporting.report import write_report

    path = run("local", diabetes, model="dt", rounds=1, seed=0,
               progress=False).save_json(tmp_path / "reg.json")
    with pytest.raises(FedLabelsError, match="--metric auroc applies to classification"):
        write_report([path], tmp_path / "rep", metric="auroc")
    assert [p.name for p in tmp_path.iterdir()] == ["reg.json"]


@pytest.mark.parametrize("given", [[35, 65], (35.0, 65.0), "35,65"])
def test_a_target_range_is_a_pair_or_text_in_a_config(given) -> None:
    """TOML writes ``target_range = [35, 65]`` and Python ``(35.0, 65.0)``, as for
    ``image_size``; both used to be refused with "target_range must be a str"."""
    from fedlabels.runs.config import RunConfig

    cfg = RunConfig.from_mapping({"method": "fedct", "dataset": "diabetes",
                                  "task": "regression", "target_range": given})
    assert tuple(float(v) for v in cfg.target_range.split(",")) == (35.0, 65.0)
    with pytest.raises(FedLabelsError, match="target range needs finite LO < HI"):
        RunConfig.from_mapping({"method": "fedct", "dataset": "diabetes",
                                "task": "regression", "target_range": [65, 35]})
