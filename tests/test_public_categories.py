"""The one-hot columns of a table's categorical columns are fitted on U (public) only: a
category that only the test set or one client holds is no column, its rows encode it as
none (all zeros), and a site's raw CSV rows are encoded as the simulator encodes them."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedlabels.core.errors import FedLabelsError, FedLabelsWarning
from fedlabels.data import make_federation
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.site import load_site
from fedlabels.runs.config import RunConfig


def _table(n: int = 120, seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "c": rng.choice(["x", "y", "z"], n)})
    return X, pd.Series((X["a"] > 0).astype(int), name="label")


def _all_rows(fed: object) -> np.ndarray:
    return np.concatenate([fed.X_test, *(c.X for c in fed.clients)])  # type: ignore[attr-defined]


def test_a_category_only_the_test_set_holds_is_no_column() -> None:
    X, y = _table()
    X_test, y_test = _table(20, seed=1)
    X_test.loc[0, "c"] = "only-in-test"
    with pytest.warns(FedLabelsWarning, match="not seen in training"):
        fed = make_federation(X, y, X_test=X_test, y_test=y_test, clients=3, unlabeled=50,
                              scale="none", seed=0)
    assert fed.feature_names == ["a", "c_x", "c_y", "c_z"]
    assert fed.X_test[0, 1:].tolist() == [0.0, 0.0, 0.0]  # no category
    assert fed.X_test[1:, 1:].sum(axis=1).tolist() == [1.0] * (len(X_test) - 1)


def test_a_category_the_split_gives_the_test_set_only_is_no_column() -> None:
    """The test set drawn from X: its rows' categories are no column unless U holds them."""
    X, y = _table()
    X.loc[:, "c"] = "x"
    X.loc[3, "c"] = "rare"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FedLabelsWarning)
        feds = [make_federation(X, y, clients=3, unlabeled=30, scale="none", seed=seed)
                for seed in range(8)]
    for fed in feds:
        rare = X.loc[[3]].to_numpy()  # the rare row's raw values: is it one of U's rows?
        a = fed.feature_names.index("a")
        in_public = bool(np.any(fed.X_public[:, a] == float(rare[0, 0])))
        assert ("c_rare" in fed.feature_names) == in_public
    assert any("c_rare" not in fed.feature_names for fed in feds)


def test_one_hot_columns_are_us_categories_only() -> None:
    """Oracle: the columns are 'a' and one per category of U's rows, in sorted order."""
    X, y = _table()
    U, _ = _table(40, seed=2)
    U["c"] = np.where(U["c"] == "z", "x", U["c"])  # U holds x and y, the clients z too
    with pytest.warns(FedLabelsWarning, match=r"1 category of column\(s\) 'c' occurs in no "
                                              "row of U"):
        fed = make_federation(X, y, X_public=U, clients=3, seed=0)
    assert fed.feature_names == ["a", *(f"c_{v}" for v in sorted(set(U["c"])))]
    assert fed.preprocessing is not None and fed.preprocessing.categorical == ("c",)


def test_a_clients_or_test_rows_category_changes_no_other_partys_inputs() -> None:
    """A new category in one labelled row (a client's or the test set's) was a new column in
    every party's inputs; now that row alone changes (it encodes as no category)."""
    X, y = _table()
    U, _ = _table(40, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FedLabelsWarning)
        before = make_federation(X, y, X_public=U, clients=3, seed=0)
        changed = X.copy()
        changed.loc[7, "c"] = "a-new-category"
        after = make_federation(changed, y, X_public=U, clients=3, seed=0)
    assert after.feature_names == before.feature_names
    np.testing.assert_array_equal(after.X_public, before.X_public)
    differ = np.any(_all_rows(after) != _all_rows(before), axis=1)
    assert differ.sum() == 1


def test_a_declared_categorical_keeps_every_category() -> None:
    """A pandas Categorical's categories are schema, not data: all stay columns."""
    X, y = _table()
    X["c"] = pd.Categorical(X["c"], categories=["x", "y", "z", "never"])
    fed = make_federation(X, y, clients=3, seed=0)
    assert fed.feature_names == ["a", "c_x", "c_y", "c_z", "c_never"]


def test_a_sites_raw_csv_rows_are_encoded_as_the_simulator_encodes_them(
        tmp_path: Path) -> None:
    """A site bringing its raw table rows (a categorical column included) gets the rows the
    simulator gave it; before, a site's CSV had to hold the one-hot columns itself."""
    X, y = _table(200)
    table = X.assign(label=np.where(y == 1, "yes", "no"))
    path = tmp_path / "table.csv"
    table.to_csv(path, index=False)
    cfg = RunConfig(method="fedct", dataset=f"csv:{path}:label", clients=3, model="dt",
                    rounds=1, seed=0)
    prepared = prepare_run(cfg, tmp_path / "sites")
    npz_site = load_site(prepared.node_settings(0))
    site_csv = tmp_path / "site0.csv"
    table.to_csv(site_csv, index=False)  # every row of the table, raw, at one site
    csv_site = load_site({"partition-id": 0, "data-path": str(site_csv), "target": "label",
                          "shared-path": str(prepared.shared_path)})
    assert csv_site.private.X.shape == (len(table), npz_site.private.X.shape[1])
    # each row the simulator gave site 0 is a row of the site's own CSV, encoded alike
    for row, label in zip(npz_site.private.X, npz_site.private.y, strict=True):
        match = np.flatnonzero(np.abs(csv_site.private.X - row).max(axis=1) < 1e-5)
        assert len(match) and label in csv_site.private.y[match]



