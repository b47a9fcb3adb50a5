"""A public unlabeled set U given in a file (``--public``, ``public=``) instead of drawn from
the labelled rows: a table's U is the file's rows, every other non-test row goes to the
clients, the scaling is fitted on the given U, and bad files are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedlabels as fl
from conftest import cli_one_line_error as _error
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError, FedLabelsWarning


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def _tables(tmp_path: Path) -> tuple[str, Path, object]:
    """breast_cancer: the first 300 rows a labelled private CSV, the rest a public CSV
    without the target."""
    import sklearn.datasets

    frame = sklearn.datasets.load_breast_cancer(as_frame=True).frame
    frame.iloc[:300].to_csv(tmp_path / "private.csv", index=False)
    public = frame.iloc[300:].drop(columns=["target"])
    public.to_csv(tmp_path / "public.csv", index=False)
    return f"csv:{tmp_path / 'private.csv'}:target", tmp_path / "public.csv", public


def test_a_given_u_is_the_files_rows_scaled_by_its_own_statistics(tmp_path: Path) -> None:
    dataset, public, frame = _tables(tmp_path)
    fed = fl.load_federation(dataset, clients=3, public=str(public), seed=0)
    raw = frame.to_numpy(dtype=np.float64)
    # an independent oracle: U is the file's rows z-scored by their own mean and std
    mean, std = raw.mean(axis=0), raw.std(axis=0)
    np.testing.assert_allclose(fed.X_public, (raw - mean) / std, rtol=1e-5, atol=1e-5)
    assert fed.y_public is None
    # no U drawn: every one of the 300 labelled rows is a client's or the test set's
    assert sum(len(c) for c in fed.clients) + len(fed.y_test) == 300
    record = fed.info["public"]
    assert record["path"] == str(public) and record["n_public"] == len(frame)
    import hashlib

    assert record["sha256"] == hashlib.sha256(fed.X_public.tobytes()).hexdigest()


@pytest.mark.parametrize("method", ["fedct", "ds-fl"])
def test_fedct_and_ds_fl_run_on_a_given_u(tmp_path: Path, method: str) -> None:
    dataset, public, _ = _tables(tmp_path)
    result = fl.run(method, dataset, public=str(public), clients=3, rounds=2, period=5,
                    seed=0)
    assert result.federation["public"]["path"] == str(public)
    assert result.federation["n_public"] == 269
    assert result.final["mean_accuracy"] > 0.8  # breast_cancer: well above chance
    # no labels of U: the consensus-accuracy diagnostic is absent, and the result says so
    assert all("consensus_accuracy" not in r.server for r in result.rounds)
    assert "no consensus_accuracy" in result.federation["public"]["labels"]


def test_the_cli_takes_public_and_records_it(tmp_path: Path) -> None:
    import json

    dataset, public, _ = _tables(tmp_path)
    out = tmp_path / "r.json"
    code = main(["run", "--method", "fedct", "--dataset", dataset, "--public", str(public),
                 "--clients", "3", "--rounds", "1", "-o", str(out), "-q"])
    assert code == 0
    saved = json.loads(out.read_text())
    assert saved["config"]["public"] == str(public)
    assert saved["federation"]["public"]["n_public"] == 269


def test_a_toml_config_takes_public(tmp_path: Path) -> None:
    dataset, public, _ = _tables(tmp_path)
    (tmp_path / "c.toml").write_text(f'method = "fedct"\ndataset = "{dataset}"\n'
                                     f'public = "{public}"\nclients = 3\nrounds = 1\n')
    from fedlabels.runs.config import load_config

    cfg = load_config(tmp_path / "c.toml")
    assert cfg.public == str(public)
    result = fl.run_config(cfg, save=False)
    assert result.federation["n_public"] == 269


def test_bad_public_tables_are_one_line(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    dataset, public, frame = _tables(tmp_path)
    base = ["run", "--method", "fedct", "--dataset", dataset, "--clients", "3",
            "--rounds", "1", "-o", str(tmp_path / "r.json"), "--public"]
    labelled = tmp_path / "labelled.csv"
    frame.assign(target=0).to_csv(labelled, index=False)
    assert "target column 'target'" in _error(capsys, [*base, str(labelled)])
    extra = tmp_path / "extra.csv"
    frame.assign(site="a").to_csv(extra, index=False)
    assert "'site' that the training table lacks" in _error(capsys, [*base, str(extra)])
    short = tmp_path / "short.csv"
    frame.drop(columns=["mean radius"]).to_csv(short, index=False)
    assert "lacks the feature column(s) 'mean radius'" in _error(capsys, [*base, str(short)])
    text = tmp_path / "text.csv"
    frame.assign(**{"mean radius": "big"}).to_csv(text, index=False)
    assert "'mean radius' hold numbers" in _error(capsys, [*base, str(text)])
    assert "does not exist" in _error(capsys, [*base, str(tmp_path / "nope.csv")])
    holes = tmp_path / "holes.csv"
    frame.assign(**{"mean area": np.where(np.arange(len(frame)) == 4, np.nan, 1.0)}).to_csv(
        holes, index=False)
    assert "data row(s) 5; column(s) 'mean area'" in _error(capsys, [*base, str(holes)])
    both = _error(capsys, [*base, str(public), "--unlabeled", "50",
                           "--unlabeled-shift", "0.5"])
    assert "unlabeled and unlabeled_shift" in both


def test_a_method_that_needs_us_labels_refuses_public(tmp_path: Path) -> None:
    dataset, public, _ = _tables(tmp_path)
    with pytest.raises(FedLabelsError, match="FedMD's transfer learning"):
        fl.run("fedmd", dataset, public=str(public), clients=3, rounds=1)


def test_features_and_drop_apply_to_the_public_table_alike(tmp_path: Path) -> None:
    dataset, public, frame = _tables(tmp_path)
    fed = fl.load_federation(dataset, clients=3, public=str(public),
                             features="mean radius,mean texture")
    assert fed.feature_names == ["mean radius", "mean texture"]
    raw = frame[["mean radius", "mean texture"]].to_numpy(dtype=np.float64)
    np.testing.assert_allclose(fed.X_public, (raw - raw.mean(0)) / raw.std(0), atol=1e-5)


def test_categorical_columns_are_one_hot_encoded_with_us_categories(
        tmp_path: Path) -> None:
    """The one-hot columns are U's categories (public): 'red', which only the clients'
    rows hold, is no column (it was one, fitted on every row, until 2026-11-29)."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 80
    private = pd.DataFrame({"x": rng.normal(size=n), "colour": rng.choice(["red", "blue"], n),
                            "y": rng.integers(0, 2, n)})
    private.to_csv(tmp_path / "p.csv", index=False)
    # U's only colour is one the training rows hold too, and a new one
    pd.DataFrame({"x": [0.0, 1.0, 2.0], "colour": ["blue", "green", "blue"]}).to_csv(
        tmp_path / "u.csv", index=False)
    with pytest.warns(FedLabelsWarning, match="'colour' occurs in no row of U"):
        fed = fl.load_federation(f"csv:{tmp_path / 'p.csv'}:y", clients=2,
                                 public=str(tmp_path / "u.csv"))
    assert fed.feature_names == ["x", "colour_blue", "colour_green"]
    assert len(fed.X_public) == 3


