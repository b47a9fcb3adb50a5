"""The Python API behaves like scikit-learn: labels come back as the type of ``y``, wrong
shapes and types are one-line ``FedLabelsError``s, results are not silently overwritten, and
``repr`` is short and never shows U's hidden labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import accuracy_score
from sklearn.tree import DecisionTreeClassifier

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    return X, y


def _federation(X, y, **kw):
    # unequal clients: a power-law split of the private data
    return fl.make_federation(X, y, clients=4, unlabeled=200, partition="powerlaw:1.5",
                              seed=0, **kw)


def _vote(result, X):
    """Independent oracle: the majority of the clients' models on the scaled rows."""
    prep = result.preprocessing
    Z = ((X - prep.mean) / prep.std).astype(np.float32)
    votes = np.stack([np.asarray(m.predict(Z), dtype=int) for m in result.client_models])
    n = len(prep.class_names)
    return np.array([np.bincount(col, minlength=n).argmax() for col in votes.T])


@pytest.mark.parametrize("labels", [np.array([3, 7]), np.array(["benign", "malignant"]),
                                    np.array([-1.0, 1.0]), np.array([False, True])])
def test_predict_returns_labels_of_the_type_of_y(data, labels):
    X, y01 = data
    y = labels[y01]
    fed = _federation(X, y)
    assert [len(c) for c in fed.clients] != [len(fed.clients[0])] * 4  # unequal clients
    r = fl.run("fedct", fed, model="dt", rounds=2, progress=False)
    pred = r.predict(X)
    assert pred.dtype.kind == y.dtype.kind
    assert set(np.unique(pred)) <= set(labels.tolist())
    np.testing.assert_array_equal(pred, labels[_vote(r, X)])
    # scikit-learn's metrics take them as they are, and agree with a plain comparison
    assert accuracy_score(y, pred) == pytest.approx((pred == y).mean())
    assert (pred == y).mean() > 0.8


def test_predict_of_a_pandas_series_target_keeps_ints(data):
    X, y = data
    frame = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    r = fl.run("fedct", _federation(frame, pd.Series(y + 1)), model="dt", rounds=1,
               progress=False)
    pred = r.predict(frame.iloc[:20])
    assert pred.dtype.kind == "i" and set(pred) <= {1, 2}


@pytest.fixture(scope="module")
def result(data):
    X, y = data
    return fl.run("fedct", _federation(X, y), model="dt", rounds=1, progress=False)


@pytest.fixture(scope="module")
def frame_result(data):
    X, y = data
    frame = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    return fl.run("fedct", _federation(frame, y), model="dt", rounds=1, progress=False)


@pytest.mark.parametrize("rows, needle", [
    (lambda X: X[:, :5], "30 feature columns"),
    (lambda X: X[0], "X.reshape(1, -1)"),
    (lambda X: X[:0], "no rows"),
    (lambda X: X[:3, :, None], "2-D"),
])
@pytest.mark.parametrize("which", ["result", "frame_result"])
def test_bad_predict_input_is_one_line(data, request, which, rows, needle):
    r = request.getfixturevalue(which)
    with pytest.raises(FedLabelsError) as err:
        r.predict(rows(data[0]))
    assert type(err.value) is FedLabelsError and needle in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("client", [True, 1.0, "1"])
def test_a_client_that_is_no_index_is_one_line(data, result, client):
    # True predicted with client 1, 1.0 and "1" were TypeErrors from inside the vote
    with pytest.raises(FedLabelsError, match="client must be a client's index") as err:
        result.predict(data[0][:5], client=client)
    assert "\n" not in str(err.value)
    with pytest.raises(FedLabelsError, match="client must be a client's index"):
        fl.inspect_models(result, client=client)


def test_a_numpy_client_index_is_that_client(data, result):
    X = data[0][:40]
    oracle = result.client_models[1].predict(
        ((X - result.preprocessing.mean) / result.preprocessing.std).astype(np.float32))
    np.testing.assert_array_equal(result.predict(X, client=np.int64(1)), oracle)
    assert fl.inspect_models(result, client=np.int64(1))[0]["client"] == 1


@pytest.mark.parametrize("watch, needle", [({"on_round": 3}, "on_round must be a function"),
                                            ({"on_round": lambda: None},
                                             r"on_round is called with each round's record, "
                                             r"one argument; <lambda> cannot take it"),
                                            ({"on_round": lambda rec, total: None},
                                             "cannot take it"),
                                            ({"progress": "no"}, "progress must be True")])
