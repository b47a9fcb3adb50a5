"""``fedlabels deploy ledger``: a site operator reads what the site released, checked under
its key, after a real (loopback) deployment; a tampered ledger is reported, not trusted."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from fedlabels.cli import main
from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY
from fedlabels.runs.config import RunConfig


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    cfg = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                    rounds=2, seed=0, options={"epsilon": 1.0, "mechanism": "xor"})
    root = tmp_path_factory.mktemp("ledger") / "sites"
    prepared, first = loopback_deployment(cfg, root)
    configs = [dict(c.node_config) for c in first.contexts.values()]
    grid = LoopbackGrid(client_app, configs, {RUN_CONFIG_KEY: prepared.spec.to_json()})
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None
    return root, result


def _ledger(root: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["deploy", "ledger", "--ledger-dir", str(root / "client_1.ledger"),
                 "--state-key", str(root / "client_1.state.key"), *extra])
    return code, capsys.readouterr().out


def test_the_operator_sees_the_releases_the_spend_and_the_plan_budget(
        deployed: tuple[Path, Any], capsys: pytest.CaptureFixture[str]) -> None:
    root, result = deployed
    code, out = _ledger(root, "--json", capsys=capsys)
    assert code == 0
    (row,) = json.loads(out)["datasets"]
    eps = result.extra["privacy"]["epsilon"]
    assert row["releases"] == 2 and row["noiseless_answers"] == 0 and row["runs"] == 1
    assert row["epsilon"] == pytest.approx(eps, rel=1e-6)
    assert row["plan_budget"] == pytest.approx(eps, rel=1e-6)  # one run of the plan
    assert (row["budget"], row["budget_from"]) == (row["plan_budget"], "privacy-plan")
    assert abs(row["left"]) < 1e-9 * eps  # the run spent all of its one run
    assert row["delta"] == 1e-5
    code, table = _ledger(root, capsys=capsys)
    assert code == 0 and row["dataset"] in table and "privacy-plan" in table
    assert f"{row['budget']:.4g}" in table


def test_a_tampered_ledger_is_reported_and_the_command_fails(
        deployed: tuple[Path, Any], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    import shutil

    root, _ = deployed
    copy = tmp_path / "sites"
    shutil.copytree(root, copy)
    path = next((copy / "client_1.ledger").glob("*/ledger.jsonl"))
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if '"event"' in line)
    entry = json.loads(lines[i])
    entry["entry"]["event"]["flip_probability"] = 0.49  # a smaller spend, forged
    lines[i] = json.dumps(entry)
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    code, out = _ledger(copy, capsys=capsys)
    assert code == 1 and "FAILED" in out and "integrity check" in out


@pytest.mark.parametrize("what", ["key", "dir"])
def test_a_missing_key_or_folder_is_one_line_and_nothing_is_made(
        deployed: tuple[Path, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path,
        what: str) -> None:
    root, _ = deployed
    key = tmp_path / "no.key" if what == "key" else root / "client_1.state.key"
    folder = tmp_path / "nowhere" if what == "dir" else root / "client_1.ledger"
    code = main(["deploy", "ledger", "--ledger-dir", str(folder), "--state-key", str(key)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"--{'state-key' if what == 'key' else 'ledger-dir'}" in err
    assert not key.exists() if what == "key" else not folder.exists()


def test_resume_of_a_deployment_points_to_deploy_local(
        deployed: tuple[Path, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """`fedlabels resume` on a deployed run's result: one line saying how such a run is
    resumed (it said the checkpoint was of another run, differing in data and engine)."""
    root, _ = deployed
    assert (root / "result.checkpoint.npz").exists()
    assert main(["resume", str(root / "result.json"), "--rounds", "3"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint of a Flower deployment" in err and "deploy local --resume" in err