def test_resume_refuses_a_changed_public_set(tmp_path: Path) -> None:
    dataset, public, frame = _tables(tmp_path)
    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", dataset, "--public", str(public),
                 "--clients", "3", "--rounds", "1", "-o", str(out), "-q"]) == 0
    changed = frame.copy()
    changed.iloc[0, 0] += 1.0  # one value of U: same sizes, same settings, another U
    changed.to_csv(public, index=False)
    with pytest.raises(FedLabelsError, match="the data changed since the checkpointed run"):
        fl.resume(out, rounds=2)
    frame.to_csv(public, index=False)  # U restored: the run goes on
    assert fl.resume(out, rounds=2).final["round"] == 2


def test_a_runs_outputs_never_overwrite_its_public_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset, public, _ = _tables(tmp_path)
    named = tmp_path / "r.rounds.csv"  # what -o r.json would write its rounds table to
    public.rename(named)
    err = _error(capsys, ["run", "--method", "fedct", "--dataset", dataset, "--public",
                          str(named), "--clients", "3", "--rounds", "1",
                          "-o", str(tmp_path / "r.json")])
    assert "public file" in err
    assert named.read_text().startswith("mean radius")


def test_copies_of_labelled_rows_in_u_are_counted_and_warned_of(tmp_path: Path) -> None:
    import pandas as pd

    dataset, public, frame = _tables(tmp_path)
    private = pd.read_csv(tmp_path / "private.csv").drop(columns=["target"])
    leaky = pd.concat([frame, private.iloc[[3, 50, 100, 150, 299]]], ignore_index=True)
    leaky.to_csv(public, index=False)
    with pytest.warns(fl.FedLabelsWarning, match="holds 5 row") as caught:
        fed = fl.load_federation(dataset, clients=3, public=str(public))
    assert fed.info["public"]["copies_of_labelled_rows"] == 5
    # it pointed at fedlabels/data/loading.py (stacklevel=3), not at the user's call
    assert [w.filename for w in caught if "holds 5 row" in str(w.message)] == [__file__]
    frame.to_csv(public, index=False)  # a clean U: nothing to warn of
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.FedLabelsWarning)
        fed = fl.load_federation(dataset, clients=3, public=str(public))
    assert fed.info["public"]["copies_of_labelled_rows"] == 0