def test_progress_and_on_round_are_checked_before_anything_trains(data, monkeypatch, watch,
                                                                   needle):
    # on_round=3 (and a function of no argument) was a TypeError after round 1 had
    # trained; progress="no" showed progress
    import fedlabels.api

    def no_run(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(fedlabels.api, "simulate", no_run)
    fed = _federation(*data)
    with pytest.raises(FedLabelsError, match=needle):
        fl.run("fedct", fed, rounds=1, **watch)
    if "progress" in watch:
        for call in (lambda: fl.run_config(fl.RunConfig(rounds=1), **watch),
                     lambda: fl.resume("nowhere.json", **watch)):
            with pytest.raises(FedLabelsError, match=needle):
                call()


@pytest.mark.parametrize("given", ["run.toml", {"method": "fedct", "rounds": 1}])
def test_run_config_of_a_path_or_dict_says_how_to_make_a_config(given):
    # it was AttributeError: 'str' object has no attribute 'output'
    with pytest.raises(FedLabelsError,
                       match=r"fl.load_config\(.*fl.RunConfig.from_mapping\(settings"):
        fl.run_config(given)
    # the call it names checks a dict's keys as a TOML file's (RunConfig(**settings) gave a
    # TypeError without a suggestion)
    with pytest.raises(FedLabelsError, match="did you mean 'rounds'"):
        fl.RunConfig.from_mapping({"method": "fedct", "roundz": 1})


def test_run_without_a_federation_says_how_to_build_one(data):
    X, _ = data
    with pytest.raises(FedLabelsError, match="make_federation"):
        fl.run("fedct", X)


def test_a_federation_where_a_name_goes_is_one_line_naming_the_call_that_runs_it(data):
    """fl.run(fed, "fedct") and fl.RunConfig(dataset=fed) said only "method (dataset) must
    be a str, got Federation(...)"."""
    X, y = data
    fed = fl.make_federation(X[:200], y[:200], clients=2, unlabeled=50, seed=0)
    cases = [(lambda: fl.run(fed, "fedct"), r"takes the method first.*"
              r"fl.run\('fedct', federation\), not fl.run\(federation, 'fedct'\)"),
             (lambda: fl.run(fed, "breast_cancer"), r"first argument is a method's name.*, got "
              r"a Federation: fl.run\(method, federation\)"),
             (lambda: fl.run(X, y), r"first argument is a method's name.*, got ndarray"),
             (lambda: fl.RunConfig(dataset=fed), r"dataset is a dataset's name, got a "
              r"Federation: run a Federation with fl.run\(method, federation\)"),
             (lambda: fl.RunConfig(method=fed), r"method is a method's name, got a "
              r"Federation: run a Federation with fl.run\(method, federation\)"),
             (lambda: fl.RunConfig(dataset=pd.DataFrame(X)), r"got a DataFrame of shape "
              r"\(569, 30\).*fl.make_federation\(X, y"),
             (lambda: fl.load_federation(fed), r"got a Federation, which is loaded already: "
              r"run it with fl.run\(method, federation\)")]
    for call, needle in cases:
        with pytest.raises(FedLabelsError, match=needle) as info:
            call()
        assert "\n" not in str(info.value) and "Federation(" not in str(info.value)


def test_duplicated_columns_are_named(data):
    X, y = data
    frame = pd.DataFrame(X[:, :3], columns=["radius", "radius", "texture"])
    with pytest.raises(FedLabelsError, match=r"duplicated column name.*'radius'"):
        fl.make_federation(frame, y, clients=3, unlabeled=100)


def test_a_model_class_is_refused_with_the_instance_to_pass(breast_cancer_fed):
    with pytest.raises(FedLabelsError, match=r"is a class; pass an instance.*"
                                             r"DecisionTreeClassifier\(\)"):
        fl.run("fedct", breast_cancer_fed, model=DecisionTreeClassifier, rounds=1)


def test_inputs_that_trained_something_else_than_meant_are_refused_or_warned(data):
    """From a walk with one's own data: missing categories trained as no category (and then
    predict refused the same rows), labels 1 and 'a' came back as '1', complex features
    lost their imaginary part, 'yes' / 'YES' / 'yes ' were separate classes silently."""
    X, y = data
    frame = pd.DataFrame({"ward": np.where(y == 1, "a", None), "x": X[:, 0]})
    with pytest.raises(FedLabelsError, match=r"missing values in categorical column\(s\) "
                                             r"'ward' \(\d+ rows\)"):
        fl.make_federation(frame, y, clients=3, unlabeled=100)
    mixed = np.array([1 if v == 1 else "a" for v in y], dtype=object)
    with pytest.raises(FedLabelsError, match=r"mixes label types: .* and .*same type"):
        fl.make_federation(X, mixed, clients=3, unlabeled=100)
    with pytest.raises(FedLabelsError, match="is complex"):
        fl.make_federation(X + 1j, y, clients=3, unlabeled=100)
    messy = np.where(y == 1, "yes", "no").astype(object)
    messy[::7] = "YES "
    with pytest.warns(fl.FedLabelsWarning, match=r"differ only in case or spaces \('YES ', "
                                                 r"'yes'\)"):
        fl.make_federation(X, messy, clients=3, unlabeled=100)


def test_a_two_column_y_says_so(data):
    X, y = data
    with pytest.raises(FedLabelsError, match=r"one label per row.*\(569, 2\)"):
        fl.make_federation(X, np.c_[y, y], clients=3, unlabeled=100)


def test_callables_that_take_the_record_are_taken_as_on_round(data):
    seen: list[int] = []

    def note(record, extra=None):  # a default after the record is fine
        seen.append(record.round)

    fl.run("fedct", _federation(*data), model="dt", rounds=2, progress=False, on_round=note)
    fl.run("fedct", _federation(*data), model="dt", rounds=1, progress=False,
           on_round=lambda *records: seen.append(len(records)))
    assert seen == [1, 2, 1]


def test_a_json_saved_alone_says_how_to_save_or_read_it_from_python(result, tmp_path):
    """load_run of result.save_json's file said only that `fedlabels run` writes the
    models; from Python it is result.save, or models=False to read the JSON alone."""
    path = result.save_json(tmp_path / "run.json")
    with pytest.raises(FedLabelsError, match=r"result.save\(path\) write them .*"
                                             r"fl.load_run\(path, models=False\)"):
        fl.load_run(path)
    assert fl.load_run(path, models=False).to_frame().equals(result.to_frame())


def test_save_json_refuses_to_overwrite_a_wrong_suffix_and_a_directory(result, tmp_path):
    path = tmp_path / "run.json"
    assert result.save_json(path) == path
    before = path.read_bytes()
    with pytest.raises(FedLabelsError, match="exists; pass overwrite=True"):
        result.save_json(path)
    assert path.read_bytes() == before
    assert json.loads(result.save_json(path, overwrite=True).read_text())["method"] == "fedct"
    with pytest.raises(FedLabelsError, match=r"ending in \.json"):
        result.save_json(tmp_path / "run.csv")
    assert not (tmp_path / "run.csv").exists()
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(FedLabelsError, match="is a directory") as err:
        result.save_json(tmp_path / "dir.json")
    assert ".tmp" not in str(err.value)  # no temporary file's name
    result.save_csv(tmp_path / "run.csv")
    with pytest.raises(FedLabelsError, match="exists"):
        result.save_csv(tmp_path / "run.csv")
    with pytest.raises(FedLabelsError, match=r"ending in \.csv"):
        result.save_csv(tmp_path / "rounds.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.json", "run.csv", "run.json"]


def test_saving_never_writes_over_the_runs_own_table(tmp_path, monkeypatch):
    """``save``, ``save_json`` and ``save_csv`` refused the CLI's rule: a run on
    ``csv:data.rounds.csv:label`` saved as ``data.json`` replaced the user's table with its
    rounds table (and ``save_csv("data.csv", overwrite=True)`` the table itself)."""

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.normal(size=(60, 3)), columns=list("abc"))
    table["label"] = (table["a"] > 0).astype(int)
    for name in ("data.rounds.csv", "data.csv"):
        table.to_csv(name, index=False)
    before = {name: Path(name).read_bytes() for name in ("data.rounds.csv", "data.csv")}
    on_rounds = fl.run("fedct", "csv:data.rounds.csv:label", clients=3, rounds=1,
                       progress=False)
    with pytest.raises(FedLabelsError, match="that is the dataset file, not an output"):
        on_rounds.save("data.json", overwrite=True)
    on_table = fl.run("fedct", "csv:data.csv:label", clients=3, rounds=1, progress=False)
    for save in (on_table.save_csv, on_table.save_json):
        with pytest.raises(FedLabelsError, match="that is the dataset file, not an output"):
            save("./data.csv", overwrite=True)
    assert {name: Path(name).read_bytes() for name in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "data.rounds.csv"]
    with pytest.raises(FedLabelsError, match="not a directory"):
        on_table.save(".")


