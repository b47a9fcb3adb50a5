"""``fl.load_run`` reads the models file once and builds the clients' models when they are
first used; a damaged file is still refused in one line, naming the array."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import models_path
from fedlabels.results import model_format
from fedlabels.results.model_format import write_models_file


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A FedCT run with logistic regressions on wine (3 clients), saved, and raw rows."""
    from sklearn.datasets import load_wine

    path = tmp_path_factory.mktemp("run") / "r.json"
    result = fl.run("fedct", "wine", model="logreg", clients=3, rounds=1, seed=0,
                    progress=False)
    result.save(path)
    rows = load_wine(as_frame=True).data.iloc[:40]
    return path, result, rows


def _built(monkeypatch) -> list[str]:
    """The objects the models file's reader builds from now on (class names)."""
    built: list[str] = []
    rebuild = model_format._Reader.rebuild

    def counting(self, value, where=""):
        obj = rebuild(self, value, where)
        built.append(type(obj).__name__)
        return obj

    monkeypatch.setattr(model_format._Reader, "rebuild", counting)
    return built


def test_load_run_builds_the_models_on_first_use_from_the_bytes_read_at_load(
        saved, tmp_path, monkeypatch):
    """load_run built every client's model at load, for a run read only for its figures
    (a forest's 10 clients: 0.44 s of CPU, docs/usage.md); now reading the result builds
    none, and predict, score and client_models build them once, from the file as it was
    read (a file replaced since is not read)."""
    path, result, rows = saved
    copy = tmp_path / "r.json"
    shutil.copy(path, copy)
    shutil.copy(models_path(path), models_path(copy))
    built = _built(monkeypatch)
    loaded = fl.load_run(copy)
    assert loaded.final == result.final and list(loaded.classes_) == list(result.classes_)
    assert built == []  # the figures, the classes, the names: no model built
    other = fl.run("fedct", "wine", model="logreg", clients=4, rounds=1, seed=1,
                   progress=False)
    other.save(copy, overwrite=True)  # the file replaced after load_run read it
    expected = result.predict(rows)
    assert np.array_equal(loaded.predict(rows), expected)
    assert built.count("LogisticRegression") == 3
    assert loaded.score(rows, expected) == 1.0 and len(loaded.client_models) == 3
    assert built.count("LogisticRegression") == 3  # built once
    X = result.preprocessing.transform(rows)
    for mine, again in zip(result.client_models, loaded.client_models, strict=True):
        assert np.array_equal(mine.predict_proba(X), again.predict_proba(X))


def test_a_loaded_run_pickles_and_copies_with_its_models(saved):
    """A result of load_run pickled (multiprocessing, joblib) before its models were
    built: 'Can't pickle local object'; it pickles with them built, as before."""
    import copy
    import pickle

    path, result, rows = saved
    for again in (pickle.loads(pickle.dumps(fl.load_run(path))),
                  copy.deepcopy(fl.load_run(path))):
        assert np.array_equal(again.predict(rows), result.predict(rows))
        assert again.final == result.final