def test_public_pca_is_fitted_on_the_given_u(tmp_path: Path) -> None:
    dataset, public, _ = _tables(tmp_path)
    fed = fl.load_federation(dataset, clients=3, public=str(public), public_pca=3)
    # whitened on U (ddof = 1): U's components have mean 0 and standard deviation 1
    np.testing.assert_allclose(fed.X_public.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(fed.X_public.std(axis=0, ddof=1), 1.0, atol=1e-5)
    assert fed.info["public_pca"]["components"] == 3


def test_make_federation_takes_an_array_u() -> None:
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 4)), rng.integers(0, 2, 60)
    U = rng.normal(loc=3.0, size=(25, 4))
    fed = fl.make_federation(X, y, clients=3, X_public=U, seed=0)
    np.testing.assert_allclose(fed.X_public, (U - U.mean(0)) / U.std(0), atol=1e-5)
    assert fed.y_public is None and sum(len(c) for c in fed.clients) == 60 - len(fed.y_test)
    with pytest.raises(FedLabelsError, match="X_public has 3 features, X has 4"):
        fl.make_federation(X, y, clients=3, X_public=U[:, :3])
    with pytest.raises(FedLabelsError, match="unlabeled and unlabeled_shift"):
        fl.make_federation(X, y, clients=3, X_public=U, unlabeled=10)


def test_a_baseline_that_labels_no_u_takes_public_and_gets_the_same_clients(
        tmp_path: Path) -> None:
    dataset, public, _ = _tables(tmp_path)
    runs = {m: fl.run(m, dataset, public=str(public), clients=3, rounds=1, period=2, seed=0)
            for m in ("fedct", "local")}
    assert runs["local"].federation["client_sizes"] == runs["fedct"].federation["client_sizes"]
    assert sum(runs["local"].federation["client_sizes"]) == 300 - runs["local"].federation[
        "n_test"]


def test_resuming_elsewhere_a_run_on_a_relative_public_path_says_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset, public, _ = _tables(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", dataset, "--public", public.name,
                 "--clients", "3", "--rounds", "1", "-o", str(out), "-q"]) == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(FedLabelsError, match=f"public set public.csv is a path relative to "
                                             f"{tmp_path}"):
        fl.resume(out, rounds=2)


def test_an_audit_on_a_given_u_reports_no_consensus_accuracy(tmp_path: Path) -> None:
    import json

    dataset, public, _ = _tables(tmp_path)
    out = tmp_path / "a.json"
    assert main(["audit", "--method", "fedct", "--dataset", dataset, "--public", str(public),
                 "--clients", "3", "--model", "dt", "--rounds", "2", "--test", "80",
                 "--mia-attacks", "loss,label-only", "--audit-members", "10",
                 "--audit-refs", "2", "--output", str(out), "--no-progress"]) == 0
    saved = json.loads(out.read_text())
    assert saved["federation"]["public"]["path"] == str(public)
    # before: U's unknown labels were -1 placeholders, scored as wrong (0.46 here)
    assert saved["rounds"] and all("consensus_accuracy" not in (r.get("server") or {})
                                   for r in saved["rounds"])


