"""Faults of a Flower deployment, without processes (the real ServerApp loop and ClientApp over
the loopback grid): a ServerApp that dies mid-round and is resumed in a new Flower run, a
SuperNode that restarts (its ``context.state`` gone) and rejoins, one exchange per round, and
the launcher's status file. The same faults over real processes are in
``test_flower_deploy.py`` (slow)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message, RecordDict

from fedlabels.api import run_config
from fedlabels.core.errors import FedLabelsError
from fedlabels.deploy.launcher import LocalDeployment, read_outcome, resumable
from fedlabels.deploy.processes import alive, finalise_status
from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.server_app import run_server, server_state_path
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY
from fedlabels.results import RunResult
from fedlabels.runs.checkpoint import checkpoint_path
from fedlabels.runs.config import RunConfig


class Crash(BaseException):
    """The ServerApp process dies (nothing in it may catch this)."""


class CrashingGrid(LoopbackGrid):
    """Dies when pulling the replies of its ``crash_at``-th exchange: the clients have handled
    that exchange's messages, the server has not seen the replies."""

    def __init__(self, *args: Any, crash_at: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.crash_at, self.pushes = crash_at, 0

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        self.pushes += 1  # one push per exchange; its replies are pulled one at a time
        return super().push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        if self.pushes == self.crash_at:
            raise Crash
        return super().pull_messages(message_ids)


def _same(deployed: RunResult, simulated: RunResult) -> None:
    assert [r.accuracies for r in deployed.rounds] == [r.accuracies for r in simulated.rounds]
    assert [{k: v for k, v in r.server.items() if k != "clients_alive"}
            for r in deployed.rounds] == [r.server for r in simulated.rounds]
    assert [(r.bytes_up, r.bytes_down) for r in deployed.rounds] == \
        [(r.bytes_up, r.bytes_down) for r in simulated.rounds]


def _new_run(grid: LoopbackGrid, spec_json: str, cls: type[LoopbackGrid] = LoopbackGrid,
             **kw: Any) -> LoopbackGrid:
    """A new Flower run on the same sites: the same node configs, empty ``context.state``."""
    configs = [dict(c.node_config) for c in grid.contexts.values()]
    return cls(client_app, configs, {RUN_CONFIG_KEY: spec_json}, **kw)


@pytest.mark.parametrize("clients, quorum", [(3, None), (4, 1.0)])
def test_serverapp_crash_mid_round_then_resume_equals_simulator(
        tmp_path: Path, clients: int, quorum: float | None) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=clients, model="dt",
                    rounds=4, seed=5, options={} if quorum is None else {"quorum": quorum})
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    spec = prepared.spec
    # exchanges: hello, round 1, round 2, round 3 <- dies pulling its replies, after the
    # sites handled round 3
    crashing = _new_run(first, spec.to_json(), CrashingGrid, crash_at=4)
    with pytest.raises(Crash):
        run_server(crashing, server_context(spec))
    status = json.loads(Path(spec.status).read_text())
    assert status["status"] == "running" and status["rounds_done"] == 2  # as after a SIGKILL
    assert checkpoint_path(spec.output).is_file()

    resumed_spec = replace(spec, resume=True)
    grid = _new_run(first, resumed_spec.to_json())  # a new Flower run: no context.state
    deployed = run_server(grid, server_context(resumed_spec, run_id=43))
    simulated = run_config(cfg)
    assert deployed is not None
    _same(deployed, simulated)
    assert deployed.final == simulated.final
    assert deployed.extra["provenance"]["resumed"][0]["from_round"] == 2
    assert deployed.extra["deployment"]["status"] == "completed"
    assert json.loads(Path(spec.status).read_text())["status"] == "completed"
    with np.load(server_state_path(spec.output)) as arrays:
        assert arrays["labels"].shape == (simulated.federation["n_public"],)


class Restarting(LoopbackGrid):
    """Site 1's SuperNode restarts (same key, so the same node id; its ``context.state`` is
    gone) before round 3."""

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        batch = list(messages)
        if batch and batch[0].content.config_records["fedlabels"].get("round") == 2:
            self.contexts[1002].state = RecordDict()
        return super().push_messages(batch)


