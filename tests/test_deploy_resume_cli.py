"""``fedlabels deploy resume``: the app that resumes a deployed run, through the CLI, from the
checkpoint of a real run (the ServerApp loop and ClientApp over the loopback grid) that died
after its first round; the resumed app's run gives the simulator's result."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Message

from fedlabels.api import run_config
from fedlabels.cli import main
from fedlabels.deploy.resume_app import read_app_spec
from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY
from fedlabels.runs.checkpoint import checkpoint_path
from fedlabels.runs.config import RunConfig

CFG = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=3,
                seed=5)


class Crash(BaseException):
    """The ServerApp process dies."""


class DiesInRound2(LoopbackGrid):
    """Dies pulling the replies of its third exchange (hello, round 1, round 2)."""

    pushes = 0

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        self.pushes += 1
        return super().push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        if self.pushes == 3:
            raise Crash
        return super().pull_messages(message_ids)


def _grid(first: LoopbackGrid, spec_json: str, cls: type[LoopbackGrid] = LoopbackGrid,
          ) -> LoopbackGrid:
    """A new Flower run on the same sites (their node configs, empty ``context.state``)."""
    configs = [dict(c.node_config) for c in first.contexts.values()]
    return cls(client_app, configs, {RUN_CONFIG_KEY: spec_json})


def _deploy(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    code = main(["deploy", "resume", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_deploy_resume_writes_the_app_that_continues_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prepared, first = loopback_deployment(CFG, tmp_path / "sites")
    app, spec = prepared.app_dir, prepared.spec
    submitted = (app / "pyproject.toml").read_text()
    with pytest.raises(Crash):
        run_server(_grid(first, spec.to_json(), DiesInRound2), server_context(spec))
    assert checkpoint_path(spec.output).is_file()

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    code, _, err = _deploy(capsys, app, "--out-dir", taken)  # not empty: not written
    assert code == 2 and "not empty; pass --overwrite" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]

    code, out, err = _deploy(capsys, app, "--out-dir", tmp_path / "resume")
    assert code == 0, err
    assert f"after round 1 of 3 (checkpoint {checkpoint_path(spec.output)})" in out
    assert f"flwr run {tmp_path / 'resume'} <connection> --stream" in out
    assert (app / "pyproject.toml").read_text() == submitted  # the submitted app as it was
    resumed = read_app_spec(tmp_path / "resume")
    assert resumed == replace(spec, resume=True)

    deployed = run_server(_grid(first, resumed.to_json()), server_context(resumed, run_id=43))
    simulated = run_config(CFG)
    assert deployed is not None
    assert [r.accuracies for r in deployed.rounds] == [r.accuracies for r in simulated.rounds]
    assert deployed.final == simulated.final
    assert deployed.extra["provenance"]["resumed"][0]["from_round"] == 1

    # the run is finished now: nothing to resume, nothing written
    code, _, err = _deploy(capsys, app, "--out-dir", tmp_path / "again")
    assert code == 2 and "is a finished run (3 round(s) run); nothing to resume" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "again").exists()


def test_deploy_resume_refuses_a_checkpoint_of_another_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prepared, first = loopback_deployment(CFG, tmp_path / "sites")
    spec = prepared.spec
    code, _, err = _deploy(capsys, prepared.app_dir, "--out-dir", tmp_path / "early")
    assert code == 2 and "there is no checkpoint" in err and len(err.splitlines()) == 1
    with pytest.raises(Crash):
        run_server(_grid(first, spec.to_json(), DiesInRound2), server_context(spec))
    # another deployment (other sites, another seed) whose result goes to the same file
    other = prepare_run(replace(CFG, seed=6, clients=4), tmp_path / "other",
                        output=spec.output, overwrite=True)
    status = Path(spec.status).read_text()
    code, _, err = _deploy(capsys, other.app_dir, "--out-dir", tmp_path / "wrong")
    assert code == 2 and len(err.splitlines()) == 1
    assert "the checkpoint is of another run: it differs in client_seeds, federation, " \
        "models, seed;" in err
    assert not (tmp_path / "wrong").exists() and Path(spec.status).read_text() == status
    assert json.loads(Path(spec.status).read_text())["status"] == "running"


@pytest.mark.parametrize(("make", "says"), [
    (lambda d: None, "holds no Flower app"),
    (lambda d: (d / "pyproject.toml").write_text("[project]\nname = 'x'\n"),
     "is not a Flower app's pyproject.toml"),
    (lambda d: (d / "pyproject.toml").write_text(
        "[tool.flwr.app.config]\nfedlabels = \"{not json\"\n"), "is not a fedlabels run spec"),
])
def test_deploy_resume_refuses_a_folder_that_is_no_app(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, says: str) -> None:
    app = tmp_path / "app"
    app.mkdir()
    make(app)
    code, _, err = _deploy(capsys, app, "--out-dir", tmp_path / "out")
    assert code == 2 and says in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