def test_save_writes_what_predict_and_inspect_read(data, result, tmp_path):
    from fedlabels.results.predict import predict_file

    X, _ = data
    path = result.save(tmp_path / "run.json")
    assert {p.name for p in tmp_path.iterdir()} == {"run.json", "run.rounds.csv",
                                                    "run.models.npz"}
    described = fl.inspect_models(path)
    assert [d["client"] for d in described] == [0, 1, 2, 3]
    table = tmp_path / "new.csv"
    pd.DataFrame(X[:30]).to_csv(table, index=False)
    out = predict_file(path, table)
    np.testing.assert_array_equal(out["prediction"].to_numpy(), result.predict(X[:30]))
    with pytest.raises(FedLabelsError, match="overwrite=True"):
        result.save(tmp_path / "run.json")
    with pytest.raises(FedLabelsError, match=r"ending in \.json"):
        result.save(tmp_path / "run.csv")


def test_repr_is_short_and_hides_the_labels_of_u(data, result):
    X, y = data
    fed = _federation(X, y)
    text = repr(fed)
    assert len(text) < 200 and "array" not in text and "y_public" not in text
    assert "4 clients" in text and "|U| = 200" in text
    text = repr(result)
    assert len(text) < 200 and "array" not in text and "fedct" in text
    assert f"{result.final['mean_accuracy']:.4f}" in text


def test_a_clients_repr_is_its_sizes_and_one_is_not_plural(data):
    """``fed.clients`` in a notebook showed every client's arrays (the dataclass's repr);
    a one-client federation and a one-round run read "1 clients", "1 rounds"."""
    X, y = data
    fed = fl.make_federation(X, y, clients=1, seed=0)
    assert repr(fed.clients) == f"[ClientData({len(fed.clients[0])} rows, 30 features)]"
    assert "1 client of [" in repr(fed)
    one = fl.run("local", fed, model="dt", rounds=1, progress=False)
    assert ", 1 round, " in repr(one)


def test_a_federation_or_a_sparse_matrix_as_rows_is_one_line_naming_the_fix(
        data, result, frame_result):
    """make_federation(fed, y) said "X must be numeric; could not convert it to floats
    (float() argument must be ... not 'Federation')", a sparse X "(setting an array element
    with a sequence.)", and result.predict of either "got shape ()"."""
    from scipy import sparse

    X, y = data
    fed = _federation(X, y)
    rows = sparse.csr_matrix(X[:5])
    cases = [(lambda: fl.make_federation(fed, y), r"X is already a Federation \(Federation\("
              r".*fl.run\(method, federation\)"),
             (lambda: fl.make_federation(rows, y[:5]), r"X is a scipy sparse matrix.*"
              r"X.toarray\(\)"),
             (lambda: fl.make_federation(X, y, X_test=rows, y_test=y[:5]),
              r"X_test is a scipy sparse matrix.*X_test.toarray\(\)"),
             (lambda: result.predict(rows), r"scipy sparse matrix; pass dense rows"),
             (lambda: result.predict(fed), r"the data is a Federation; predict takes raw rows"),
             (lambda: frame_result.predict(rows), r"scipy sparse matrix; pass dense rows")]
    for call, needle in cases:
        with pytest.raises(FedLabelsError, match=needle) as info:
            call()
        assert "\n" not in str(info.value)
    assert np.array_equal(result.predict(rows.toarray()), result.predict(X[:5]))


