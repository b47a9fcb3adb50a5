"""What ``deploy prepare`` writes keeps each site's data to itself: the sites' files are
0600 in a 0700 folder, the app's run config (which every site receives) holds no site's
record or class counts, U's true labels are written only where asked for, and a site's
ledger folder is 0700."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.server_app import run_server
from fedlabels.privacy.site_ledger import SiteLedger
from fedlabels.runs.config import RunConfig

if TYPE_CHECKING:
    import pandas as pd

    from fedlabels.engines.flower.prepare import PreparedRun

CFG = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=1,
                period=1, seed=0)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_prepared_files_keep_each_sites_data_to_itself(tmp_path: Path) -> None:
    prepared = prepare_run(CFG, tmp_path / "run", with_truth=False)
    assert _mode(prepared.root) == 0o700
    for path in prepared.client_paths:
        assert _mode(path) == 0o600, path
    assert not prepared.truth_path.exists()  # --no-truth: U's labels are not written
    sent = prepared.spec.to_json()  # what every site's ClientApp reads
    assert "client_class_counts" not in sent and "client_sizes" not in sent
    record = Path(prepared.spec.extra["federation_record"])
    assert _mode(record) == 0o600
    summary = prepared.spec.federation()  # the ServerApp's view: the record merged in
    assert summary["client_sizes"] == prepared.federation["client_sizes"]
    assert summary["client_class_counts"] == prepared.federation["client_class_counts"]
    for cid in range(len(prepared.client_paths)):  # a text file: it ends its last line
        plan = prepared.root / f"client_{cid}.plan.json"
        assert plan.read_text().endswith("}\n"), plan
        assert _mode(plan) == 0o600, plan  # site i's, as its data file (it was 0644)
    again = prepare_run(CFG, tmp_path / "run", with_truth=True)
    assert _mode(again.truth_path) == 0o600
    assert len(np.load(again.truth_path)["y_public"]) == summary["n_public"]


def test_the_deployed_result_still_records_the_sites_statistics(tmp_path: Path) -> None:
    prepared, grid = loopback_deployment(CFG, tmp_path / "sites")
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None
    assert result.federation["client_class_counts"] == \
        prepared.federation["client_class_counts"]
    assert json.loads(Path(prepared.spec.status).read_text())["status"] == "completed"


def test_a_site_ledger_folder_is_private(tmp_path: Path) -> None:
    X, y = np.zeros((4, 2)), np.array([0, 1, 0, 1])
    ledger = SiteLedger.open(tmp_path / "ledger", b"k" * 32, X, y, epsilon=None, delta=1e-5)
    assert _mode(tmp_path / "ledger") == 0o700 and _mode(ledger.path.parent) == 0o700
    assert _mode(ledger.path) == 0o600


def test_a_run_the_server_would_refuse_is_refused_before_any_file(tmp_path: Path) -> None:
    """DP-FedCT's noise-only default (its calibration needs no client) and FedMD without U's
    labels fail when the run is prepared, not after every process has started."""
    import pytest

    from fedlabels.core.errors import FedLabelsError

    noisy = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                      rounds=5, seed=0, options={"epsilon": 1.0})
    with pytest.raises(FedLabelsError, match="would flip each label bit"):
        prepare_run(noisy, tmp_path / "a")
    fedmd = RunConfig(method="fedmd", dataset="breast_cancer", clients=3,
                      model="mlp(hidden=8)", rounds=1, seed=0)
    with pytest.raises(FedLabelsError, match="labelled public set"):
        prepare_run(fedmd, tmp_path / "b", with_truth=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert prepare_run(fedmd, tmp_path / "c").spec.truth  # with U's labels it is prepared


def test_a_finished_or_foreign_run_is_refused_before_a_resume_starts(tmp_path: Path) -> None:
    """`deploy local --resume` of a completed run, or with other settings, was refused only
    by the ServerApp, after every process had started, and left a failed status over the
    completed run's; now it is refused before anything starts."""
    import pytest

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.deploy.resume_app import check_resumable

    prepared, grid = loopback_deployment(CFG, tmp_path / "sites")
    assert run_server(grid, server_context(prepared.spec)) is not None
    out = prepared.spec.output
    status_before = Path(prepared.spec.status).read_text()
    again = prepare_run(CFG, tmp_path / "sites", output=out)
    with pytest.raises(FedLabelsError, match=r"is a finished run \(1 round\(s\) run\); "
                                             r"nothing to resume"):
        check_resumable(again.spec, again.federation)
    other = prepare_run(replace_seed(CFG, 1), tmp_path / "other", output=out)
    data = json.loads(Path(out).read_text())
    data["deployment"]["status"] = "running"  # as a run stopped after its round is written
    Path(out).write_text(json.dumps(data))
    check_resumable(again.spec, again.federation)  # unfinished, the same settings
    with pytest.raises(FedLabelsError, match="the checkpoint is of another run: it differs "
                                             "in client_seeds, federation, seed"):
        check_resumable(other.spec, other.federation)
    assert Path(prepared.spec.status).read_text() == status_before  # nothing written