def test_restarted_supernode_rejoins_from_its_snapshot(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=3,
                    seed=2)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    restarting = _new_run(grid, prepared.spec.to_json(), Restarting)
    deployed = run_server(restarting, server_context(prepared.spec))
    assert deployed is not None
    _same(deployed, run_config(cfg))
    assert deployed.extra["deployment"]["lost"] == {}


def test_site_without_state_dir_cannot_rejoin_and_is_lost(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=4, model="dt", rounds=3,
                    seed=2, options={"quorum": 1.0})
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    restarting = _new_run(grid, prepared.spec.to_json(), Restarting)
    del restarting.contexts[1002].node_config["state-dir"]
    result = run_server(restarting, server_context(prepared.spec))
    assert result is not None
    lost = result.extra["deployment"]["lost"]
    # the server learns the category; the hint stays in the site's log
    assert list(lost) == ["1"] and lost["1"]["round"] == 3 and "error:" in lost["1"]["reason"]
    assert "state-dir" not in lost["1"]["reason"]
    assert result.extra["deployment"]["alive_per_round"] == [[0, 1, 2, 3], [0, 1, 2, 3],
                                                             [0, 2, 3]]


def test_one_exchange_per_round_with_evaluation(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=3,
                    seed=1, eval_every=2)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    pushed: list[str] = []
    push = grid.push_messages

    def counting(messages: Iterable[Message]) -> Iterable[str]:
        batch = list(messages)
        pushed.extend(m.metadata.message_type for m in batch)
        return push(batch)

    grid.push_messages = counting  # type: ignore[method-assign]
    deployed = run_server(grid, server_context(prepared.spec))
    assert deployed is not None
    _same(deployed, run_config(cfg))
    # 3 hellos, then 3 messages per round; no separate evaluation messages
    assert len(pushed) == 3 + 3 * 3
    assert not any(t.startswith("evaluate.") for t in pushed)
    assert [r.accuracies is not None for r in deployed.rounds] == [False, True, True]


def test_status_is_finalised_only_when_the_serverapp_could_not(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"status": "running", "rounds_done": 2}))
    finalise_status(path, "failed", "the ServerApp was killed")
    assert json.loads(path.read_text()) == {"status": "failed", "rounds_done": 2,
                                            "error": "the ServerApp was killed"}
    finalise_status(path, "interrupted", "later")  # a final status stays
    assert json.loads(path.read_text())["status"] == "failed"
    missing = tmp_path / "none.json"
    finalise_status(missing, "interrupted", "stopped before the ServerApp started")
    assert json.loads(missing.read_text())["status"] == "interrupted"
    # the launcher knows better than an orphaned ServerApp stopped after its SuperLink died
    finalise_status(missing, "failed", "the SuperLink died", replace=True)
    assert json.loads(missing.read_text())["error"] == "the SuperLink died"
    path.write_text(json.dumps({"status": "completed"}))
    finalise_status(path, "failed", "the SuperLink died", replace=True)  # never a completed
    assert json.loads(path.read_text())["status"] == "completed"


def test_the_launcher_says_how_its_superlink_died(tmp_path: Path) -> None:
    import subprocess
    import sys

    prepared = prepare_run(SMALL, tmp_path / "sites", output=tmp_path / "result.json")
    dep = LocalDeployment(prepared, tmp_path)
    assert dep.superlink_death() is None  # none started
    link = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dep.procs["superlink"] = link
    assert dep.superlink_death() is None  # running
    link.kill()
    link.wait()
    assert dep.superlink_death() == f"the SuperLink (pid {link.pid}) died during the run " \
                                    "(killed by signal 9)"


# ------------------------------------------------------------------ real processes (slow)

