"""Classes shown to a person with what their codes mean (``8 (Bag)``), while every file,
``predict`` and the federation keep the labels themselves."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn.datasets

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.class_names import shown_class, shown_class_names, shown_names_of
from fedlabels.results.caveats import chance_warning, majority_baseline
from fedlabels.results.models_file import load_models
from fedlabels.results.run_result import load_result


def test_shown_class_puts_the_description_beside_the_label():
    assert shown_class("8", "Bag") == "8 (Bag)"
    assert shown_class("cat", "") == "cat" and shown_class("7", None) == "7"
    assert shown_class("3", "3") == "3"  # digits: the description says nothing more
    assert shown_class_names(["0", "1"], ["malignant", "benign"]) == \
        ["0 (malignant)", "1 (benign)"]
    assert shown_class_names(["0", "1"], ["malignant"]) == ["0", "1"]  # misaligned: ignored
    assert shown_names_of({"class_names": ["a", "b"]}) == ["a", "b"]  # an older result


def test_breast_cancer_codes_are_described_as_scikit_learn_names_them():
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    names = sklearn.datasets.load_breast_cancer().target_names  # the independent oracle
    assert fed.class_names == ["0", "1"]  # the labels themselves are unchanged
    assert fed.summary()["class_descriptions"] == [str(n) for n in names] == \
        ["malignant", "benign"]
    plain = fl.load_federation("wine", clients=3, seed=0)  # nothing to say about its codes
    assert "class_descriptions" not in plain.summary()


def test_reports_warnings_and_inspect_show_the_descriptions(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", "breast_cancer", "--model", "dt", "--rounds", "1",
                 "--no-progress", "--output", str(out)]) == 0
    result = load_result(out)
    assert result.federation["class_descriptions"] == ["malignant", "benign"]
    assert load_models(out)["class_descriptions"] == ["malignant", "benign"]

    page = tmp_path / "page.html"
    assert main(["report", str(out), "-o", str(page)]) == 0
    html = page.read_text()
    assert "<th>0 (malignant)</th>" in html and "<th>1 (benign)</th>" in html
    assert "take <b>0 (malignant)</b> as the positive class" in html

    base = majority_baseline(result)
    assert base is not None
    majority = int(np.argmax(np.sum(result.federation["client_class_counts"], axis=0)))
    assert base["name"] == ["0 (malignant)", "1 (benign)"][majority]
    warning = chance_warning(base["accuracy"], base)
    assert warning is not None and f"always answers {base['name']!r}" in warning

    capsys.readouterr()
    assert main(["inspect", str(out), "--client", "0"]) == 0
    tree = capsys.readouterr().out
    assert "class: 0 (malignant)" in tree or "class: 1 (benign)" in tree


def test_predict_still_returns_the_labels(tmp_path):
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    result = fl.run("fedct", fed, model="dt", rounds=1, seed=0, progress=False)
    X = sklearn.datasets.load_breast_cancer(as_frame=True).data.iloc[:20]
    assert set(map(str, result.predict(X))) <= {"0", "1"}


def test_fl_run_warns_near_chance_as_the_cli_does():
    """A model that always answers the commonest class is flagged from Python too."""
    import warnings

    from sklearn.dummy import DummyClassifier

    with pytest.warns(fl.RunCaveatWarning, match="majority-class baseline .* always answers "
                      r"'1 \(benign\)'"):
        fl.run("fedct", "breast_cancer", model=DummyClassifier(), rounds=1, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.RunCaveatWarning)  # a run that learnt: no warning
        fl.run("fedct", "breast_cancer", model="dt", rounds=1, progress=False)