def test_n_features_in_and_feature_names_in_are_the_raw_columns_as_scikit_learns(
        data, result, tmp_path):
    """A result has predict, predict_proba, score and classes_ as an estimator, but had no
    n_features_in_ or feature_names_in_; they count and name the raw columns predict takes,
    as scikit-learn's estimator fitted on the same input does (the oracle)."""
    from sklearn.dummy import DummyClassifier

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"dose": rng.normal(size=300), "ward": rng.choice(["a", "b"], 300),
                          "site": rng.choice(["s1", "s2", "s3"], 300)})
    y = (frame.dose > 0).astype(int)
    r = fl.run("fedct", fl.make_federation(frame, y, clients=3, partition="column:site",
                                           seed=0), model="dt", rounds=1, progress=False)
    oracle = DummyClassifier().fit(frame.drop(columns="site"), y)  # site picks the client
    assert list(r.feature_names_in_) == list(oracle.feature_names_in_) == ["dose", "ward"]
    assert r.n_features_in_ == oracle.n_features_in_ == 2
    X, y01 = data
    on_array = DummyClassifier().fit(X, y01)
    assert result.n_features_in_ == on_array.n_features_in_ == 30
    assert not hasattr(result, "feature_names_in_") and not hasattr(on_array,
                                                                     "feature_names_in_")
    path = r.save(tmp_path / "run.json")
    assert list(fl.load_run(path).feature_names_in_) == ["dose", "ward"]
    assert not hasattr(fl.load_run(path, models=False), "n_features_in_")


@pytest.mark.parametrize("categorical", [False, True])
def test_a_gap_in_a_category_names_the_pandas_line_that_fills_it(data, categorical):
    """The refusal said 'impute or drop them first (or give them a category of their own)',
    whose obvious line, fillna('unknown'), raises TypeError on a pandas Categorical; and
    --missing public-median, which the numeric gaps' message names, does not fill it."""
    X, y = data
    ward = pd.Series(np.where(np.arange(len(y)) % 7 == 0, None, np.where(y == 1, "a", "b")))
    frame = pd.DataFrame({"ward": ward.astype("category") if categorical else ward,
                          "x": X[:, 0]})
    with pytest.raises(FedLabelsError) as refused:
        fl.make_federation(frame, y, clients=3, unlabeled=100, missing="public-median")
    said = str(refused.value)
    assert "--missing public-median does not fill" in said
    line = said.split("(pandas: ")[1].split(") or drop")[0]  # the line, run as given
    assert line.startswith("X['ward'] = X['ward']")
    scope = {"X": frame.copy()}  # the name the line uses
    exec(line, {}, scope)
    fed = fl.make_federation(scope["X"], y, clients=3, unlabeled=100)
    assert "ward_unknown" in fed.feature_names


def test_new_rows_the_models_cannot_read_are_named_by_column():
    """A missing category would encode as an unknown one (all zeros) and a text value in a
    numeric column would fail deep in numpy: both are one line naming the column."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"dose": rng.normal(size=400), "ward": rng.choice(["a", "b"], 400)})
    r = fl.run("fedct", _federation(frame, (frame.dose > 0).astype(int)), model="dt",
               rounds=1, progress=False)
    new = frame.iloc[:4].copy()
    new.loc[1, "ward"] = None
    with pytest.raises(FedLabelsError, match=r"missing values in categorical column\(s\) "
                                             r"'ward' \(1\); impute or drop them"):
        r.predict(new)
    with pytest.raises(FedLabelsError, match=r"^the data column 'dose' holds 'n/a' in data "
                                             r"row 2, not a number; write the features"):
        r.predict(frame.iloc[:3].assign(dose=["1.5", "n/a", "2"]))
    as_text = r.predict(frame.iloc[:3].assign(dose=frame.dose.iloc[:3].astype(str)))
    np.testing.assert_array_equal(as_text, r.predict(frame.iloc[:3]))  # numbers as text: read


def test_a_sites_csv_and_new_rows_are_checked_for_numbers_alike(tmp_path):
    """A site's CSV (engines/flower/site._numbers) and predict's new rows
    (preprocessing._check_new_columns) checked the same cells twice, in two wordings, and a
    site's categorical table went through the second, which named neither the site nor its
    file; one check, one message after the rows' name."""
    from fedlabels.data.preprocessing import encode_frame
    from fedlabels.engines.flower.site import _numbers

    frame = pd.DataFrame({"dose": ["1.5", "2", "12,5"], "ward": ["a", "b", "a"]})
    messages = []
    for read in (lambda: _numbers(frame, ["dose"], tmp_path / "s.csv", "partition-id=0"),
                 lambda: encode_frame(frame, ["dose", "ward"], ["ward"],
                                      ["dose", "ward_a", "ward_b"],
                                      f"partition-id=0: CSV {tmp_path / 's.csv'}")):
        with pytest.raises(FedLabelsError) as info:
            read()
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith(f"partition-id=0: CSV {tmp_path / 's.csv'} column 'dose' "
                                  "holds '12,5' in data row 3, not a number")


@pytest.mark.parametrize("call", [lambda: fl.load_run(3), lambda: fl.resume(3),
                                  lambda: fl.load_config(3), lambda: fl.inspect_models(3)])
def test_a_path_argument_that_is_not_a_path_is_one_line(call):
    # a TypeError from inside os (an AttributeError for inspect_models) before
    with pytest.raises(FedLabelsError, match=r"must be a path \(a str or pathlib.Path\), "
                                             r"got int"):
        call()


def test_a_saved_run_is_found_under_a_home_relative_path(tmp_path, monkeypatch, data):
    X, y = data
    monkeypatch.setenv("HOME", str(tmp_path))
    fed = fl.make_federation(X, y, clients=3, seed=0)
    fl.run("fedct", fed, model="dt", rounds=1, seed=0).save(tmp_path / "r.json")
    assert fl.load_run("~/r.json").predict(X[:2]).shape == (2,)


def test_a_misspelt_run_config_keyword_is_one_line_naming_the_valid_ones():
    # Python's bare TypeError ("unexpected keyword argument 'roundz'") before
    with pytest.raises(FedLabelsError, match=r"^unknown RunConfig keyword 'roundz' \(did you "
                                             r"mean 'rounds'\?\); valid: .*, rounds, ") as info:
        fl.RunConfig(method="fedct", roundz=3)
    assert "\n" not in str(info.value)
    with pytest.raises(FedLabelsError, match="--threads is a flag of the command"):
        fl.RunConfig(threads=2)