def _edit_coef(path, edit) -> None:
    """Rewrite the first client's ``coef_`` array of the models file at ``path``."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    manifest = json.loads(str(arrays["manifest"][()]))
    payload = manifest["payload"]
    first = payload["v"][payload["k"].index("models")][0]

    def coef(node):
        if isinstance(node, dict):
            if node.get("$t") == "dict" and "coef_" in node["k"]:
                return node["v"][node["k"].index("coef_")]["i"]
            return next((i for v in node.values() if (i := coef(v)) is not None), None)
        if isinstance(node, list):
            return next((i for v in node if (i := coef(v)) is not None), None)
        return None

    key = f"a{coef(first)}"
    arrays[key] = edit(arrays[key].copy())
    np.savez(path, **arrays)


@pytest.mark.parametrize(("edit", "refused"), [
    (lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, np.nan, a),
     r"its array models\[0\]\.coef_ holds 1 NaN or infinite value"),
    (lambda a: a[:, :-1], r"its array models\[0\]\.coef_ has shape \(3, 12\) where the model "
                          r"\(LogisticRegression, 13 input features\) needs 3x13"),
], ids=["nan", "shape"])
def test_a_damaged_array_is_refused_on_first_use_naming_it(saved, tmp_path, edit, refused):
    """The run's figures read as before; every use of the models says, in one line and
    each time, which array is damaged (a NaN weight predicted one class for every row)."""
    path, result, rows = saved
    copy = tmp_path / "r.json"
    shutil.copy(path, copy)
    shutil.copy(models_path(path), models_path(copy))
    _edit_coef(models_path(copy), edit)
    loaded = fl.load_run(copy)
    assert loaded.final == result.final and loaded.to_frame().shape == result.to_frame().shape
    uses = [lambda: loaded.predict(rows), lambda: loaded.predict_proba(rows),
            lambda: loaded.score(rows, result.predict(rows)), lambda: loaded.client_models,
            lambda: loaded.save(tmp_path / "again.json")]
    for use in uses + uses[:1]:  # refused again, not taken as no models
        with pytest.raises(FedLabelsError, match=f"{models_path(copy)} is not a valid "
                                                 f"fedlabels models file: {refused}") as err:
            use()
        assert "\n" not in str(err.value)
    assert not (tmp_path / "again.json").exists()
    assert fl.load_run(copy, models=False).client_models == []


def test_a_models_file_of_an_earlier_version_without_class_descriptions_loads(saved,
                                                                            tmp_path):
    """A models file written before class_descriptions was added (fedlabels of 26-28 Nov
    2026: the same format, that entry absent) was refused as 'not a valid fedlabels models
    file (its class_descriptions is missing)'; it reads as no descriptions."""
    from fedlabels.results.models_file import load_models

    path, result, rows = saved
    old = tmp_path / "old.json"
    shutil.copy(path, old)
    payload = load_models(path)
    assert payload["class_descriptions"] == []
    del payload["class_descriptions"]  # what save_models wrote then
    write_models_file(models_path(old), payload)
    loaded = fl.load_run(old)
    assert np.array_equal(loaded.predict(rows), result.predict(rows))
    assert load_models(old)["class_descriptions"] == []
    payload["class_descriptions"] = "not a list"  # present and wrong: still refused
    write_models_file(models_path(old), payload)
    with pytest.raises(FedLabelsError, match=r"its 'class_descriptions' is missing or of the "
                                             r"wrong type"):
        fl.load_run(old)


@pytest.mark.parametrize("key", ["round", "local_steps", "accuracies", "server", "bytes_up",
                                 "bytes_down", "seconds"])
def test_a_round_record_without_an_entry_is_one_line_naming_it(saved, tmp_path, key):
    """Every version writes these entries of a round; a damaged file without local_steps or
    accuracies was refused as 'not a valid fedlabels result (KeyError('local_steps'))'."""
    path = saved[0]
    data = json.loads(path.read_text())
    del data["rounds"][-1][key]
    edited = tmp_path / "r.json"
    edited.write_text(json.dumps(data))
    last = len(data["rounds"]) - 1
    with pytest.raises(FedLabelsError, match=rf"its rounds\[{last}\]\.{key} is missing") as err:
        fl.load_run(edited, models=False)
    assert "Error(" not in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["class", "accuracy", "half_width_95"])
def test_a_clinical_baseline_without_an_entry_is_estimated_not_a_key_error(saved, tmp_path,
                                                                         key):
    """A result whose clinical baseline lacked an entry loaded, and its summary row, the
    report and the plot then stopped with a KeyError; the baseline is estimated from the
    training classes then, as for a result that records none."""
    from fedlabels.results.caveats import majority_baseline

    data = json.loads(saved[0].read_text())
    del data["clinical"]["baseline"][key]
    edited = tmp_path / "r.json"
    edited.write_text(json.dumps(data))
    loaded = fl.load_run(edited, models=False)
    loaded.summary_row()
    fl.report(loaded, tmp_path / "page.html")
    fl.plot(loaded, tmp_path / "plot.png")
    del data["clinical"]
    edited.write_text(json.dumps(data))
    assert majority_baseline(loaded) == majority_baseline(fl.load_run(edited, models=False))
    assert majority_baseline(loaded)["estimated"] is True


def test_a_models_file_without_the_labels_type_warns_that_labels_come_as_text(saved,
                                                                           tmp_path):
    """A models file written before the labels' type was recorded (0ea1ed1: its
    preprocessing has no label_dtype) predicts the labels as text, so score against int
    labels was 0.0 without a word; loading it now warns so."""
    from fedlabels.core.errors import FedLabelsWarning
    from fedlabels.results.models_file import load_models

    path, result, rows = saved
    old = tmp_path / "old.json"
    shutil.copy(path, old)
    payload = load_models(path)
    del payload["preprocessing"]["label_dtype"]  # what save_models wrote then
    write_models_file(models_path(old), payload)
    with pytest.warns(FedLabelsWarning, match=r"did not record the labels' type: predict "
                                              r"gives the labels as text \('0', '1', '2'\)"):
        loaded = fl.load_run(old)
    expected = result.predict(rows)
    assert expected.dtype.kind == "i"
    assert list(loaded.predict(rows)) == [str(v) for v in expected]  # what it warns of
    with warnings.catch_warnings():
        warnings.simplefilter("error", FedLabelsWarning)
        fl.load_run(path)  # a file that records the type: no warning
