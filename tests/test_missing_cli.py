"""Gaps in a user's own table from the command line (``--missing``, TOML ``missing``) and
on Flower (``deploy prepare``: U's medians in ``shared.npz``, a site's raw CSV rows filled
with them), and ``fedlabels predict`` on new rows with gaps. The oracle of the fill is a
``nanmedian`` over U's raw rows, found by their row numbers (column ``n``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.config import RunConfig

FEATURES = ["n", "a", "b", "c"]


def _table(tmp_path: Path, seed: int = 0) -> tuple[str, pd.DataFrame]:
    """A CSV of 240 rows: ``n`` the row's number, gaps in ``b`` (30 %) and ``c`` (10 %)."""
    rng = np.random.default_rng(seed)
    n = 240
    frame = pd.DataFrame({"n": np.arange(n, dtype=float), "a": rng.normal(size=n),
                          "b": rng.normal(50, 10, n), "c": rng.normal(-3, 2, n)})
    frame["y"] = np.where(frame.a + (frame.b - 50) / 10 > 0, "yes", "no")
    frame.loc[rng.random(n) < 0.3, "b"] = np.nan
    frame.loc[rng.random(n) < 0.1, "c"] = np.nan
    path = tmp_path / "gaps.csv"
    frame.to_csv(path, index=False)
    return f"csv:{path}:y", frame


