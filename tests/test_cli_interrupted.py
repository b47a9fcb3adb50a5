"""Commands stopped mid-run (Ctrl-C, 2026-11-29 walk): `fedlabels deploy local` printed only
"files and logs kept in DIR" and "interrupted", not how to continue, and its round lines went
to stdout, where `fedlabels run` keeps only the table and the paths; `fedlabels demo` went on
with its other runs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from fedlabels.cli import main

BASE = ["deploy", "local", "--dataset", "wine", "--clients", "3", "--rounds", "4"]


@pytest.fixture
def fake_deploy(monkeypatch) -> list[dict[str, Any]]:
    """``deploy_local`` replaced by one that starts nothing: it records its arguments, makes
    the logs folder, checkpoints round 1 beside the output and is interrupted there."""
    import fedlabels.deploy.launcher as launcher
    from fedlabels.runs.checkpoint import checkpoint_path

    calls: list[dict[str, Any]] = []

    def interrupted(cfg: Any, *, workdir: Path, output: Path, **kwargs: Any) -> Any:
        calls.append({"workdir": Path(workdir), "output": Path(output), **kwargs})
        (Path(workdir) / "logs").mkdir(parents=True, exist_ok=True)
        if kwargs.get("timeout") != 1.0:  # --timeout 1: stopped before round 1 ended
            Path(output).parent.mkdir(parents=True, exist_ok=True)
            checkpoint_path(output).write_bytes(b"round 1")
        raise KeyboardInterrupt

    monkeypatch.setattr(launcher, "deploy_local", interrupted)
    return calls


@pytest.mark.parametrize("given", [[], ["--workdir", "W"], ["-o", "r.json"],
                                   ["--workdir", "W", "-o", "r.json"]])
def test_an_interrupted_deployment_says_how_to_resume(given: list[str], fake_deploy, tmp_path,
                                                      monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*BASE, *given]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "fedlabels: interrupted", err
    first = fake_deploy[0]
    assert err[-2].startswith(f"fedlabels: its completed rounds are checkpointed beside "
                              f"{first['output']}: the same command with ")
    flags = shlex.split(err[-2].split(" with ", 1)[1].split(" added ")[0])
    # the command as the line says continues that run: same workdir, same output, resumed
    assert main([*BASE, *given, *flags]) == 130
    again = fake_deploy[1]
    assert again["resume"] is True and not first["resume"]
    assert again["workdir"] == first["workdir"] and again["output"] == first["output"]
    assert "the same command again continues the run" in capsys.readouterr().err


def test_no_resume_line_before_a_round_completed(fake_deploy, tmp_path, monkeypatch,
                                                 capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*BASE, "--timeout", "1"]) == 130
    err = capsys.readouterr().err
    assert "checkpointed" not in err and err.strip().endswith("fedlabels: interrupted")


def test_round_lines_go_to_stderr_and_not_with_quiet(tmp_path, capsys) -> None:
    from fedlabels.core.verbosity import NORMAL, QUIET, set_verbosity
    from fedlabels.deploy.launcher import _echo_progress

    log = tmp_path / "flwr_run.log"
    lines = ["INFO : starting", "fedlabels: round 1/4 done in 3.1 s, mean accuracy 0.85",
             "fedlabels: resuming after round 1 from r.checkpoint.npz"]
    log.write_text("\n".join(lines) + "\npartial")
    assert _echo_progress(log, 0) == len("\n".join(lines)) + 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.splitlines() == lines[1:]
    set_verbosity(QUIET)
    try:
        _echo_progress(log, 0)
    finally:
        set_verbosity(NORMAL)
    out = capsys.readouterr()
    assert out.out == "" and out.err.splitlines() == lines[2:]


@pytest.mark.parametrize("progress", [False, True])
def test_the_servers_warning_reaches_the_console_once_progress_or_not(
        tmp_path, monkeypatch, capsys, progress) -> None:
    """``deploy local --method pate --rounds 3 --no-progress`` (and the Python API, whose
    progress is off) left the ServerApp's "pate uses 1 round(s)" in logs/flwr_run.log only:
    the log was read for progress alone. It is warned in the launching process, progress or
    not, so the CLI prints it as one line (and with progress not a second time); the round
    lines still follow progress."""
    import subprocess
    import sys
    import warnings
    from types import SimpleNamespace

    from fedlabels.core.errors import FedLabelsWarning, show_warnings_in_one_line
    from fedlabels.deploy.launcher import LocalDeployment

    dep = LocalDeployment.__new__(LocalDeployment)  # no SuperLink: a stand-in `flwr run`
    dep.logs, dep.echo, dep.unfinished_runs = tmp_path / "logs", progress, []
    dep.logs.mkdir()
    dep.prepared = SimpleNamespace(app_dir=tmp_path, spec=SimpleNamespace(
        status=str(tmp_path / "status.json")))
    monkeypatch.setattr(dep, "_cli_config", lambda: None)
    lines = ["INFO : starting", "fedlabels: warning: pate uses 1 round(s); runs 1 of the 3 "
             "requested", "fedlabels: round 1/1 done in 8.7 s, mean accuracy 0.9035"]
    log = dep.logs / "flwr_run.log"
    writes = f"open({str(log)!r}, 'w').write({chr(10).join(lines) + chr(10)!r})"
    monkeypatch.setattr(dep, "_spawn", lambda *a: subprocess.Popen([sys.executable, "-c",
                                                                   writes]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dep.run_app(timeout=60) == 0
    assert [(w.category, str(w.message)) for w in caught] == [
        (FedLabelsWarning, "pate uses 1 round(s); runs 1 of the 3 requested")]
    assert capsys.readouterr().err.splitlines() == ([lines[2]] if progress else [])
    with warnings.catch_warnings():  # as the CLI shows it: one line
        warnings.simplefilter("always")
        show_warnings_in_one_line()
        dep.run_app(timeout=60)
    said = capsys.readouterr().err.splitlines()
    assert said.count(lines[1]) == 1 and len(said) == 1 + progress, said


def test_a_resume_with_output_finds_the_sites_state_of_a_run_without(tmp_path) -> None:
    # `deploy local` without --output wrote to a default name; its resume needs --output
    # (the line above gives it), so the resumed run's settings held output = that path where
    # the interrupted run's held None: the sites' state folder (named by a fingerprint of the
    # settings) differed, and every site refused round 5 ("last answered number 0")
    pytest.importorskip("flwr")
    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.engines.flower.snapshots import run_dir
    from fedlabels.runs.config import RunConfig

    out = tmp_path / "results" / "r.json"
    cfg = RunConfig(dataset="wine", clients=3, rounds=4)
    node = {"state-dir": str(tmp_path / "state")}
    first = prepare_run(cfg, tmp_path / "sites", output=out)  # as deploy local does
    resumed = prepare_run(cfg.replace(output=str(out)), tmp_path / "sites", output=out)
    assert resumed.spec.run["output"] != first.spec.run["output"]
    assert run_dir(node, resumed.spec) == run_dir(node, first.spec)
    other = prepare_run(cfg, tmp_path / "other", output=tmp_path / "elsewhere.json")
    longer = prepare_run(cfg.replace(rounds=5), tmp_path / "sites", output=out)
    assert len({run_dir(node, s.spec) for s in (first, other, longer)}) == 3  # other runs


def test_ctrl_c_in_the_demo_stops_the_demo(tmp_path, monkeypatch, capsys) -> None:
    # a Ctrl-C during FedCT's run stopped that run only: the demo went on with its five
    # other runs, wrote its summary and exited 0
    from fedlabels.methods.fedct.fedct import FedCTServer

    plain = FedCTServer.run_round

    def stopped_in_round_3(server: Any, rnd: int, grid: Any) -> Any:
        if rnd == 2:  # 0-based: the third round
            raise KeyboardInterrupt
        return plain(server, rnd, grid)

    monkeypatch.setattr(FedCTServer, "run_round", stopped_in_round_3)
    out = tmp_path / "demo"
    assert main(["demo", "--output-dir", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2:] == [f"fedlabels: the demo was interrupted in fedct_decision_tree after "
                        f"round 2 of 20; the runs so far are in {out}/, and no summary was "
                        "written (run the demo again with --overwrite)",
                        "fedlabels: interrupted"], err
    assert sorted(p.name for p in out.iterdir()) == [
        "fedct_decision_tree.json", "fedct_decision_tree.models.npz",
        "fedct_decision_tree.rounds.csv"]  # the interrupted run's files, nothing after it