def _wait_for(predicate: Any, timeout: float, what: str,
              dep: LocalDeployment | None = None,
              runner: threading.Thread | None = None) -> None:
    """Wait for ``predicate``; on a timeout, or once ``runner`` (the submitting thread) ended
    without it, fail with the tail of every log of ``dep`` (what each process said)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        ended = runner is not None and not runner.is_alive()
        if ended or time.monotonic() > deadline:
            why = "the run ended" if ended else "timed out"
            pytest.fail(f"{why} waiting for {what}\n{'' if dep is None else _logs(dep)}")
        time.sleep(0.2)


def _logs(dep: LocalDeployment) -> str:
    """The status file and the tail of every process's log (for a failure's message)."""
    status = dep.status_path.read_text() if dep.status_path.exists() else "(none)"
    return f"--- status: {status}\n" + "\n".join(
        f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(dep.logs.glob("*.log")))


def _rounds_done(dep: LocalDeployment) -> int:
    try:
        return int(json.loads(dep.status_path.read_text()).get("rounds_done", 0))
    except (OSError, ValueError):
        return 0


def _start_run(dep: LocalDeployment, outcome: dict[str, int]) -> threading.Thread:
    runner = threading.Thread(target=lambda: outcome.update(code=dep.run_app(400)),
                              daemon=True)
    runner.start()
    return runner


@contextmanager
def _past_round_1(cfg: RunConfig, tmp_path: Path, **deployment: Any
                  ) -> Iterator[tuple[LocalDeployment, threading.Thread, dict[str, int]]]:
    """``cfg`` deployed over real processes and submitted, once its round 1 is done: the
    deployment, the thread waiting on ``flwr run`` and the dict its exit code goes to."""
    prepared = prepare_run(cfg, tmp_path / "sites", output=tmp_path / "result.json",
                           reply_timeout=120, node_timeout=60)
    outcome: dict[str, int] = {}
    with LocalDeployment(prepared, tmp_path, **deployment) as dep:
        dep.start()
        runner = _start_run(dep, outcome)
        _wait_for(lambda: _rounds_done(dep) >= 1, 300, "round 1", dep, runner)
        yield dep, runner, outcome


SMALL = RunConfig(method="fedct", dataset="breast_cancer", clients=2, model="dt", rounds=3,
                  seed=3, options={"quorum": 1.0})  # a qualified majority runs with 2 sites


@pytest.mark.slow
@pytest.mark.realprocess
@pytest.mark.parametrize("crash", ["serverapp", "superlink"])
def test_crash_then_resume_over_processes_equals_simulator(tmp_path: Path, crash: str) -> None:
    """SIGKILL the ServerApp (or the SuperLink, whose ServerApp child is then orphaned) after
    round 1; nothing is left behind, and the run resumed from its checkpoint (a new Flower
    run, on a SuperLink restarted with the same database) ends with the simulator's result."""
    with _past_round_1(SMALL, tmp_path, database=tmp_path / "link.db") as (dep, runner,
                                                                          outcome):
        prepared = dep.prepared
        serverapps = dep.serverapp_pids()
        assert serverapps
        if crash == "serverapp":
            for pid in serverapps:
                os.kill(pid, signal.SIGKILL)
        else:
            dep.kill_superlink()
            dep.reap_orphans()  # the orphaned flwr-serverapp is ours (subreaper): stopped
            assert not any(alive(pid) for pid in serverapps)
            dep.restart_superlink()
        dep.stop_process("flwr_run")
        runner.join(timeout=60)
        # SIGKILL: the ServerApp could say nothing, the launcher does; an orphan stopped
        # with SIGTERM says it was interrupted
        expected = "running" if crash == "serverapp" else "interrupted"
        assert json.loads(dep.status_path.read_text())["status"] == expected
        finalise_status(dep.status_path, "failed", "killed")
        assert json.loads(dep.status_path.read_text())["status"] == \
            ("failed" if crash == "serverapp" else "interrupted")

        dep.prepared = resumable(prepared)
        assert len(dep.unfinished_runs) == 1  # the killed run, stopped before the resume
        runner = _start_run(dep, outcome)
        runner.join(timeout=400)
        assert not runner.is_alive(), _logs(dep)
        assert "successfully stopped" in (dep.logs / "flwr_stop.log").read_text(), _logs(dep)
        assert dep.unfinished_runs == [], _logs(dep)  # the resumed run completed
        result = read_outcome(dep.prepared, outcome["code"], dep.logs)
        pids = dep.tracked()
    simulated = run_config(SMALL)
    _same(result, simulated)
    assert result.extra["provenance"]["resumed"][0]["from_round"] >= 1
    assert result.extra["deployment"]["status"] == "completed"
    assert not any(alive(pid) for pid in pids)