def test_a_numeric_sites_csv_without_a_feature_column_is_refused_as_predict_refuses_it(
        tmp_path: Path) -> None:
    """A numeric site CSV without a feature column read 'lacks feature column(s) ['b'] of
    the shared public set U (2 features)'; a categorical site's rows and predict said which
    columns were expected and whether an empty cell is filled: one message for all."""
    from fedlabels.data.preprocessing import SHARED_U_HAS, encode_frame

    rng = np.random.default_rng(0)
    table = pd.DataFrame({"a": rng.normal(size=90), "b": rng.normal(size=90)})
    table["label"] = np.where(table.a > 0, "yes", "no")
    path = tmp_path / "table.csv"
    table.to_csv(path, index=False)
    cfg = RunConfig(method="fedct", dataset=f"csv:{path}:label", clients=3, model="dt",
                    rounds=1, seed=0)
    prepared = prepare_run(cfg, tmp_path / "sites")
    site_csv = tmp_path / "site0.csv"
    table.drop(columns="b").to_csv(site_csv, index=False)
    with pytest.raises(FedLabelsError) as refused:
        load_site({"partition-id": 0, "data-path": str(site_csv), "target": "label",
                   "shared-path": str(prepared.shared_path)})
    with pytest.raises(FedLabelsError) as simulator:  # the simulator's reader of raw rows
        encode_frame(table.drop(columns="b"), ["a", "b"], [], ["a", "b"],
                     f"SuperNode partition-id=0: CSV {site_csv}", of=SHARED_U_HAS)
    said = str(refused.value)
    assert said == str(simulator.value) and said.count("\n") == 0
    # a site's rows are read before any model exists: the columns are U's, not a model's
    assert "lacks column(s) 'b' (1 of the 2 columns of the shared public set U: 'a', 'b')" \
        in said
    assert "every row needs a value in it" in said


def _warned_at(call: object) -> list[str]:
    """The files the 'in no row of U' warnings of ``call()`` point at."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()  # type: ignore[operator]
    return [w.filename for w in caught if "in no row of U" in str(w.message)]


def test_the_category_warning_points_at_the_users_call(tmp_path: Path) -> None:
    # stacklevel=4 pointed at fedlabels/data/loading.py through load_federation
    import fedlabels as fl

    X, y = _table(60)
    X.loc[0, "c"] = "rare"  # one row: a client's or the test set's (warned), or U's
    path = tmp_path / "t.csv"
    X.assign(label=y).to_csv(path, index=False)
    loaded = [_warned_at(lambda seed=seed: fl.load_federation(f"csv:{path}:label", clients=3,
                                                              seed=seed)) for seed in range(8)]
    direct = [_warned_at(lambda seed=seed: make_federation(X, y, clients=3, unlabeled=20,
                                                           seed=seed)) for seed in range(8)]
    for shown in (loaded, direct):
        assert any(shown), "some seed leaves 'rare' out of U"
        assert all(files == [__file__] for files in shown if files), shown


def test_the_class_label_warnings_point_at_the_users_call() -> None:
    # stacklevel=4 pointed at fedlabels/core/renamed.py (make_federation's keyword wrapper)
    X, _ = _table(60)
    near = pd.Series(np.where(np.arange(60) % 3 == 0, "yes", "YES"))
    many = pd.Series(np.arange(60) % 40)  # 40 integer classes for 60 rows: a quantity?
    for y, said in ((near, "differ only in case"), (many, "integer classes for 60 rows")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with contextlib.suppress(FedLabelsError):  # 40 classes: too few rows to split
                make_federation(X, y, clients=3, unlabeled=20, seed=0)
        assert [w.filename for w in caught if said in str(w.message)] == [__file__]


def test_new_rows_encode_a_category_they_lack_as_zero_and_refuse_a_repeated_column() -> None:
    """encode_frame lays new rows out as feature_names: a one-hot column of a category
    none of them holds is 0 (oracle: the one-hot code written by hand), and a column named
    twice is a one-line error (frame[c] would be both)."""
    from fedlabels.data.preprocessing import encode_frame

    names = ["a", "c_x", "c_y", "c_z"]
    rows = pd.DataFrame({"c": ["x", "y", "x"], "a": [1.5, -2.0, 0.0]})
    got = encode_frame(rows, ["a", "c"], ["c"], names)
    np.testing.assert_array_equal(got, [[1.5, 1, 0, 0], [-2.0, 0, 1, 0], [0.0, 1, 0, 0]])
    twice = pd.DataFrame([[1.0, "x", 2.0]], columns=["a", "c", "a"])
    with pytest.raises(FedLabelsError, match="names column\\(s\\) 'a' more than once"):
        encode_frame(twice, ["a", "c"], ["c"], names)