def test_run_config_takes_what_python_gives():
    cfg = fl.RunConfig(method="fedct", rounds=np.int64(3), output=Path("run.json"),
                       features=("a", "b"), drop=("c",))  # a Path and tuples were refused
    assert (cfg.rounds, cfg.output, cfg.features, cfg.drop) == (3, "run.json", ["a", "b"],
                                                                ["c"])
    assert type(cfg.rounds) is int
    assert cfg.to_dict() == fl.RunConfig.from_mapping(cfg.to_dict()).to_dict()


def test_resume_checks_rounds_and_takes_numpy_integers(tmp_path):
    cfg = fl.RunConfig(method="fedct", dataset="breast_cancer", model="dt", clients=3,
                       rounds=1, seed=0, output=str(tmp_path / "run.json"))
    fl.run_config(cfg, progress=False, checkpoint=tmp_path / "run.checkpoint.npz")
    # a finished run compared rounds with its own: a TypeError for a str before
    with pytest.raises(FedLabelsError, match=r"rounds must be an integer in \[1, .*got '5'"):
        fl.resume(tmp_path / "run.json", rounds="5", progress=False)
    with pytest.raises(FedLabelsError, match=r"workers must be an integer.*got 1.5"):
        fl.resume(tmp_path / "run.json", rounds=2, workers=1.5, progress=False)
    with pytest.warns(fl.RunCaveatWarning, match="extended from 1 to 2 rounds"):
        result = fl.resume(tmp_path / "run.json", rounds=np.int64(2), threads=np.int64(1),
                           workers=np.int64(1), progress=False, save=False)
    assert len(result.rounds) == 2 and result.config["rounds"] == 2


def test_a_federations_partition_and_sizes_are_recorded_so_reports_tell_them_apart(data):
    # fl.run with a Federation recorded RunConfig's defaults (partition 'iid', no sizes)
    # whatever the federation was, so fl.report pooled an iid and a Dirichlet run of one
    # seed as two "seeds" of one configuration, and fl.plot numbered them #1 and #2
    from fedlabels.reporting.plots import legend_labels
    from fedlabels.reporting.report import group_runs

    X, y = data
    iid = fl.make_federation(X, y, clients=4, unlabeled=200, seed=0)
    skewed = fl.make_federation(X, y, clients=4, unlabeled=100, partition="dirichlet:0.5",
                                seed=0)
    runs = [fl.run("fedct", fed, model="dt", rounds=1, progress=False)
            for fed in (iid, skewed)]
    for r, fed in zip(runs, (iid, skewed), strict=True):  # the federation's own record
        assert r.config["partition"] == fed.info["partition"] == r.federation["partition"]
        assert (r.config["unlabeled"], r.config["private"], r.config["test"]) == (
            len(fed.X_public), sum(len(c) for c in fed.clients), len(fed.y_test))
    assert runs[1].config["partition"] != "iid"
    assert [len(c.runs) for c in group_runs(runs)] == [1, 1]
    labels, _ = legend_labels(runs)
    assert "dirichlet" in labels[1] and "#" not in "".join(labels)


def test_a_run_by_name_and_on_a_federation_of_one_setup_report_as_one_configuration():
    """fl.run("fedct", "breast_cancer", partition="dirichlet:0.5") records the partition as
    given and no sizes (as fedlabels run and a TOML do: test_run_spec), the same run on
    load_federation(...) 'dirichlet:0.5,0.5' and its sizes: fl.report gave them as two
    configurations of one seed each. It compares them as built: one configuration."""
    from fedlabels.reporting.plots import legend_labels
    from fedlabels.reporting.report import group_runs

    setup = {"clients": 3, "partition": "dirichlet:0.5"}
    by_name = fl.run("fedct", "breast_cancer", model="dt", rounds=1, progress=False, seed=0,
                     **setup)
    fed = fl.load_federation("breast_cancer", seed=1, **setup)
    on_fed = fl.run("fedct", fed, model="dt", rounds=1, progress=False, seed=1)
    cli = fl.run_config(fl.RunConfig(method="fedct", dataset="breast_cancer", model="dt",
                                     rounds=1, seed=2, **setup), progress=False)
    for r in (cli, by_name):  # the configuration as given
        assert r.config["partition"] == "dirichlet:0.5" and r.config["private"] is None
    assert on_fed.config["partition"] == "dirichlet:0.5,0.5"
    assert on_fed.config["private"] == by_name.federation["n_private"]
    groups = group_runs([by_name, on_fed, cli])
    assert [[r.seed for r in g.runs] for g in groups] == [[0, 1, 2]]
    labels, _ = legend_labels([by_name, on_fed, cli])
    assert not any("dirichlet" in label for label in labels)  # not a difference


def test_a_cli_run_and_a_federation_run_of_one_setup_report_one_partition_and_sizes(
        tmp_path):
    """`fedlabels run --private-per-client 20` records private null and private_per_client
    20; fl.run on load_federation(..., private_per_client=20) recorded private 60 and no
    private_per_client, so fl.report gave one setup as two configurations
    ('private_per_client=20' / 'no private_per_client'). The api's record of a Federation
    and the report's reading of a result now come from one function of the federation's
    summary (results/built.py): the same partition, the same sizes, one configuration."""
    from fedlabels.cli import main
    from fedlabels.data.partition import parse_partition
    from fedlabels.reporting.plots import run_settings
    from fedlabels.reporting.report import group_runs

    out = tmp_path / "cli.json"
    assert main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--model", "dt",
                 "--rounds", "1", "--clients", "3", "--partition", "dirichlet:0.5",
                 "--private-per-client", "20", "--seed", "0", "--no-progress", "--output",
                 str(out)]) == 0
    cli = fl.load_run(out, models=False)
    assert cli.config["partition"] == "dirichlet:0.5" and cli.config["private"] is None
    fed = fl.load_federation("breast_cancer", clients=3, partition="dirichlet:0.5",
                             private_per_client=20, seed=1)
    on_fed = fl.run("fedct", fed, model="dt", rounds=1, progress=False, seed=1)
    canonical = str(parse_partition("dirichlet:0.5"))  # the partitioner's own text
    assert canonical != "dirichlet:0.5"
    assert on_fed.config["partition"] == run_settings(on_fed)["partition"] == canonical
    assert run_settings(cli)["partition"] == canonical
    total = sum(len(c) for c in fed.clients)
    assert total == 20 * 3 == on_fed.config["private"] == run_settings(cli)["private"]
    assert run_settings(cli)["private_per_client"] is None
    assert [[r.seed for r in g.runs] for g in group_runs([cli, on_fed])] == [[0, 1]]