def replace_seed(cfg: RunConfig, seed: int) -> RunConfig:
    from dataclasses import replace

    return replace(cfg, seed=seed)


@pytest.mark.parametrize(("argv", "says"), [
    (["--method", "dp-fedct", "--opt", "epsilon=1", "--opt", "mechanism=xor"], True),
    (["--method", "dp-fedavg", "--model", "mlp(hidden=4)", "--opt", "level=record",
      "--opt", "epsilon=8"], True),
    (["--method", "fedct"], False),
    (["--method", "dp-fedavg", "--model", "mlp(hidden=4)", "--opt", "epsilon=8"], False),
])
def test_prepare_tells_sites_about_their_budget_where_they_release_with_their_own_noise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        says: bool) -> None:
    from fedlabels.cli import main

    assert main(["deploy", "prepare", "--dataset", "breast_cancer", "--clients", "3",
                 "--rounds", "2", *argv, "--out-dir", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert ("allows one run of its plan" in out) is says


def test_prepare_tells_the_sites_of_a_plug_in_method_that_releases_with_their_noise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint named dp-fedct and record-level dp-fedavg: a plug-in method whose sites
    release with their own noise (and so get the one-run budget) was left out. It now
    follows the sites' client role, as the site's ledger does."""
    from fedlabels.cli import main
    from fedlabels.methods import METHODS
    from fedlabels.methods.fedct.dp_fedct import DPFedCT

    class PluginDP(DPFedCT):
        name = "dp-plugin"

    monkeypatch.setitem(METHODS, "dp-plugin", PluginDP())
    assert main(["deploy", "prepare", "--dataset", "breast_cancer", "--clients", "3",
                 "--rounds", "2", "--method", "dp-plugin", "--opt", "epsilon=1", "--opt",
                 "mechanism=xor", "--out-dir", str(tmp_path / "d")]) == 0
    assert "allows one run of its plan" in capsys.readouterr().out


def _prepared_from_table(frame: pd.DataFrame, csv: Path, root: Path) -> PreparedRun:
    frame.to_csv(csv, index=False)
    cfg = RunConfig(method="fedct", dataset=f"csv:{csv}:label", clients=3, model="dt",
                    rounds=1, period=1, seed=0, unlabeled=200, test=100)
    return prepare_run(cfg, root, with_truth=False)


def _raw_row_of(frame: pd.DataFrame, prepared: PreparedRun, site: int) -> int:
    """The table's row that became site ``site``'s first private row (U's z-scoring undone)."""
    shared = np.load(prepared.shared_path)
    first = np.load(prepared.client_paths[site])["X"][0].astype(np.float64)
    raw = first * shared["scale_std"] + shared["scale_mean"]
    features = frame.drop(columns=["label"]).to_numpy(dtype=np.float64)
    return int(np.argmin(np.abs(features - raw).sum(axis=1)))


def _site_view(prepared: PreparedRun, site: int) -> dict[str, Any]:
    """What site ``site`` receives: its own file, U and the run config (paths aside)."""
    shared = np.load(prepared.shared_path)
    config = json.dumps(prepared.spec.to_json()).replace(str(prepared.root), "ROOT")
    return {"X": np.load(prepared.client_paths[site])["X"], "X_public": shared["X_public"],
            "config": config}


def test_one_sites_rows_reach_no_other_site(tmp_path: Path) -> None:
    """Change one private row of site 0 (or one test row): every other site's file, U and
    the run config every site receives stay as they were. The run config carried the
    U-vs-private distances of the pooled private rows (federation.unlabeled_shift: label TV
    against U's true labels, feature SMD), a statistic of every site's rows."""
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer(as_frame=True)
    frame = bunch.data.assign(label=bunch.target)
    csv = tmp_path / "table.csv"
    before = _prepared_from_table(frame, csv, tmp_path / "a")
    row = _raw_row_of(frame, before, site=0)
    changed = frame.copy()
    changed.iloc[row, :5] = changed.iloc[row, :5] * 3 + 1
    changed.loc[row, "label"] = 1 - changed.loc[row, "label"]
    after = _prepared_from_table(changed, csv, tmp_path / "b")
    assert not np.array_equal(np.load(before.client_paths[0])["X"],
                              np.load(after.client_paths[0])["X"])  # site 0's own row moved
    for site in (1, 2):
        mine, theirs = _site_view(before, site), _site_view(after, site)
        np.testing.assert_array_equal(mine["X"], theirs["X"])
        np.testing.assert_array_equal(mine["X_public"], theirs["X_public"])
        assert mine["config"] == theirs["config"]
    # the ServerApp's record still holds the distances, from the coordinator's own file
    assert set(after.spec.federation()["unlabeled_shift"]) >= {"label_tv", "feature_smd"}
    # a test row: no site's private rows, U or run config change either
    shared = np.load(before.shared_path)
    test_raw = (np.load(before.shared_path)["X_test"][0].astype(np.float64)
                * shared["scale_std"] + shared["scale_mean"])
    features = frame.drop(columns=["label"]).to_numpy(dtype=np.float64)
    test_row = int(np.argmin(np.abs(features - test_raw).sum(axis=1)))
    moved = frame.copy()
    moved.iloc[test_row, :5] = moved.iloc[test_row, :5] * 3 + 1
    tested = _prepared_from_table(moved, csv, tmp_path / "c")
    for site in (0, 1, 2):
        mine, theirs = _site_view(before, site), _site_view(tested, site)
        np.testing.assert_array_equal(mine["X"], theirs["X"])
        np.testing.assert_array_equal(mine["X_public"], theirs["X_public"])
        assert mine["config"] == theirs["config"]


@pytest.mark.parametrize("array", ["scale_mean", "scale_std", "feature_names"])
def test_sites_holding_shared_files_that_differ_beside_u_disagree_at_the_hello(
        tmp_path: Path, array: str) -> None:
    """A site's hello fingerprints U and the rest of its shared file: with the same U but
    another scaling (or names), its public_digest differs and the ServerApp refuses the
    sites as holding different shared files (before, only U was compared, so such a site
    trained on rows scaled otherwise without a word)."""
    from fedlabels.engines.flower.site import load_site

    prepared = prepare_run(CFG, tmp_path / "run", with_truth=False)
    digests = {load_site(prepared.node_settings(c)).public_digest() for c in range(3)}
    assert len(digests) == 1
    shared = dict(np.load(prepared.shared_path))
    other = shared[array].copy()
    other[0] = other[0] * 2 + 1 if other.dtype.kind == "f" else "renamed"
    np.savez(tmp_path / "other_shared.npz", **{**shared, array: other})
    moved = {**prepared.node_settings(1), "shared-path": str(tmp_path / "other_shared.npz")}
    site = load_site(moved)
    np.testing.assert_array_equal(site.X_public, load_site(prepared.node_settings(1)).X_public)
    assert site.public_digest() not in digests


def _numbered_table(tmp_path: Path) -> tuple[str, pd.DataFrame]:
    """A CSV of 600 rows: ``n`` the row's number, gaps in ``b``, a ``site`` column."""
    import pandas as pd

    rng = np.random.default_rng(3)
    n = 600
    frame = pd.DataFrame({"n": np.arange(n, dtype=float), "a": rng.normal(size=n),
                          "b": rng.normal(50, 10, n), "c": rng.normal(-3, 2, n),
                          "site": rng.choice(["north", "south", "east"], n)})
    frame["label"] = np.where(frame.a > 0, "yes", "no")
    frame.loc[rng.random(n) < 0.2, "b"] = np.nan
    path = tmp_path / "numbered.csv"
    frame.to_csv(path, index=False)
    return f"csv:{path}:label", frame


@pytest.mark.parametrize("settings", [
    {"partition": "column:site", "features": "n,a,b,c"},  # the column read, not a feature
    {"partition": "column:site"},
    {"unlabeled_shift": 0.3, "unlabeled": 60, "private": 200, "drop": "site"},  # U drawn shifted
], ids=["column-features", "column", "shift"])
def test_shared_scaling_is_the_one_that_scaled_the_sites_rows(tmp_path: Path,
                                                             settings: dict[str, Any]) -> None:
    """``shared.npz``'s U, ``scale_mean``/``scale_std`` and ``fill`` are those of the
    federation the sites' files were cut from: U's z-scoring undone gives the table's own
    rows (found by their number ``n``, gaps filled with ``fill``), whose mean, std and
    medians they are; and U is the simulator's (``fl.load_federation``) for the settings."""
    import fedlabels as fl

    dataset, frame = _numbered_table(tmp_path)
    cfg = RunConfig(method="fedct", dataset=dataset, clients=3, model="dt", rounds=1,
                    period=1, seed=2, missing="public-median", **settings)
    shared = np.load(prepare_run(cfg, tmp_path / "run", with_truth=False).shared_path)
    mean, std, fill = shared["scale_mean"], shared["scale_std"], shared["fill"]
    raw_u = shared["X_public"].astype(np.float64) * std + mean
    rows = np.rint(raw_u[:, 0]).astype(int)
    table = frame.loc[rows, ["n", "a", "b", "c"]].to_numpy(dtype=np.float64)
    np.testing.assert_array_equal(fill, np.nanmedian(table, axis=0))
    table = np.where(np.isnan(table), fill, table)
    np.testing.assert_allclose(raw_u, table, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean, table.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std, table.std(axis=0), rtol=1e-12)
    fed = fl.load_federation(dataset, clients=3, seed=2, missing="public-median", **settings)
    np.testing.assert_array_equal(shared["X_public"], fed.X_public)