def _rows(X: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The row numbers of z-scored rows (column ``n`` read back)."""
    return np.rint(X[:, 0].astype(np.float64) * std[0] + mean[0]).astype(int)


def _us_medians(frame: pd.DataFrame, u_rows: np.ndarray) -> np.ndarray:
    return np.nanmedian(frame.loc[u_rows, FEATURES].to_numpy(dtype=float), axis=0)


def test_run_fills_gaps_from_the_command_line_and_records_it(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    """``--missing public-median`` (and TOML ``missing``) runs a table with gaps, recorded in
    the result's config, whose JSON reruns it; without it the error names the option."""
    dataset, _ = _table(tmp_path)
    args = ["run", "--dataset", dataset, "--clients", "3", "--rounds", "1", "--model", "dt",
            "-q", "--no-checkpoint"]
    assert main([*args, "-o", str(tmp_path / "refused.json")]) == 2
    err = capsys.readouterr().err
    assert "--missing public-median" in err and "whole table" in err and "_missing" in err
    assert main([*args, "--missing", "median", "-o", str(tmp_path / "x.json")]) == 2
    assert "missing must be one of refuse, public-median, got 'median'" in \
        capsys.readouterr().err
    assert main([*args, "--missing", "public-median", "-o", str(tmp_path / "cli.json")]) == 0
    result = json.loads((tmp_path / "cli.json").read_text())
    assert result["config"]["missing"] == "public-median"
    assert result["federation"]["missing"]["columns"] == ["b", "c"]
    toml = tmp_path / "run.toml"
    toml.write_text(f'dataset = "{dataset}"\nclients = 3\nrounds = 1\nmodel = "dt"\n'
                    'missing = "public-median"\n')
    assert main(["run", "--config", str(toml), "-q", "--no-checkpoint",
                 "-o", str(tmp_path / "toml.json")]) == 0
    from_toml = json.loads((tmp_path / "toml.json").read_text())
    assert from_toml["final"] == result["final"]
    again = fl.run_config(RunConfig.from_mapping(result["config"]), save=False)
    assert again.final == result["final"]  # the recorded config runs it again


def test_the_option_is_refused_where_it_cannot_apply_and_harmless_without_gaps() -> None:
    """Text and images have no numeric column to fill: refused naming why; a table without
    gaps federates as without the option (the medians are kept for predict)."""
    with pytest.raises(FedLabelsError, match="with text_column 't' are text"):
        RunConfig(dataset="csv:t.csv:y", text_column="t", missing="public-median")
    with pytest.raises(FedLabelsError, match="features of imagefolder:/no/such are images"):
        RunConfig(dataset="imagefolder:/no/such", missing="public-median")
    with pytest.raises(FedLabelsError, match="features of digits are images"):
        fl.load_federation("digits", clients=3, missing="public-median")
    with pytest.raises(FedLabelsError, match="features of X are text"):
        fl.make_federation(np.array(["a b", "c d"] * 30), np.array([0, 1] * 30), clients=2,
                           missing="public-median")
    with pytest.raises(FedLabelsError, match="missing must be one of"):
        fl.load_federation("wine", missing="median")
    from fedlabels.data.gaps import MISSING
    from fedlabels.runs.spec import by_name

    assert by_name(RunConfig)["missing"].choices == MISSING  # the CLI's and TOML's choices
    plain = fl.load_federation("wine", clients=3)
    filled = fl.load_federation("wine", clients=3, missing="public-median")
    for a, b in zip((plain.X_public, plain.X_test, *(c.X for c in plain.clients)),
                    (filled.X_public, filled.X_test, *(c.X for c in filled.clients)),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert filled.info["missing"]["columns"] == [] and "missing" not in plain.info


def test_a_public_set_of_your_own_may_have_gaps_with_the_fill(tmp_path: Path) -> None:
    """``--public`` U with empty cells: refused naming the option without it; with it, the
    fill is the median of the given U's own observed values."""
    dataset, frame = _table(tmp_path)
    private = tmp_path / "private.csv"
    frame.iloc[:150].to_csv(private, index=False)
    public = frame.iloc[150:][FEATURES]
    public.to_csv(tmp_path / "public.csv", index=False)
    dataset = f"csv:{private}:y"
    with pytest.raises(FedLabelsError, match=r"empty cells .* or --missing public-median"):
        fl.load_federation(dataset, clients=3, public=tmp_path / "public.csv")
    fed = fl.load_federation(dataset, clients=3, public=tmp_path / "public.csv",
                             missing="public-median")
    np.testing.assert_allclose(fed.preprocessing.fill,
                               np.nanmedian(public.to_numpy(dtype=float), axis=0))
    assert not np.isnan(fed.X_public).any()


def test_predict_fills_new_rows_gaps_with_the_saved_medians(tmp_path: Path) -> None:
    """``fedlabels predict`` on rows with gaps, in a column that had gaps in training and in
    one that had none, gives what the rows filled with U's medians give."""
    dataset, frame = _table(tmp_path)
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", dataset, "--clients", "3", "--rounds", "1", "--model",
                 "dt", "--missing", "public-median", "-q", "--no-checkpoint",
                 "-o", str(out)]) == 0
    fed = fl.load_federation(dataset, clients=3, missing="public-median")
    medians = _us_medians(frame, _rows(fed.X_public, fed.preprocessing.mean,
                                       fed.preprocessing.std))
    new = frame[FEATURES].iloc[:60].copy()
    new.loc[new.index[::2], "a"] = np.nan  # a column without gaps in training
    new.loc[new.index[::3], "b"] = np.nan
    filled = new.fillna(dict(zip(FEATURES, medians, strict=True)))
    other = new.fillna({"a": 5.0, "b": 100.0})  # a fill that is not U's
    predicted = {}
    for name, rows in (("gaps", new), ("filled", filled), ("other", other)):
        rows.to_csv(tmp_path / f"{name}.csv", index=False)
        assert main(["predict", str(out), str(tmp_path / f"{name}.csv"), "-q",
                     "-o", str(tmp_path / f"{name}.out.csv")]) == 0
        predicted[name] = pd.read_csv(tmp_path / f"{name}.out.csv")["prediction"].tolist()
    assert predicted["gaps"] == predicted["filled"]
    assert predicted["gaps"] != predicted["other"]  # the fill decides some predictions