def test_table_settings_of_a_run_by_name_and_on_a_federation_group_as_built(tmp_path):
    """fl.run on load_federation(csv, features=...) recorded RunConfig's defaults for the
    table settings (no features, no task, no sep), so it landed apart from the same run by
    name and together with a run on other columns. The federation records them in one form
    (features 'a,b' and ['a', 'b'] alike, task and sep resolved): equivalent runs group
    together (dropping d keeps a, b and c), runs on other columns stay apart."""
    from fedlabels.reporting.plots import run_settings
    from fedlabels.reporting.report import group_runs

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(240, 4)), columns=["a", "b", "c", "d"])
    frame["target"] = np.where(frame.a + frame.b > 0, "p", "q")
    frame.to_csv(tmp_path / "t.csv", index=False)
    dataset = f"csv:{tmp_path / 't.csv'}:target"

    def on_fed(seed: int, **table: object) -> fl.RunResult:
        fed = fl.load_federation(dataset, clients=3, seed=seed, **table)
        return fl.run("fedct", fed, model="dt", rounds=1, progress=False, seed=seed)

    def by_name(seed: int, **table: object) -> fl.RunResult:
        return fl.run("fedct", dataset, clients=3, model="dt", rounds=1, progress=False,
                      seed=seed, **table)

    same = [by_name(0, features="a,b,c"), on_fed(1, features="a,b,c"),
            on_fed(2, features=["a", "b", "c"]),
            by_name(3, features=" a, b,c", task="classification", sep=",")]
    other = [on_fed(4, features="a,b,d"), by_name(5, features="a,b,d"),
             on_fed(6, drop="d"), on_fed(7)]
    assert on_fed(8, features="a,b,c").config["features"] == ["a", "b", "c"]
    assert run_settings(same[0])["features"] == ["a", "b", "c"]
    groups = group_runs([*same, *other])
    assert [[r.seed for r in g.runs] for g in groups] == [[0, 1, 2, 3, 6], [4, 5], [7]]
    assert "features=a,b,c" in groups[0].label and "features=a,b,d" in groups[1].label


def test_one_choice_of_columns_said_another_way_is_one_report_group(tmp_path):
    """features in another order, every column listed against none, a dropped column against
    the others listed: each split one setup into two report groups. The federation now
    records the columns kept, in one form; equal choices group, other columns do not. A
    federation made from arrays recorded no task, so a classification and a regression run
    were one group."""
    from fedlabels.reporting.report import group_runs

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(240, 4)), columns=["a", "b", "c", "d"])
    frame["target"] = np.where(frame.a + frame.c > 0, "p", "q")
    frame.to_csv(tmp_path / "t.csv", index=False)
    dataset = f"csv:{tmp_path / 't.csv'}:target"

    def run(seed: int, by_name: bool, **table: object) -> fl.RunResult:
        fed = dataset if by_name else fl.load_federation(dataset, clients=3, seed=seed,
                                                         **table)
        return fl.run("fedct", fed, model="dt", rounds=1, progress=False, seed=seed,
                      **({"clients": 3, **table} if by_name else {}))

    abc = [run(0, True, features="a,b,c"), run(1, False, features="c,a,b"),
           run(2, True, drop="d")]
    every = [run(3, False), run(4, True, features="d,c,b,a"),
             run(5, False, features=["a", "b", "c", "d"])]
    abd = [run(6, False, features="b,a,d")]
    groups = group_runs([*abc, *every, *abd])
    assert [[r.seed for r in g.runs] for g in groups] == [[0, 1, 2], [3, 4, 5], [6]]
    assert "features=a,b,c" in groups[0].label and "features=a,b,d" in groups[2].label
    # an oracle of "one setup": the same seed gives the same run, however the columns are said
    for seed, again, first in ((0, run(0, False, drop="d"), abc[0]),
                               (3, run(3, True, features="a,b,c,d"), every[0])):
        assert again.final_record.accuracies == first.final_record.accuracies, seed

    X = frame[["a", "b", "c", "d"]].to_numpy()
    made = [fl.run("fedct", fl.make_federation(X, frame.target, clients=3, seed=s),
                   model="dt", rounds=1, progress=False, seed=s) for s in (0, 1)]
    regression = fl.run("fedct", fl.make_federation(X, frame.a + frame.c, clients=3,
                                                    task="regression", target_range=(-9, 9)),
                        model="dt", rounds=1, progress=False, seed=2)
    groups = group_runs([*made, regression])
    assert [[r.seed for r in g.runs] for g in groups] == [[0, 1], [2]]
    assert "task=classification" in groups[0].label and "task=regression" in groups[1].label


