"""The class list every party receives is declared (``classes``, a Categorical's categories,
a registered dataset's documented classes) or the classes the clients' rows hold: never a
class that only the test set or U holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fedlabels as fl
from conftest import cli_one_line_error
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import make_federation
from fedlabels.runs.config import RunConfig


def _table(n: int = 90, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, np.where(X[:, 0] > 0, "a", "b").astype(object)


def test_the_class_list_is_the_classes_the_clients_hold() -> None:
    """Two rows of class 'rare' (one goes to the test set, every class is tested): where
    the other goes to U, no client holds 'rare'; it was a class every party received."""
    X, y = _table()
    y[[4, 5]] = "rare"
    refused = 0
    for seed in range(12):
        try:
            fed = make_federation(X, y, clients=3, unlabeled=30, seed=seed)
        except FedLabelsError as exc:
            assert "class(es) 'rare' occur in no client's rows" in str(exc)
            assert "--classes a,b,rare" in str(exc)
            refused += 1
            continue
        held = np.unique(np.concatenate([c.y for c in fed.clients]))
        assert [fed.class_names[k] for k in held] == fed.class_names
    assert refused


def test_a_class_only_u_holds_is_refused() -> None:
    X, y = _table()
    X_test, y_test = _table(20, seed=1)
    y[4] = "hidden"
    for seed in range(10):  # a split that gives row 4 to U
        try:
            fed = make_federation(X, y, X_test=X_test, y_test=y_test, clients=3,
                                  unlabeled=30, seed=seed)
        except FedLabelsError as exc:
            assert "'hidden' occur in no client's rows" in str(exc)
            return
        assert "hidden" in fed.class_names  # a client holds it: a class of its own
    pytest.fail("no seed gave the row to U")


def test_declared_classes_do_not_depend_on_any_rows() -> None:
    X, y = _table()
    y[[4, 5]] = "rare"
    fed = make_federation(X, y, clients=3, unlabeled=30, seed=0, classes="rare,b,a,never")
    assert fed.class_names == ["a", "b", "never", "rare"]  # sorted, as encode_labels sorts
    y2 = y.copy()
    y2[5] = "never" if y[5] != "never" else "a"  # another row, another declared class
    other = make_federation(X, y2, clients=3, unlabeled=30, seed=0,
                            classes=["a", "b", "never", "rare"])
    assert other.class_names == fed.class_names
    assert fed.class_names.index("rare") in fed.y_test.tolist()  # codes index the list
    with pytest.raises(FedLabelsError, match=r"label\(s\) 'rare' that the declared classes "
                                             r"\(a, b\) lack"):
        make_federation(X, y, clients=3, unlabeled=30, seed=0, classes="a,b")


def test_a_categorical_labels_categories_are_its_declared_classes() -> None:
    X, y = _table()
    y_cat = pd.Series(pd.Categorical(y, categories=["b", "a", "c"]))
    fed = make_federation(X, y_cat, clients=3, unlabeled=30, seed=0)
    assert fed.class_names == ["a", "b", "c"] and fed.n_classes == 3


def test_a_registered_datasets_classes_are_its_documented_ones() -> None:
    """digits with 20 private rows: some digit is in no client's rows, and the federation
    still has the ten classes the dataset documents."""
    fed = fl.load_federation("digits", clients=2, private=12, seed=0)
    held = np.unique(np.concatenate([c.y for c in fed.clients]))
    assert len(held) < 10
    assert fed.class_names == [str(k) for k in range(10)]


def test_classes_is_a_run_parameter_checked_before_any_data(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(FedLabelsError, match="at least two"):
        RunConfig(dataset="csv:nowhere.csv:y", classes="a")
    with pytest.raises(FedLabelsError, match="classification task only"):
        RunConfig(dataset="csv:nowhere.csv:y", task="regression", classes="a,b")
    X, y = _table()
    table = pd.DataFrame(X, columns=["u", "v", "w"]).assign(label=y)
    table.loc[[4, 5], "label"] = "rare"
    path = tmp_path / "t.csv"
    table.to_csv(path, index=False)
    err = cli_one_line_error(capsys, ["run", "--dataset", f"csv:{path}:label", "--clients", "3",
                              "--rounds", "1", "--model", "dt", "-q", "--seed", "1",
                              "-o", str(tmp_path / "r.json")])
    assert "'rare' occur in no client's rows" in err
    fed = fl.load_federation(f"csv:{path}:label", clients=3, seed=1, classes="a,b,rare")
    assert fed.class_names == ["a", "b", "rare"]
    assert fed.info["loaded_with"]["classes"] == ["a", "b", "rare"]


@pytest.mark.parametrize("labels,test_label,shown", [
    (("a", "b"), "c", "'c'"), ((0, 1), 2, "2")])
def test_a_test_label_outside_the_declared_classes_names_them_and_classes(
        labels: tuple[object, object], test_label: object, shown: str) -> None:
    # it said "y_test has class 'c' which does not occur in y", whatever the declaration
    X, _ = _table()
    y = np.array([labels[i % 2] for i in range(len(X))])
    y_test = np.array([labels[0], test_label, labels[1]])
    declared = [str(v) for v in labels]
    with pytest.raises(FedLabelsError, match=rf"^y_test has class {shown} that the declared "
                       rf"classes \({', '.join(declared)}\) lack; add it to classes "
                       r"\(--classes\)"):
        make_federation(X, y, clients=3, unlabeled=30, X_test=X[:3], y_test=y_test,
                        classes=declared)
    with pytest.raises(FedLabelsError, match=rf"^y_test has class {shown} which does not "
                       "occur in y"):
        make_federation(X, y, clients=3, unlabeled=30, X_test=X[:3], y_test=y_test)


def test_declared_integer_classes_are_in_numeric_order_as_the_labels_are() -> None:
    """--classes 10,2,1 declares the classes 1, 2, 10 in that order (numbers in numeric
    order, as encode_labels orders integer labels): each row keeps its own label."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    y = np.array([1, 2, 10])[np.arange(120) % 3]
    fed = make_federation(X, y, clients=2, unlabeled=30, classes="10,2,1", seed=0)
    assert fed.class_names == ["1", "2", "10"]
    plain = make_federation(X, y, clients=2, unlabeled=30, seed=0)
    assert plain.class_names == fed.class_names
    assert np.array_equal(fed.y_test, plain.y_test)


def test_classes_given_as_integral_floats_name_the_integer_labels() -> None:
    """classes=np.array([1., 2., 10.]) (a float array, e.g. np.unique of float labels)
    declares the classes 1, 2, 10, as encode_labels writes the labels 1.0, 2.0, 10.0."""
    from fedlabels.data.classes import parse_classes

    assert parse_classes(np.array([10.0, 1.0, 2.0])) == ["1", "2", "10"]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.array([1, 2, 10])[np.arange(60) % 3]
    fed = make_federation(X, y, clients=2, unlabeled=20, classes=np.unique(y.astype(float)))
    assert fed.class_names == ["1", "2", "10"]