@pytest.mark.slow
@pytest.mark.realprocess
def test_restarted_supernode_process_rejoins_and_nothing_survives(tmp_path: Path) -> None:
    """A SuperNode restarted after round 1 (insecure mode: a new node id) says who it is, takes
    its client's place and restores its state from its state-dir; the result is the
    simulator's. Then a SIGKILLed SuperLink: every process is still stopped."""
    with _past_round_1(SMALL, tmp_path) as (dep, runner, outcome):
        dep.restart_supernode(1)
        runner.join(timeout=400)
        result = read_outcome(dep.prepared, outcome["code"], dep.logs)
        dep.kill_superlink()
        pids = dep.tracked()
    _same(result, run_config(SMALL))
    assert result.extra["deployment"]["lost"] == {}
    assert not any(alive(pid) for pid in pids)


def test_deploy_local_resume_needs_the_runs_workdir_and_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fedlabels.cli import main

    base = ["deploy", "local", "--method", "fedct", "--dataset", "breast_cancer",
            "--clients", "3", "--model", "dt", "--output", str(tmp_path / "r.json"), "--resume"]
    assert main(base) == 2
    assert "--workdir" in capsys.readouterr().err
    assert main([*base, "--workdir", str(tmp_path / "w")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("shared", ["output", "workdir"])
def test_a_second_deployment_of_a_running_output_or_workdir_is_refused(
        tmp_path: Path, shared: str) -> None:
    """Two `deploy local` of one output (or one workdir) at once both ran, writing one
    result, status and checkpoint (or one site's state) from two ServerApps. The second is
    refused now, in one line, before anything is prepared or started."""
    from fedlabels.deploy.launcher import deploy_local
    from fedlabels.runs.run_lock import checkpoint_lock

    first_out, first_work = tmp_path / "a" / "r.json", tmp_path / "wa"
    held = checkpoint_path(first_out) if shared == "output" else first_work / "deployment"
    out = first_out if shared == "output" else tmp_path / "b" / "r.json"
    work = first_work if shared == "workdir" else tmp_path / "wb"
    with checkpoint_lock(held), \
            pytest.raises(FedLabelsError, match="belongs to a run still going in another "
                                                f"process \\(pid {os.getpid()}\\)"):
        deploy_local(SMALL, workdir=work, output=out, timeout=5)
    assert not (work / "sites").exists() and not (work / "logs").exists()


def test_a_run_flower_ends_says_interrupted(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`flwr stop` ends the ServerApp through Flower's own signal handler, which raises
    SystemExit in the middle of a round: the status says interrupted (it said nothing, and
    the launcher then called it a crash)."""
    import fedlabels.engines.flower.server_app as server_app

    prepared, grid = loopback_deployment(SMALL, tmp_path / "sites")
    calls = {"n": 0}
    push = type(grid).push_messages

    def stopped_later(self, messages):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 2:  # hello, round 1: then Flower exits the task
            raise SystemExit(0)
        return push(self, messages)

    monkeypatch.setattr(type(grid), "push_messages", stopped_later)
    with pytest.raises(SystemExit):
        server_app.run_server(grid, server_context(prepared.spec))
    status = json.loads(Path(prepared.spec.status).read_text())
    assert status["status"] == "interrupted" and "flwr stop" in status["error"]


@pytest.mark.realprocess
def test_flwr_stop_is_recorded_as_interrupted_over_processes(tmp_path: Path) -> None:
    """`flwr stop` of a running deployment: the ServerApp's status says interrupted and
    names Flower (it was left running, then finalised as a crash)."""
    from dataclasses import replace

    with _past_round_1(replace(SMALL, rounds=200), tmp_path) as (dep, runner, _):
        run_id = dep._submitted_run_id()
        assert run_id is not None
        dep.unfinished_runs.append(run_id)
        dep.stop_unfinished_runs()  # `flwr stop <run-id> fedlabels-local`
        _wait_for(lambda: json.loads(dep.status_path.read_text())["status"] != "running",
                  120, "a final status", dep)
        status = json.loads(dep.status_path.read_text())
        runner.join(timeout=60)
        executors = "".join(p.read_text() for p in dep.logs.glob("site_exec_*.log"))
    assert status["status"] == "interrupted", status
    assert "RuntimeWarning" not in executors  # runpy's, once per task, when it preloaded itself
    assert "stopped by Flower (flwr stop" in status["error"], status