def test_runs_on_other_arrays_under_one_name_are_two_configurations(tmp_path):
    """Two make_federation runs on other data under the default name ``custom`` were one
    configuration in fl.report and fl.plot (the result recorded no trace of the data). The
    summary records the SHA-256 of the arrays given, the same whatever the seed and
    partition: runs on the same arrays group, runs on other arrays do not; results without
    it (earlier versions) group as before, and so do loaded federations."""
    from fedlabels.reporting.plots import legend_labels
    from fedlabels.reporting.report import group_runs

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    other = X.copy()
    other[7, 2] += 1.0  # one value differs

    def run(data: np.ndarray, seed: int, **kw: object) -> fl.RunResult:
        fed = fl.make_federation(data, y, clients=3, seed=seed, **kw)
        return fl.run("fedct", fed, model="dt", rounds=1, progress=False, seed=seed)

    same = [run(X, 0), run(X, 1)]
    moved = run(X, 2, partition="iid")
    changed = run(other, 3)
    digests = [r.federation["data_sha256"] for r in (*same, moved, changed)]
    assert len(digests[0]) == 64 and digests[:3] == [digests[0]] * 3 != digests[3:]
    groups = group_runs([*same, moved, changed])
    assert [[r.seed for r in g.runs] for g in groups] == [[0, 1, 2], [3]]
    assert f"data sha256 {digests[0][:12]}" in groups[0].label
    labels, _ = legend_labels([same[0], changed])
    assert labels[0] != labels[1]
    changed.save(tmp_path / "changed.json")  # the digest survives the result file
    assert fl.load_run(tmp_path / "changed.json", models=False).federation[
        "data_sha256"] == digests[3]
    for res in (*same, moved, changed):  # a result of an earlier version: no digest
        del res.federation["data_sha256"]
    assert [[r.seed for r in g.runs] for g in group_runs([*same, moved, changed])] == [
        [0, 1, 2, 3]]
    assert fl.make_federation(pd.DataFrame(X, columns=["a", "b", "c"]), y).info[
        "data_sha256"] != digests[0]  # the feature names are part of the data
    from fedlabels.engines.flower.prepare import split_summary
    from fedlabels.results.built import data_fingerprint

    loaded = fl.load_federation("breast_cancer", clients=3).summary()
    assert "data_sha256" in loaded and data_fingerprint(loaded) is None
    shared, record = split_summary(loaded)  # the sites receive no digest of their rows
    assert "data_sha256" not in shared and record["data_sha256"] == loaded["data_sha256"]


def test_a_label_columns_name_or_a_test_share_is_refused_with_the_call_that_works(data):
    """make_federation(df, "target") said 'X has 569 rows but y has 1 labels', and test=0.2
    'test must be an integer' without naming test_fraction."""
    X, y = data
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(target=y)
    with pytest.raises(FedLabelsError) as caught:
        fl.make_federation(frame, "target")
    message = str(caught.value)
    assert "X.drop(columns='target'), X['target']" in message and "rows" not in message
    fed = fl.make_federation(frame.drop(columns="target"), frame["target"])  # what it says
    assert fed.n_features == X.shape[1]
    with pytest.raises(FedLabelsError, match=r"give test_fraction=0\.2\.$"):
        fl.make_federation(X, y, test=0.2)
    assert len(fl.make_federation(X, y, test_fraction=0.2).y_test) == round(0.2 * len(y))