def test_a_deployment_fills_each_sites_gaps_with_us_medians(tmp_path: Path) -> None:
    """``deploy prepare --missing public-median``: ``shared.npz`` holds U's medians (from U's
    rows only: changing a site's rows leaves them); a site's raw CSV rows with gaps become
    the rows the simulator gives it; the deployed run is the simulator's."""
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.engines.flower.site import load_site

    dataset, frame = _table(tmp_path)
    cfg = RunConfig(method="fedct", dataset=dataset, clients=3, model="dt", rounds=2,
                    seed=1, missing="public-median")
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    shared = dict(np.load(prepared.shared_path))
    mean, std = shared["scale_mean"], shared["scale_std"]
    np.testing.assert_allclose(shared["fill"],
                               _us_medians(frame, _rows(shared["X_public"], mean, std)))
    # which columns have a gap in the sites' rows stays out of what every site receives
    assert "columns" not in prepared.spec.extra["federation"]["missing"]
    simulated_fed = fl.load_federation(dataset, clients=3, seed=1, missing="public-median")
    npz_site = load_site(prepared.node_settings(0))
    np.testing.assert_array_equal(npz_site.private.X, simulated_fed.clients[0].X)
    site_rows = _rows(npz_site.private.X, mean, std)
    raw = frame.loc[site_rows]
    assert raw[FEATURES].isna().any().any()  # the site's own rows have gaps
    raw.to_csv(tmp_path / "site0.csv", index=False)
    csv_site = load_site({"partition-id": 0, "data-path": str(tmp_path / "site0.csv"),
                          "target": "y", "shared-path": str(prepared.shared_path)})
    np.testing.assert_allclose(csv_site.private.X, simulated_fed.clients[0].X, atol=1e-6)
    deployed = run_server(grid, server_context(prepared.spec))
    simulated = fl.run_config(cfg, save=False)
    assert deployed is not None and deployed.final == simulated.final
    assert [r.accuracies for r in deployed.rounds] == [r.accuracies for r in simulated.rounds]
    assert deployed.federation["missing"]["columns"] == ["b", "c"]  # the ServerApp's record
    # a site's rows (values and gaps) changed: the shared medians and U stay as they were
    changed = frame.copy()
    changed.loc[site_rows, ["b", "c"]] = [[np.nan, 1e4]] * len(site_rows)
    changed.to_csv(tmp_path / "gaps.csv", index=False)
    assert main(["deploy", "prepare", "--method", "fedct", "--dataset", dataset, "--clients",
                 "3", "--model", "dt", "--rounds", "2", "--seed", "1", "--missing",
                 "public-median", "--out-dir", str(tmp_path / "again")]) == 0
    again = np.load(tmp_path / "again" / "shared.npz")
    np.testing.assert_array_equal(again["fill"], shared["fill"])
    np.testing.assert_array_equal(again["X_public"], shared["X_public"])


def test_a_csv_tables_gaps_are_named_by_its_file_and_column(tmp_path: Path, capsys) -> None:
    """From the command line a CSV with an empty cell was refused as 'X contains non-finite
    values (1 NaN) in column(s) b', Python's name for the table: the line names the CSV
    file, its columns and the first gap's data row; the Python API on a DataFrame keeps X."""
    dataset, frame = _table(tmp_path)
    path = dataset.split(":")[1]
    first = int(np.flatnonzero(frame["b"].isna().to_numpy())[0]) + 1
    assert main(["run", "--dataset", dataset, "--clients", "3", "--rounds", "1",
                 "--model", "dt", "-o", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert (f"CSV file {path} has empty cells in column(s) 'b' ({int(frame.b.isna().sum())}),"
            f" 'c' ({int(frame.c.isna().sum())}) (the first in column 'b', data row {first})"
            in err and "--missing public-median" in err and err.count("\n") == 1)
    text = frame.assign(a=np.where(np.arange(len(frame)) == 7, None,
                                   np.where(frame.a > 0, "hi", "lo")))
    text.to_csv(tmp_path / "text.csv", index=False)
    with pytest.raises(FedLabelsError, match=r"text\.csv has empty cells in column\(s\) 'a' "
                       r"\(1\) \(the first in column 'a', data row 8\); write a category"):
        fl.load_federation(f"csv:{tmp_path / 'text.csv'}:y", clients=3,
                           missing="public-median")
    with pytest.raises(FedLabelsError, match=r"^X contains non-finite values"):
        fl.make_federation(frame.drop(columns="y"), frame.y, clients=3)


def test_a_csv_tables_gaps_and_a_python_tables_are_one_check(tmp_path: Path,
                                                             monkeypatch) -> None:
    """loading.check_table_gaps repeated as_feature_matrix's check of a table's gaps (its
    categorical ones) in a copy of its own; both go through data.gaps.check_frame_gaps, a
    csv: table's worded by its file, a DataFrame's by Python's name."""
    import fedlabels.data.gaps as gaps

    seen: list[str | None] = []
    check = gaps.check_frame_gaps

    def recorded(frame, categorical, fills, what="X", source=None):
        seen.append(source)
        return check(frame, categorical, fills, what, source)

    monkeypatch.setattr(gaps, "check_frame_gaps", recorded)
    dataset, frame = _table(tmp_path)
    path = dataset.split(":")[1]
    with pytest.raises(FedLabelsError, match=f"CSV file {path} has empty cells"):
        fl.load_federation(dataset, clients=3)
    text = frame.assign(a=np.where(np.arange(len(frame)) == 7, None, "x")).drop(columns="y")
    with pytest.raises(FedLabelsError, match=r"^X has missing values in categorical column\(s\) "
                                             r"'a' \(1 row\)"):
        fl.make_federation(text, frame.y, clients=3, missing="public-median")
    assert seen == [path, None]
