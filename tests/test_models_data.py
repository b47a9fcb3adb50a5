"""Issue 3: mlbench tables (fetched Debian package, read with rdata), encoded explicitly."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.data import mlbench
from fedlabels.downloads.cache import dataset_dir


def _mixed_frame() -> pd.DataFrame:
    return pd.DataFrame({
        "num": [1.0, 2.0, np.nan, 4.0, 5.0, 6.0],
        "flag": pd.Categorical(["no", "yes", "yes", "no", None, "yes"],
                               categories=["no", "yes"]),
        "colour": pd.Categorical(["r", "g", "b", "r", "g", "g"], categories=["r", "g", "b"]),
        "size": pd.Categorical(["S", "L", "M", "S", "M", "L"], categories=["S", "M", "L"],
                               ordered=True),
        "Class": ["a", "b", "a", None, "b", "a"],
    })


def test_encode_table_drop_policy():
    X, y = mlbench.encode_table(_mixed_frame(), "Class")
    # rows 2 (num NaN), 3 (no target) and 4 (flag missing) are gone
    assert list(y) == ["a", "b", "a"]
    assert list(X.columns) == ["num", "flag", "colour=r", "colour=g", "colour=b", "size"]
    np.testing.assert_array_equal(X["num"], [1, 2, 6])
    np.testing.assert_array_equal(X["flag"], [0, 1, 1])  # two levels -> one 0/1 column
    np.testing.assert_array_equal(X[["colour=r", "colour=g", "colour=b"]],
                                  [[1, 0, 0], [0, 1, 0], [0, 1, 0]])
    np.testing.assert_array_equal(X["size"], [0, 2, 2])  # ordered -> level code
    assert X.dtypes.eq(float).all()


def test_encode_table_indicator_policy():
    X, y = mlbench.encode_table(_mixed_frame(), "Class", missing="indicator")
    assert len(y) == 5  # only the row without a target is dropped
    # gaps stay NaN, flagged: the federation fills them after the split, from U
    np.testing.assert_array_equal(X["num"], [1, 2, np.nan, 5, 6])
    np.testing.assert_array_equal(X["num_missing"], [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(X["flag"], [0, 1, 1, np.nan, 1])
    np.testing.assert_array_equal(X["flag_missing"], [0, 0, 0, 1, 0])
    assert X.isna().sum().sum() == 2


def test_indicator_fill_of_a_row_uses_no_other_row():
    """The table is encoded before it is split into clients, U and the test set: a gap's
    fill must not depend on the other rows (a column median carried the test rows' and
    the other clients' values into every filled row). Oracle: each row encoded on its own
    (the level lists are the factor's, so one row encodes as in the table)."""
    rng = np.random.default_rng(0)
    n = 40
    frame = pd.DataFrame({
        "num": np.where(rng.random(n) < 0.3, np.nan, rng.normal(50.0, 10.0, n)),
        "rank": pd.Categorical(rng.choice(["lo", "mid", "hi", None], n),
                               categories=["lo", "mid", "hi"], ordered=True),
        "Class": rng.normal(size=n),
    })
    frame.loc[0, ["num", "rank"]] = np.nan  # row 0 has both gaps, as has no row alone
    frame.loc[1, ["num", "rank"]] = [3.0, "hi"]
    X, _ = mlbench.encode_table(frame, "Class", missing="indicator", numeric_target=True)
    for i in range(n):
        alone, _ = mlbench.encode_table(pd.concat([frame.iloc[[i]], frame.iloc[[0]]]), "Class",
                                        missing="indicator", numeric_target=True)
        np.testing.assert_array_equal(alone.iloc[0][X.columns].to_numpy(), X.iloc[i])
    # another row's values (a test row's, another client's) changed: row 0 encodes alike
    other = frame.copy()
    other.loc[2:, "num"] = other.loc[2:, "num"] * 10 + 7
    other.loc[2:, "rank"] = "hi"
    X2, _ = mlbench.encode_table(other, "Class", missing="indicator", numeric_target=True)
    np.testing.assert_array_equal(X2.iloc[0], X.iloc[0])
    assert X.loc[0, "num_missing"] == X.loc[0, "rank_missing"] == 1


def _ozone_like(n: int, seed: int = 0) -> pd.DataFrame:
    """An Ozone-shaped table: target V4, gaps in V5 and V9, V6 the row's number."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"V4": rng.normal(10, 3, n), "V5": rng.normal(5750, 100, n),
                          "V6": np.arange(n, dtype=float), "V9": rng.normal(57, 12, n)})
    frame.loc[rng.random(n) < 0.1, "V5"] = np.nan
    frame.loc[rng.random(n) < 0.4, "V9"] = np.nan
    return frame


def _raw_rows(fed: fl.Federation, X: np.ndarray) -> np.ndarray:
    """Each row's number (V6), read back through U's z-scoring."""
    col = fed.feature_names.index("V6")
    pre = fed.preprocessing
    return np.rint(X[:, col] * pre.std[col] + pre.mean[col]).astype(int)


def test_ozone_gaps_are_filled_with_us_medians_after_the_split():
    """Ozone's gaps: U's median of each column (an independent nanmedian over U's raw
    rows), the same in every set and in predict; changing a test row or one client's row
    leaves U's and the other clients' inputs as they were."""
    frame = _ozone_like(120)
    _fake_cache({"Ozone": frame})
    sizes = {"clients": 3, "unlabeled": 40, "test": 20, "seed": 0}
    fed = fl.load_federation("Ozone", **sizes)
    assert fed.info["missing"]["columns"] == ["V5", "V9"]
    u_rows = _raw_rows(fed, fed.X_public)
    for name in ("V5", "V9"):
        col = fed.feature_names.index(name)
        expected = np.nanmedian(frame[name].to_numpy()[u_rows])
        assert fed.preprocessing.fill[col] == pytest.approx(expected)
        assert np.nanmedian(frame[name]) != pytest.approx(expected)  # not the table's
    # every set: observed values as they were, gaps U's median (then U's z-scoring)
    raw = fed.preprocessing.transform(mlbench.load_table("Ozone")[0])  # gaps NaN, flagged
    for X in (fed.X_public, fed.X_test, *(c.X for c in fed.clients)):
        np.testing.assert_allclose(X, raw[_raw_rows(fed, X)], rtol=1e-6, atol=1e-6)
    # a test row and a row of client 0 changed, values and gaps: nobody else's inputs move
    changed = frame.copy()
    for row in (_raw_rows(fed, fed.X_test)[0], _raw_rows(fed, fed.clients[0].X)[0]):
        changed.loc[row, ["V5", "V9"]] = [np.nan, 1e4]
    shutil.rmtree(dataset_dir(mlbench.CACHE_NAME))
    _fake_cache({"Ozone": changed})
    again = fl.load_federation("Ozone", **sizes)
    np.testing.assert_array_equal(again.X_public, fed.X_public)
    for c in (1, 2):
        np.testing.assert_array_equal(again.clients[c].X, fed.clients[c].X)
    assert not np.array_equal(again.clients[0].X, fed.clients[0].X)


def test_encode_table_bad_input():
    with pytest.raises(fl.FedLabelsError, match="no target column 'target'"):
        mlbench.encode_table(_mixed_frame(), "target")
    with pytest.raises(fl.FedLabelsError, match="missing must be 'drop' or 'indicator'"):
        mlbench.encode_table(_mixed_frame(), "Class", missing="mean")


def test_mlbench_tables_are_registered_and_need_a_fetch(capsys):
    for name in ("letter", "shuttle", "dna", "vehicle"):
        with pytest.raises(fl.DatasetNotFetchedError,
                           match=rf"'{name}' has not been fetched yet; run `fedlabels fetch "
                                 rf"{name}` \(or `fedlabels fetch mlbench`\)"):
            fl.load_federation(name)
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "letter" in out and "r-cran-mlbench" in out and "NOT FETCHED" in out


def _fake_cache(frames: dict[str, pd.DataFrame]) -> None:
    rdata = pytest.importorskip("rdata")
    root = dataset_dir(mlbench.CACHE_NAME)
    root.mkdir(parents=True)
    for rda, frame in frames.items():
        rdata.write_rda(root / f"{rda}.rda", {rda: frame})
    (root / mlbench.MLBENCH.marker).write_text(json.dumps({"package": "synthetic"}))


def test_rda_table_read_encoded_and_federated():
    rng = np.random.default_rng(0)
    n = 300
    levels = ["bus", "opel", "saab", "van"]
    frame = pd.DataFrame({f"F{i}": rng.normal(size=n) for i in range(5)})
    frame["Class"] = pd.Categorical(rng.choice(levels, size=n), categories=levels)
    frame["F0"] += 3 * frame["Class"].cat.codes.to_numpy()  # learnable signal
    _fake_cache({"Vehicle": frame})
    X, y = mlbench.load_table("vehicle")
    assert X.shape == (n, 5) and sorted(set(y)) == levels
    fed = fl.load_federation("vehicle", clients=3, unlabeled=100, private=120,
                             test=80, seed=0)
    assert fed.class_names == levels and fed.feature_names == [f"F{i}" for i in range(5)]
    result = fl.run("fedct", fed, model="dt", rounds=2, seed=0, progress=False)
    assert result.final["mean_accuracy"] > 0.7  # 4 classes, chance 0.25


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_fetch_from_a_local_deb_is_cached_and_shared(tmp_path, capsys):
    rdata = pytest.importorskip("rdata")
    pkg = tmp_path / "pkg"
    data = pkg / "usr/lib/R/site-library/mlbench/data"
    data.mkdir(parents=True)
    for table in mlbench.TABLES.values():
        frame = pd.DataFrame({"a": [1.0, 2.0], table.target: pd.Categorical(["x", "y"])})
        rdata.write_rda(data / f"{table.rda}.rda", {table.rda: frame})
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN/control").write_text(
        "Package: r-cran-mlbench\nVersion: 0.0-test\nArchitecture: all\n"
        "Maintainer: test <t@example.org>\nDescription: synthetic\n")
    deb = tmp_path / "r-cran-mlbench_0.0-test_all.deb"
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(deb)], check=True,
                   capture_output=True)
    assert main(["fetch", "mlbench", "--from-deb", str(deb)]) == 0
    assert main(["fetch", "dna"]) == 0  # same package: nothing more to fetch
    out = capsys.readouterr().out
    assert "fetched into" in out and "already fetched" in out
    meta = json.loads((dataset_dir("mlbench") / "source.json").read_text())
    assert set(meta["files"]) == {f"{t.rda}.rda" for t in mlbench.TABLES.values()}
    X, y = mlbench.load_table("letter")
    assert list(y) == ["x", "y"] and list(X.columns) == ["a"]


def test_a_damaged_cache_file_is_one_line_saying_to_fetch_again():
    """The cache's files were checked against their sha256 only when fetched: a truncated
    ``.rda`` was an LZMAError traceback at every run, a replaced one was read as data."""
    import hashlib

    from fedlabels.core.errors import FedLabelsError

    frame = pd.DataFrame({"F0": [1.0, 2.0, 3.0], "Class": ["a", "b", "a"]})
    _fake_cache({"Vehicle": frame})
    root = dataset_dir(mlbench.CACHE_NAME)
    rda = root / "Vehicle.rda"
    marker = root / mlbench.MLBENCH.marker
    marker.write_text(json.dumps({"package": "synthetic", "files": {
        "Vehicle.rda": hashlib.sha256(rda.read_bytes()).hexdigest()}}))
    assert len(mlbench.read_table(mlbench.TABLES["vehicle"])) == 3  # intact: read
    rda.write_bytes(rda.read_bytes()[:40])
    with pytest.raises(FedLabelsError, match=r"sha256 differs.*fetch again"):
        mlbench.read_table(mlbench.TABLES["vehicle"])


def test_a_damaged_fashion_mnist_cache_is_one_line_saying_to_fetch_again():
    """As the mlbench tables: a truncated IDX file was an EOFError traceback."""
    import gzip
    import hashlib

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.data.registry import FASHION_MNIST, _load_fashion_mnist

    root = dataset_dir("fashion_mnist")
    root.mkdir(parents=True)
    files = {}
    for name, header, n in (("train-images-idx3-ubyte.gz", 16, 784 * 2),
                            ("train-labels-idx1-ubyte.gz", 8, 2),
                            ("t10k-images-idx3-ubyte.gz", 16, 784),
                            ("t10k-labels-idx1-ubyte.gz", 8, 1)):
        (root / name).write_bytes(gzip.compress(bytes(header + n)))
        files[name] = hashlib.sha256((root / name).read_bytes()).hexdigest()
    (root / FASHION_MNIST.marker).write_text(json.dumps({"files": files}))
    assert len(_load_fashion_mnist().y) == 2  # intact: read
    damaged = root / "train-images-idx3-ubyte.gz"
    damaged.write_bytes(damaged.read_bytes()[:20])
    with pytest.raises(FedLabelsError, match=r"sha256 differs.*fetch again"):
        _load_fashion_mnist()