def test_an_estimators_long_repr_is_recorded_and_shown_on_one_line(data):
    """A Pipeline's repr spans lines (scikit-learn indents the next step by 16 spaces):
    config.model kept the line break, and fl.plot's legend and the report's rows showed it."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from fedlabels.reporting.plots import legend_labels

    X, y = data
    fed = _federation(X, y)
    pipes = [make_pipeline(StandardScaler(), LogisticRegression(C=c)) for c in (0.1, 10.0)]
    assert "\n" in repr(pipes[0])  # scikit-learn's own repr breaks the line
    runs = [fl.run("fedct", fed, model=p, rounds=1, progress=False) for p in pipes]
    for r in runs:
        assert "\n" not in r.config["model"] and "  " not in r.config["model"]
        assert "StandardScaler()), ('logisticregression'" in r.config["model"]
    labels, _ = legend_labels(runs)
    assert "LogisticRegression(C=0.1)" in labels[0] and "LogisticRegression(C=10.0)" in labels[1]
    assert not any("  " in label for label in labels)


@pytest.mark.parametrize("labels", [np.array([3, 7]), np.array(["benign", "malignant"])])
def test_classes_are_the_labels_predict_returns(data, labels, tmp_path):
    """A run had no classes_ and federation['class_names'] holds text ('3', '7'), so
    confusion_matrix(y, pred, labels=...) of int labels found no label of its list."""
    from sklearn.metrics import confusion_matrix

    X, y01 = data
    y = labels[y01]
    r = fl.run("fedct", _federation(X, y), model="dt", rounds=1, progress=False)
    assert r.federation["class_names"] == [str(v) for v in labels]  # text
    np.testing.assert_array_equal(r.classes_, labels)  # the labels themselves
    assert r.classes_.dtype.kind == y.dtype.kind
    pred = r.predict(X)
    assert set(pred.tolist()) <= set(r.classes_.tolist())
    cm = confusion_matrix(y, pred, labels=r.classes_)
    assert cm.sum() == len(y) and cm.trace() == (pred == y).sum()
    r.save(tmp_path / "r.json")
    np.testing.assert_array_equal(fl.load_run(tmp_path / "r.json").classes_, labels)
    assert not hasattr(fl.load_run(tmp_path / "r.json", models=False), "classes_")


def test_a_regression_run_has_no_classes():
    r = fl.run("fedct", "diabetes", task="regression", clients=3, rounds=1, progress=False)
    assert not hasattr(r, "classes_")


def _shares(result, X):
    """Independent oracle: each class's share of the clients' votes on the scaled rows."""
    prep = result.preprocessing
    Z = ((X - prep.mean) / prep.std).astype(np.float32)
    votes = np.stack([np.asarray(m.predict(Z), dtype=int) for m in result.client_models])
    n = len(prep.class_names)
    return np.array([np.bincount(col, minlength=n) for col in votes.T]) / len(votes)


@pytest.mark.parametrize("loader", ["wine", "iris", "breast_cancer"])
def test_predict_proba_is_the_vote_share_whose_argmax_predict_is(loader):
    """A RunResult had predict and classes_ but no predict_proba or score. Its
    predict_proba is the clients' vote shares, predict its argmax with the same tie rule
    (the first class), and score is accuracy_score of predict, as scikit-learn's are."""
    import sklearn.datasets

    X, y01 = getattr(sklearn.datasets, f"load_{loader}")(return_X_y=True)
    names = np.array(["c", "a", "b"])[: len(np.unique(y01))]
    y = names[y01]  # string labels: classes_ sorted, not in code order of y01
    fed = fl.make_federation(X, y, clients=4, unlabeled=len(y) // 3, seed=0)
    r = fl.run("fedct", fed, model="dt", rounds=1, progress=False)
    proba, pred = r.predict_proba(X), r.predict(X)
    np.testing.assert_allclose(proba, _shares(r, X))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    top = np.sort(proba, axis=1)
    tied = top[:, -1] == top[:, -2]
    assert tied.any()  # 4 clients: 2-2 splits, where the tie rule decides
    np.testing.assert_array_equal(pred, r.classes_[proba.argmax(axis=1)])
    first_tied = [r.classes_[np.flatnonzero(p == p.max())[0]] for p in proba[tied]]
    np.testing.assert_array_equal(pred[tied], first_tied)
    one = r.predict_proba(X, client=2)  # one client's vote: its own predictions
    np.testing.assert_array_equal(r.classes_[one.argmax(axis=1)], r.predict(X, client=2))
    assert set(np.unique(one)) <= {0.0, 1.0}
    w = np.random.default_rng(0).random(len(y))
    assert r.score(X, y) == pytest.approx(accuracy_score(y, pred))
    assert r.score(X, y, sample_weight=w) == pytest.approx(accuracy_score(y, pred,
                                                                          sample_weight=w))
    assert r.score(X, y, client=2) == pytest.approx(accuracy_score(y, r.predict(X, client=2)))
    with pytest.raises(FedLabelsError, match="one label per row"):
        r.score(X, y[:-1])


def test_score_against_labels_of_another_type_is_an_error_as_in_scikit_learn(data):
    """A run trained on text labels scored against their int codes (or the reverse) gave
    0.0 without a word; scikit-learn's accuracy_score refuses the mix, and so does score."""
    from sklearn.metrics import accuracy_score

    X, y01 = data
    names = np.array(["benign", "malignant"])
    r = fl.run("fedct", _federation(X, names[y01]), model="dt", rounds=1, progress=False)
    with pytest.raises(ValueError, match="Mix of label input types"):
        accuracy_score(y01, r.predict(X))  # the oracle: scikit-learn refuses it too
    with pytest.raises(FedLabelsError, match="y holds number labels but the run predicts "
                                             "text labels"):
        r.score(X, y01)
    assert r.score(X, names[y01]) == pytest.approx(accuracy_score(names[y01], r.predict(X)))
    ints = fl.run("fedct", _federation(X, y01), model="dt", rounds=1, progress=False)
    with pytest.raises(FedLabelsError, match="y holds text labels but the run predicts "
                                             "number labels"):
        ints.score(X, y01.astype(str))


def test_a_regression_run_scores_r2_and_has_no_predict_proba():
    from sklearn.datasets import load_diabetes
    from sklearn.metrics import r2_score

    from fedlabels.results.scores import r2

    r = fl.run("fedct", "diabetes", task="regression", clients=3, rounds=1, progress=False)
    X, y = load_diabetes(return_X_y=True)
    w = np.random.default_rng(0).random(len(y))
    assert r.score(X, y) == pytest.approx(r2_score(y, r.predict(X)))
    assert r.score(X, y, w) == pytest.approx(r2_score(y, r.predict(X), sample_weight=w))
    assert not hasattr(r, "predict_proba")
    with pytest.raises(AttributeError, match="regression run has no predict_proba"):
        r.predict_proba(X)
    constant = np.full(5, 2.0)  # r2_score's convention for a constant target
    assert r2(constant, constant.copy()) == r2_score(constant, constant) == 1.0
    assert r2(constant, constant + 1) == r2_score(constant, constant + 1) == 0.0


@pytest.mark.parametrize("weight", [[1.0, np.nan, 1.0, 1.0], [1.0, np.inf, 1.0, 1.0],
                                    [0.0, 0.0, 0.0, 0.0], "abcd", ["a", "b", "c", "d"]])
@pytest.mark.parametrize("which", ["accuracy", "r2"])
def test_score_refuses_the_weights_scikit_learn_refuses_in_one_line(weight, which):
    """A NaN or infinite weight gave a score of nan, all-zero weights numpy's
    ZeroDivisionError and text its ValueError; scikit-learn's accuracy_score and r2_score
    refuse each, and so does score, in one line."""
    from sklearn.metrics import accuracy_score, r2_score

    from fedlabels.results import scores

    y, pred = np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0])
    oracle = accuracy_score if which == "accuracy" else r2_score
    with pytest.raises((ValueError, TypeError)):
        oracle(y, pred, sample_weight=weight)
    with pytest.raises(FedLabelsError, match=r"^sample_weight ") as info:
        getattr(scores, which)(y, pred, weight)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("weight", [[1, 2, 3, 4], [-1.0, 1.0, 2.0, 0.0], [0, 0, 1, 0]])
def test_weighted_scores_are_scikit_learns(weight):
    from sklearn.metrics import accuracy_score, r2_score

    from fedlabels.results import scores

    y, pred = np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0])
    assert scores.accuracy(y, pred, weight) == pytest.approx(
        accuracy_score(y, pred, sample_weight=weight))
    yr, pr = np.array([0.1, 0.5, 0.9, 0.3]), np.array([0.2, 0.4, 0.7, 0.3])
    assert scores.r2(yr, pr, weight) == pytest.approx(r2_score(yr, pr, sample_weight=weight))
