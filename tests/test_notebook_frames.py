"""The Python API as a notebook uses it, on a data scientist's own pandas frames: test sets,
indexes, column names and categorical targets read as the training frame is; results that
state their guarantee; plots and reports from Python; errors that name the Python fix."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError, FedLabelsWarning


def _wards(n: int = 240, seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(seed)
    ward = rng.choice(["east", "north", "south"], n)
    X = pd.DataFrame({"ward": ward, "body mass": rng.normal(26, 4, n),
                      "site": np.repeat(["A", "B", "C"], n // 3)},
                     index=pd.RangeIndex(1000, 1000 + 3 * n, 3))
    return X, pd.Series(np.where(ward == "north", "sick", "well"), index=X.index)


def test_a_test_frame_is_one_hot_encoded_with_the_training_categories():
    X, y = _wards()
    # the test frame lacks 'east', has 'west', and lists its columns in another order: read
    # apart, its one-hot columns were north, south, west where X's are east, north, south
    Xt = pd.DataFrame({"body mass": np.linspace(20, 30, 60),
                       "ward": ["north"] * 20 + ["south"] * 20 + ["west"] * 20})
    yt = pd.Series(["sick"] * 20 + ["well"] * 40)
    with pytest.warns(FedLabelsWarning, match="'west'"):
        fed = fl.make_federation(X.drop(columns="site"), y, X_test=Xt, y_test=yt, clients=3,
                                 scale="none", seed=0)
    names = fed.feature_names
    assert names == ["body mass", "ward_east", "ward_north", "ward_south"]
    for ward in ("east", "north", "south"):
        assert np.array_equal(fed.X_test[:, names.index(f"ward_{ward}")],
                              (Xt["ward"] == ward).to_numpy(dtype=np.float32))
    assert np.allclose(fed.X_test[:, 0], Xt["body mass"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fl.run("fedct", fed, model="dt", rounds=1, seed=0)
        # the run's reported accuracy is that of its models on these rows, as predict sees them
        predicted = result.predict(Xt, client=0)
    assert result.final["client_accuracies"][0] == pytest.approx(
        float((predicted == yt.to_numpy()).mean()))


def test_a_test_frame_may_keep_the_partition_column_but_no_other_extra():
    X, y = _wards()
    Xt, yt = X.iloc[:30], y.iloc[:30]
    fed = fl.make_federation(X.iloc[30:], y.iloc[30:], X_test=Xt, y_test=yt, clients=3,
                             partition="column:site", seed=0)
    assert fed.X_test.shape == (30, len(fed.feature_names)) and "site" not in str(
        fed.feature_names)
    with pytest.raises(FedLabelsError, match=r"X_test has column.*label"):
        fl.make_federation(X.iloc[30:], y.iloc[30:], X_test=Xt.assign(target=yt), y_test=yt,
                           clients=3, partition="column:site", seed=0)
    with pytest.raises(FedLabelsError, match=r"X_test lacks column.*ward"):
        fl.make_federation(X.iloc[30:], y.iloc[30:], X_test=Xt.drop(columns="ward"),
                           y_test=yt, clients=3, partition="column:site", seed=0)


def test_a_frame_with_integer_column_names_predicts_on_itself(tmp_path):
    rng = np.random.default_rng(1)
    values = rng.normal(size=(150, 3))
    X = pd.DataFrame(values)  # columns 0, 1, 2: what pd.DataFrame(array) gives
    y = (values[:, 0] > 0).astype(int)
    fed = fl.make_federation(X, y, clients=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fl.run("fedct", fed, model="dt", rounds=1, seed=0)
    expected = result.predict(values)  # the same rows as an array, read by position
    assert np.array_equal(result.predict(X), expected)
    assert np.array_equal(result.predict(X[[2, 0, 1]]), expected)  # by name, not position
    result.save(tmp_path / "run.json")
    assert np.array_equal(fl.load_run(tmp_path / "run.json").predict(X), expected)


def test_labels_whose_index_differs_from_the_features_are_refused():
    X, y = _wards()
    X = X.drop(columns="site")
    # sorted labels (or a filter applied to y alone) no longer line up with X's rows by
    # position; pairing them by position would train on the wrong labels, silently
    with pytest.raises(FedLabelsError, match=r"different row indexes .*y\.loc\[X\.index\]"):
        fl.make_federation(X, y.sort_values(), clients=3, seed=0)
    with pytest.raises(FedLabelsError, match="X_test and y_test have different row indexes"):
        fl.make_federation(X.iloc[40:], y.iloc[40:], X_test=X.iloc[:40],
                           y_test=y.iloc[:40].reset_index(drop=True), clients=3, seed=0)
    aligned = fl.make_federation(X, y.sort_values().loc[X.index], clients=3, seed=0)
    assert np.array_equal(aligned.y_test, fl.make_federation(X, y, clients=3, seed=0).y_test)
    # arrays and equal indexes pair by position as before
    fl.make_federation(X[["body mass"]].to_numpy(), y.sort_values(), clients=3, seed=0)
    fl.make_federation(X, y.to_numpy(), clients=3, seed=0)


@pytest.mark.parametrize("data", [pd.DataFrame({"a": range(50), "b": range(50)}),
                                  np.zeros((50, 2)), pd.Series(range(50))])
def test_load_federation_of_your_own_data_points_to_make_federation(data):
    with pytest.raises(FedLabelsError) as err:
        fl.load_federation(data)
    message = str(err.value)
    assert "\n" not in message and "fl.make_federation(X, y" in message
    assert f"of shape {data.shape}" in message


def test_a_result_states_its_guarantee_in_python(tmp_path):
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = fl.run("fedct", fed, model="dt", rounds=1, seed=0)
        dp = fl.run("dp-fedct", fed, model="dt", rounds=1, seed=0,
                    options={"epsilon": 8, "mechanism": "xor"})
    assert plain.privacy["guarantee"] == "none" and plain.privacy["reason"]
    assert "ε" not in repr(plain)
    recorded = dp.to_dict()["privacy"]  # what the JSON says
    assert dp.privacy == recorded and recorded["guarantee"] == "formal"
    assert f"ε = {recorded['epsilon']:.4g}, δ = {recorded['delta']:g}, formal" in repr(dp)
    assert dp.clinical == dp.to_dict()["clinical"] and "metrics" in dp.clinical
    dp.save(tmp_path / "dp.json")
    assert fl.load_run(tmp_path / "dp.json", models=False).privacy == recorded


def test_plot_and_report_from_python_take_results_and_keep_existing_files(tmp_path):
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [fl.run(m, fed, model="dt", rounds=2, seed=0) for m in ("fedct", "local")]
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"a figure of my own")
    with pytest.raises(FedLabelsError, match=r"exists; pass overwrite=True"):
        fl.plot(runs, mine)
    assert mine.read_bytes() == b"a figure of my own"
    assert fl.plot(runs, mine, overwrite=True) == mine
    assert mine.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fl.plot(runs[0], tmp_path / "one.svg").read_text().lstrip().startswith("<?xml")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = fl.report(runs, tmp_path / "page.html")
    assert files == {"report": tmp_path / "page.html",
                     "summary table": tmp_path / "page.summary.csv"}
    summary = pd.read_csv(files["summary table"])
    assert sorted(summary["accuracy_mean"]) == pytest.approx(
        sorted(r.final["mean_accuracy"] for r in runs))
    saved = [r.save(tmp_path / f"{r.method}.json") for r in runs]  # the same from files
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fl.report(saved, tmp_path / "files.html")
    assert pd.read_csv(tmp_path / "files.summary.csv")["accuracy_mean"].tolist() == \
        summary["accuracy_mean"].tolist()
    with pytest.raises(FedLabelsError, match=r"exists; pass overwrite=True"):
        fl.report(runs, tmp_path / "page.html")
    with pytest.raises(FedLabelsError, match="did you mean 'auroc'"):
        fl.report(runs, tmp_path / "other.html", metric="auc")


def test_the_label_column_left_in_x_is_refused():
    X, y = _wards()
    y = y.rename("diagnosis")
    with pytest.raises(FedLabelsError, match=r"label column 'diagnosis'.*X\.drop"):
        fl.make_federation(X.drop(columns="site").assign(diagnosis=y), y, clients=3)
    # a column that merely shares the name, with other values, is a feature like any other
    other = pd.Series(np.where(y == "sick", "well", "sick"), index=y.index, name="ward")
    fl.make_federation(X.drop(columns="site"), other, clients=3)


def test_dp_fedcts_refusal_names_the_recommendation_as_python_takes_it():
    fed = fl.load_federation("breast_cancer", clients=5, seed=0)
    with pytest.raises(FedLabelsError, match="Choose the mechanism") as err:
        fl.run("dp-fedct", fed, model="dt", rounds=3, seed=0, options={"epsilon": 8})
    python = str(err.value).split("in Python: ")[1]
    assert "model='mlp(hidden=128)', quorum=0.8" in python
    assert "'mechanism': 'dpsgd', 'site_model': 'private', 'labeller_lr': 0.01" in python
    with warnings.catch_warnings():  # as written, it runs
        warnings.simplefilter("ignore")
        result = fl.run("dp-fedct", fed, model="mlp(hidden=128)", quorum=0.8, rounds=1, seed=0,
                        options={"epsilon": 8, "mechanism": "dpsgd", "site_model": "private",
                                 "labeller_lr": 0.01})
    assert result.privacy["guarantee"] == "formal"


@pytest.mark.parametrize("model,kept", [
    ("cnn(arch=small)", True), ("mlp(hidden=16)", True),
    ("cnn(arch=small,shape=1-8-8)", True), ("dt", False)])
def test_dp_fedcts_refusal_keeps_a_model_dp_sgd_trains(model, kept):
    # the advice was --model 'mlp(hidden=128)' whatever the user's model, replacing a CNN
    # DP-SGD trains as it is; it keeps such a model and replaces only one DP-SGD cannot train
    fed = fl.load_federation("digits", clients=3, seed=0)
    with pytest.raises(FedLabelsError, match="Choose the mechanism") as err:
        fl.run("dp-fedct", fed, model=model, rounds=3, seed=0, options={"epsilon": 1})
    message = str(err.value)
    assert ("your --model as given: DP-SGD trains it" in message) is kept
    assert ("mlp(hidden=128)" in message) is not kept
    assert ("fl.run(..., quorum=0.8)" in message) is kept


def test_dp_sgds_verdict_on_a_runs_models():
    from fedlabels.learners import build_learner, parse_model_spec
    from fedlabels.learners.dpsgd import dpsgd_fit

    def built(spec):
        return build_learner(parse_model_spec(spec)[0], n_classes=10, random_state=0)

    assert dpsgd_fit([built("cnn(arch=small)"), built("mlp(hidden=8)")]) == "yours"
    assert dpsgd_fit([built("cnn(arch=small)"), built("cnn(arch=cifar10)")]) == "no-batch-norm"
    assert dpsgd_fit([built("cnn(arch=cifar10)"), built("dt")]) == "mlp"


def test_config_adds_to_the_record_but_cannot_rewrite_what_ran():
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    with pytest.raises(FedLabelsError, match=r"'seed', 'rounds' are settings of the run"):
        fl.run("fedct", fed, model="dt", rounds=1, seed=0, config={"seed": 5, "rounds": 99})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fl.run("fedct", fed, model="dt", rounds=1, seed=0, config={"cohort": "2024"})
    assert result.config["cohort"] == "2024" and result.config["seed"] == 0


@pytest.mark.parametrize("labels", [[3, 7, 9], [True, False, True], ["benign", "malignant",
                                                                      "benign"]])
def test_a_categorical_target_predicts_its_own_labels(labels, tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=300)
    kinds = sorted(set(labels), key=str)
    raw = np.asarray([kinds[int(v > -0.4) + int(v > 0.4) if len(kinds) == 3 else int(v > 0)]
                      for v in x], dtype=object)
    y = pd.Series(pd.Categorical(raw.tolist()))
    X = pd.DataFrame({"dose": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fl.run("fedct", fl.make_federation(X, y, clients=3, seed=0), model="dt",
                        rounds=1, seed=0)
    predicted = result.predict(X)
    # the categories' own values, so that predictions compare equal to y
    assert {type(v) for v in predicted.tolist()} == {type(labels[0])}
    assert (predicted == y.to_numpy()).mean() > 0.9
    result.save(tmp_path / "run.json")
    assert np.array_equal(fl.load_run(tmp_path / "run.json").predict(X), predicted)


def test_predicting_with_a_run_read_without_its_models_says_how_to_read_them(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fl.run("fedct", "wine", clients=3, rounds=1, seed=0)
    result.save(tmp_path / "run.json")
    alone = fl.load_run(tmp_path / "run.json", models=False)
    with pytest.raises(FedLabelsError, match=r"fl\.load_run\(PATH\), not models=False"):
        alone.predict(np.zeros((1, 13)))


def test_one_row_as_a_series_gets_a_fix_that_works_on_a_series():
    X, y = _wards()
    X = X.drop(columns="site")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fl.run("fedct", fl.make_federation(X, y, clients=3, seed=0), model="dt",
                        rounds=1, seed=0)
    row = X.iloc[0]
    with pytest.raises(FedLabelsError, match=r"pandas Series .*df\.iloc\[\[i\]\]"):
        result.predict(row)
    # the fixes it names work
    assert result.predict(X.iloc[[0]]).tolist() == result.predict(row.to_frame().T).tolist()


@pytest.mark.parametrize("size", ["unlabeled", "test", "private"])
def test_a_size_too_large_names_the_python_keyword(size):
    X, y = _wards()
    with pytest.raises(FedLabelsError, match=rf"--{size} between 1 and \d+; Python: {size}=") \
            as err:
        fl.make_federation(X.drop(columns="site"), y, clients=3, **{size: 10_000})
    bound = int(str(err.value).split("between 1 and ")[1].split(";")[0])
    fl.make_federation(X.drop(columns="site"), y, clients=3, **{size: bound // 4})  # in range


def test_fedavg_on_trees_names_fedct_as_python_calls_it():
    X, y = _wards()
    fed = fl.make_federation(X.drop(columns="site"), y, clients=3, seed=0)
    with pytest.raises(FedLabelsError, match=r"fl\.run\('fedct', \.\.\.\)"):
        fl.run("fedavg", fed, model="dt", rounds=1)


def test_mean_accuracy_is_the_final_rounds_mean_and_says_when_there_is_none() -> None:
    import dataclasses

    result = fl.run("fedct", "breast_cancer", clients=3, rounds=2, model="dt", seed=0)
    accs = result.final_record.accuracies  # type: ignore[union-attr]
    assert isinstance(result.mean_accuracy, float)
    assert result.mean_accuracy == pytest.approx(float(np.mean(accs)))
    unevaluated = dataclasses.replace(result, rounds=[])
    with pytest.raises(FedLabelsError, match="no evaluated round"):
        _ = unevaluated.mean_accuracy


def test_a_one_class_private_set_names_the_python_keyword() -> None:
    with pytest.raises(FedLabelsError, match=r"Python: private="):
        fl.run("fedct", "breast_cancer", clients=3, rounds=1, unlabeled=10, private=4, seed=0)