def test_dp_fedcts_noise_only_refusal_names_a_way_that_works_with_public(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset, public, _ = _tables(tmp_path)
    err = _error(capsys, ["run", "--method", "dp-fedct", "--dataset", dataset, "--public",
                          str(public), "--epsilon", "8", "--clients", "3", "--rounds", "1",
                          "-o", str(tmp_path / "r.json")])
    # before: 'a smaller --unlabeled', which public refuses beside it
    assert "fewer rows in --public" in err


def test_a_registered_text_datasets_public_csv_is_its_texts(tmp_path: Path) -> None:
    """A registered text dataset's rows are an unnamed array of texts: U is a CSV of one
    column of texts (or one named 'text'); before, it was refused as 'unnamed feature
    columns'. Empty texts and other layouts are one line."""
    from types import SimpleNamespace

    from fedlabels.data.public_set import read_public

    info = SimpleNamespace(name="tweets", target=None)
    raw = SimpleNamespace(X=np.array(["a good day", "a bad day"], dtype=object),
                          y=np.array([1, 0]), image_input=None)
    one = tmp_path / "one.csv"
    one.write_text("review\nsunny and warm\n\"cold, wet\"\n")
    assert list(read_public(info, raw, one)) == ["sunny and warm", "cold, wet"]
    named = tmp_path / "named.csv"
    named.write_text("id,text\n1,lovely\n2,awful\n")
    assert list(read_public(info, raw, named)) == ["lovely", "awful"]
    two = tmp_path / "two.csv"
    two.write_text("a,b\nx,y\n")
    with pytest.raises(FedLabelsError, match="give one column of texts"):
        read_public(info, raw, two)
    gap = tmp_path / "gap.csv"
    gap.write_text("text,n\nfine,1\n,2\n")
    with pytest.raises(FedLabelsError, match=r"1 empty text\(s\) \(data row\(s\) 2\)"):
        read_public(info, raw, gap)
    fed = fl.make_federation(np.array([f"text {i}" for i in range(40)], dtype=object),
                             np.arange(40) % 2, clients=2, test=10, seed=0,
                             X_public=read_public(info, raw, one))
    assert list(fed.X_public) == ["sunny and warm", "cold, wet"] and fed.y_public is None


def test_run_takes_a_pathlib_path_as_public_as_load_federation_does(tmp_path: Path) -> None:
    """before: fl.run refused Path('public.csv') ('public must be a str'), which
    load_federation and the docs' PATH accept."""
    dataset, public, _ = _tables(tmp_path)
    result = fl.run("fedct", dataset, public=public, clients=3, rounds=1, seed=0,
                    progress=False)
    assert result.federation["public"]["path"] == str(public)
    assert result.config["public"] == str(public)
    assert result.federation["public"] == fl.load_federation(
        dataset, clients=3, public=public, seed=0).info["public"]


def test_a_public_csv_split_by_another_separator_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ';'-separated U read with commas is one column: one line saying it looks
    ';'-separated and what to do (a csv: table: --sep, which reads both files; a registered
    dataset, which refuses --sep: re-save it with commas). Before: a line listing all 30
    columns as missing and the header as one unknown column, with no word of the
    separator."""
    dataset, public, frame = _tables(tmp_path)
    frame.to_csv(public, index=False, sep=";")
    base = ["run", "--method", "fedct", "--clients", "3", "--rounds", "1",
            "-o", str(tmp_path / "r.json"), "--public", str(public)]
    err = _error(capsys, [*base, "--dataset", dataset])
    assert "has one column, not the 30 feature columns" in err
    assert "looks ';'-separated; give --sep ';'" in err
    err = _error(capsys, [*base, "--dataset", "breast_cancer"])
    assert "looks ';'-separated; the public CSV of a registered dataset is comma-separated" \
        in err


def test_a_u_row_equal_to_rows_of_two_labelled_sets_counts_once() -> None:
    """copies_of_labelled counts rows of U, not matches: a U row that a client and the test
    set both hold (and one a client holds twice) is one copy each; oracle: a set of tuples."""
    from fedlabels.data.public_set import copies_of_labelled

    rng = np.random.default_rng(0)
    client, test = rng.normal(size=(20, 3)), rng.normal(size=(10, 3))
    test[4] = client[7]
    client[9] = client[2]
    U = np.vstack([rng.normal(size=(5, 3)), client[7], client[2], test[0]])
    labelled = {tuple(r) for a in (client, test) for r in a}
    assert copies_of_labelled(U, [client, test]) == sum(tuple(r) in labelled for r in U) == 3


def test_a_column_partitions_site_column_may_be_left_out_of_u(tmp_path: Path) -> None:
    """With column:NAME the site column is no feature, so a public CSV need not hold it
    (a U of no site's); the clients are the sites all the same."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 240
    table = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                          "site": np.array(["north", "south", "west"])[np.arange(n) % 3],
                          "label": np.arange(n) % 2})
    table.to_csv(tmp_path / "t.csv", index=False)
    pd.DataFrame({"a": rng.normal(size=50), "b": rng.normal(size=50)}).to_csv(
        tmp_path / "u.csv", index=False)
    fed = fl.load_federation(f"csv:{tmp_path / 't.csv'}:label", clients=3,
                             partition="column:site", public=str(tmp_path / "u.csv"))
    assert fed.info["client_sites"] == ["north", "south", "west"]
    assert len(fed.X_public) == 50 and fed.feature_names == ["a", "b"]


def test_load_federation_refuses_sizes_of_a_drawn_u_beside_a_public_file(tmp_path: Path) -> None:
    """unlabeled (|U|) draws U from the labelled rows: beside public it is refused in one
    line, not ignored."""
    dataset, public, _ = _tables(tmp_path)
    with pytest.raises(FedLabelsError, match=r"unlabeled and unlabeled_shift draw U"):
        fl.load_federation(dataset, clients=3, public=str(public), unlabeled=50)
