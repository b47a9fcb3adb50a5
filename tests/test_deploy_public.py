"""``deploy prepare`` / a deployment with a public set of your own (``--public``): the shared
file carries U unchanged (the simulator's U, its SHA-256 the one the result records), z-scored
by the given U's own statistics, and no truth file (U has no labels)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from fedlabels.api import load_federation
from fedlabels.cli import main
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.runs.config import RunConfig


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def _tables(tmp_path: Path) -> tuple[str, Path, np.ndarray]:
    import sklearn.datasets

    frame = sklearn.datasets.load_breast_cancer(as_frame=True).frame
    frame.iloc[:300].to_csv(tmp_path / "private.csv", index=False)
    public = frame.iloc[300:].drop(columns=["target"])
    public.to_csv(tmp_path / "public.csv", index=False)
    return (f"csv:{tmp_path / 'private.csv'}:target", tmp_path / "public.csv",
            public.to_numpy(dtype=np.float64))


def test_deploy_prepare_ships_the_given_u(tmp_path: Path) -> None:
    dataset, public, raw = _tables(tmp_path)
    code = main(["deploy", "prepare", "--method", "fedct", "--dataset", dataset,
                 "--public", str(public), "--clients", "3", "--rounds", "1",
                 "--out-dir", str(tmp_path / "dep")])
    assert code == 0
    shared = np.load(tmp_path / "dep" / "shared.npz")
    fed = load_federation(dataset, clients=3, public=str(public), seed=0)
    assert np.array_equal(shared["X_public"], fed.X_public)  # the simulator's U
    digest = hashlib.sha256(shared["X_public"].tobytes()).hexdigest()
    assert digest == fed.info["public"]["sha256"]
    # a site's raw CSV rows are z-scored as U was: by the given U's own statistics
    np.testing.assert_allclose(shared["scale_mean"], raw.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(shared["scale_std"], raw.std(axis=0), rtol=1e-9)
    assert not (tmp_path / "dep" / "truth.npz").exists()  # U has no labels to write


def test_a_deployment_on_a_given_u_completes_and_records_it(tmp_path: Path) -> None:
    dataset, public, _ = _tables(tmp_path)
    cfg = RunConfig(method="fedct", dataset=dataset, public=str(public), clients=3,
                    model="dt", rounds=1, period=1, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None
    assert result.federation["public"]["path"] == str(public)
    assert result.federation["n_public"] == len(_tables(tmp_path)[2])
    assert all("consensus_accuracy" not in r.server for r in result.rounds)


def test_prepare_says_which_node_config_values_are_its_own_paths(tmp_path, capsys):
    """The printed node configs hold the coordinator's paths: the output names every key
    whose value is one of them, to be replaced on a site's own machine."""
    from fedlabels.engines.flower.prepare import prepare_run

    out = tmp_path / "run"
    assert main(["deploy", "prepare", "--method", "xclp", "--opt", "secure=ot", "--dataset",
                 "breast_cancer", "--clients", "3", "--out-dir", str(out), "--seed", "0"]) == 0
    printed = capsys.readouterr().out
    note = next(line for line in printed.splitlines() if "this machine's" in line)
    cfg = RunConfig(method="xclp", dataset="breast_cancer", clients=3, seed=0,
                    options={"secure": "ot"})
    settings = prepare_run(cfg, tmp_path / "again").node_settings(0)
    paths = [k for k, v in settings.items() if isinstance(v, str) and "/" in v]
    assert "identity-key" in paths and "ledger-dir" in paths
    assert all(f" {k}" in note for k in paths), (paths, note)
    assert str(out) in note
