"""benchmarks/device_check.py runs on the CPU in --dry-run mode, and the long runs it
lists are valid ``fedlabels run`` command lines."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest

from conftest import load_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device_check.py"


def load_script():
    return load_benchmark("device_check")


@pytest.fixture(scope="module")
def dry_session(tmp_path_factory):
    """benchmarks/device_session.sh with DRY_RUN=1 on the CPU, run once for this module's two
    tests (the check's dry run, in the session as on a lent machine, was run a second time
    on its own before: about 24 of the two tests' 49 CPU-s): its folder (check.log, the
    two archives), the profile tables extracted under ``profiles/``."""
    import os
    import subprocess
    import tarfile

    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("device_session")
    root = SCRIPT.parents[1]
    # a budget the dry run's parts fit on a loaded 2-core machine: the check may take 50 %
    # (400 s; at load 9 it took about 120 s), and the LoRA run starts only where 260 s are
    # left after it and the paper-scale run (refused at once here: it asks for CUDA), so
    # 800 s leave it 400 s however slow the check; the parts that ask for CUDA end at once,
    # so the budget is not waited for
    env = {**os.environ, "OUT": str(out), "DRY_RUN": "1", "PYTHON": sys.executable,
           "CHECK_PERCENT": "50"}
    done = subprocess.run(["bash", "benchmarks/device_session.sh", "800", "9"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stderr
    (out / "profiles").mkdir()
    with tarfile.open(out / "profiles.tar.gz") as archive:  # its files, by their names
        for member in archive.getmembers():
            if member.isfile():
                data = archive.extractfile(member).read()
                (out / "profiles" / Path(member.name).name).write_bytes(data)
    return out


def test_dry_run_measures_every_row_on_the_cpu(dry_session):
    """The check's rows in the session's log, its profile tables in the session's archive."""
    out = (dry_session / "check.log").read_text()
    profiles = dry_session / "profiles"
    rows = [line for line in out.splitlines() if line.endswith("n/a")]
    assert len(rows) == 10 and "FedCT Fashion-MNIST round" in rows[0]
    assert "evaluation" in rows[1] and "400 such rounds" in rows[2]
    assert "distillation (DD) step" in rows[5] and "DP-SGD (DP-FedAvg) step" in rows[6]
    assert "2 clients, CIFAR-10 CNN step" in rows[7]
    assert "LoRA MiniLM FedCT round" in rows[8] and "evaluation" in rows[9]
    seconds = [float(row.split()[-3]) for row in rows]
    rounds, evaluations = [seconds[k] for k in (0, 3, 4, 5, 6, 7, 8)], [seconds[1], seconds[9]]
    assert all(0 < x < 60 for x in rounds)
    assert all(0 <= x < 60 for x in evaluations)  # a difference: at tiny sizes it may be 0
    # the whole-run estimate is 400 training rounds and 20 evaluations (to the printed digits)
    assert seconds[2] == pytest.approx(400 * seconds[0] + 20 * seconds[1], abs=0.5)
    assert "DRY RUN" in out
    # where the check's time went, for the next lent machine's budget
    for part in ("the rows", "the settings rows", "the LoRA round"):
        assert f" s before {part})" in out
    # the step by hand against autograd, side by side: both timed, weights within rounding
    (by_hand,) = [line for line in out.splitlines() if line.startswith("the MLP's step by")]
    before, after = (float(x) for x in by_hand.split(": ")[1].split(" ms")[0].split(" -> "))
    assert before > 0 and after > 0 and "on cpu" in by_hand
    assert float(by_hand.split("largest weight gap ")[1].rstrip(")")) < 1e-4
    (dp_cnn,) = [line for line in out.splitlines() if line.startswith("DP-SGD step of 2 ")]
    alone_ms = float(dp_cnn.split("one by one ")[1].split(" ms")[0])
    together_ms = float(dp_cnn.split("together ")[1].split(" ms")[0])
    assert alone_ms > 0 and together_ms > 0 and "small-CNN clients on cpu" in dp_cnn
    # what bf16 and deterministic kernels cost (fp32, the setting, their ratio), both networks
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("settings: a FedCT round"))
    # (the log holds the runs' warnings too: stderr goes there as well)
    settings = [row for row in lines[start + 1:]
                if row.startswith("  ") and row.endswith("x") and ", " in row][:4]
    assert [row.split(", ")[1].split()[0] for row in settings] == [
        "--precision", "deterministic", "--precision", "deterministic"]
    assert "mlp(" in settings[0] and "cnn(arch=small," in settings[2]
    for row in settings:
        base, other, cost = (float(x.rstrip("x")) for x in row.split()[-3:])
        assert base > 0 and other > 0
        assert cost == pytest.approx(other / base, rel=0.03, abs=0.01)  # printed rounding
    ops = (profiles / "profile_cpu_ops.txt").read_text()
    assert "one FedCT round on cpu" in ops and "aten::" in ops
    assert "function calls" in (profiles / "profile_cpu_python.txt").read_text()
    text_ops = (profiles / "profile_cpu_text_ops.txt").read_text()  # the LoRA round's
    assert "one LoRA MiniLM FedCT round on cpu" in text_ops and "aten::" in text_ops
    assert "function calls" in (profiles / "profile_cpu_text_python.txt").read_text()
    calls = (profiles / "profile_cpu_100clients_ops.txt").read_text()  # a batched call's
    assert "one call of many clients trained together on cpu" in calls and "aten::" in calls
    assert "function calls" in (profiles / "profile_cpu_100clients_python.txt").read_text()


def test_the_one_call_session_script_runs_its_three_parts_and_packs_the_results(dry_session):
    """benchmarks/device_session.sh with DRY_RUN=1 on the CPU: the check's rows, the
    paper-scale run, the whole LoRA run (2 rounds) and a long run (the paper-scale and the
    long run refused here: they ask for CUDA), one archive without checkpoints."""
    import json
    import tarfile

    log = (dry_session / "check.log").read_text()
    assert "DRY RUN" in log and "FedCT Fashion-MNIST round" in log
    assert "whole LoRA MiniLM FedCT run on cpu (m=3, T=2 rounds" in log  # the LoRA step
    assert "LoRA run: round 2 of 2 after " in log  # its pace, should it be cut short
    assert "long run 23" in log and "long run 00" in log and "long run 09" in log
    assert "all ended after" in log
    with tarfile.open(dry_session / "long.tar.gz") as archive:
        names = archive.getnames()
        summary = json.load(archive.extractfile("./runs/summary.json"))
    assert "./e2e/summary.json" in names and not any("checkpoint" in n for n in names)
    # the run with CUDA graphs failed here (no GPU): the run without them took its place
    assert "./e2e-eager/summary.json" in names
    assert [r["index"] for r in summary] == [9]
    with tarfile.open(dry_session / "profiles.tar.gz") as archive:
        assert {"./profile_cpu_ops.txt", "./profile_cpu_100clients_python.txt",
                "./profile_cpu_text_ops.txt"} <= set(archive.getnames())


def session_function(call: str) -> str:
    """What ``call`` prints with benchmarks/device_session.sh sourced (its functions only)."""
    import subprocess

    done = subprocess.run(["bash", "-c", f"source benchmarks/device_session.sh; {call}"],
                          cwd=SCRIPT.parents[1], capture_output=True, text=True, timeout=30,
                          check=True)
    return done.stdout.strip()


def test_the_text_run_gets_what_the_documented_session_leaves_it():
    """``CHECK_PERCENT=45 ... device_session.sh 560 none``: the check may take 252 s and the
    end-to-end run about 110 s (93 s on the H200, its eager fallback), which leaves 198 s.
    Before, the text run started only where 260 s were left, so that session never ran it
    (and 200 s of the lent machine went unused); now it gets all but 20 s of what is left,
    at most 240 s, and none under 120 s."""
    left = 560 - 560 * 45 // 100 - 110
    assert session_function(f"part_limit {left}") == "178"
    assert session_function("part_limit 400; part_limit 260") == "240\n240"
    assert session_function("part_limit 140; part_limit 139") == "120\n0"


def test_a_part_deaf_to_sigterm_is_killed_and_the_session_goes_on(tmp_path):
    """A part past its limit gets SIGTERM, then SIGKILL (``timeout -k``): before, a process
    that ignored SIGTERM (or hung in a driver call) held the session until the device
    tool's own limit, and nothing after it ran or was packed."""
    import os
    import subprocess

    stub = tmp_path / "python"  # the check: deaf to SIGTERM, it would sleep for 60 s
    stub.write_text("#!/bin/bash\ntrap '' TERM\necho deaf check started\nsleep 60\n")
    stub.chmod(0o755)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": str(stub),
           "CHECK_PERCENT": "10", "KILL_AFTER": "1"}
    started = time.monotonic()
    done = subprocess.run(["bash", "benchmarks/device_session.sh", "20", "none"],
                          cwd=SCRIPT.parents[1], env=env, capture_output=True, text=True,
                          timeout=50)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20  # its 2 s, 1 s of grace, the packing
    log = (tmp_path / "out" / "check.log").read_text()
    assert "deaf check started" in log and "check ended after" in log
    assert "all ended after" in log and (tmp_path / "out" / "long.tar.gz").is_file()


def test_the_long_runs_are_valid_command_lines(capsys):
    from fedlabels.cli import build_parser
    from fedlabels.cli.run_options import config_from_args

    script = load_script()
    assert script.main(["--long-runs"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed == script.LONG_RUNS and len(printed) == 24
    parser = build_parser()
    for line in printed:
        argv = shlex.split(line)
        if argv[0] == "fedlabels":  # parsed and validated as the CLI would, nothing run
            cfg = config_from_args(parser.parse_args(argv[1:]), simulator=True)
            assert cfg.device == "cuda" and cfg.rounds * cfg.period == 20_000
        else:
            assert argv[0] == "python" and argv[1] in (
                "benchmarks/text_fedct.py", "benchmarks/fedct_beyond.py") and "--device" in argv


def test_long_runs_execute_in_order_until_the_deadline(tmp_path, monkeypatch):
    script = load_script()
    monkeypatch.setattr(script, "LONG_RUNS", [
        "python -c \"print('finished')\"",
        "python -c \"import time; time.sleep(60)\"",
        "python -c \"import time; time.sleep(60)\"",  # takes the finished run's place
        "python -c \"print('never started')\"",
    ])
    records = script.execute_long_runs(2.0, parallel=2, out_dir=tmp_path)
    status = {r["index"]: r["status"] for r in records}
    assert status == {0: "done", 1: "stopped at the deadline", 2: "stopped at the deadline",
                      3: "not started"}
    assert (tmp_path / "00.log").read_text().strip() == "finished"
    assert not (tmp_path / "03.log").exists()


def test_a_long_fedlabels_run_writes_its_result_where_asked(tmp_path):
    script = load_script()
    argv = script.long_run_argv(script.LONG_RUNS[0], tmp_path, 0)
    assert argv[:3] == [sys.executable, "-m", "fedlabels"]
    assert argv[-3:] == ["--output", str(tmp_path / "00.json"), "--no-checkpoint"]
    kept = script.long_run_argv(script.LONG_RUNS[0], tmp_path, 0, checkpoint=True)
    assert kept[-2:] == ["--output", str(tmp_path / "00.json")]
    assert script.long_run_argv("python benchmarks/x.py --a 1", tmp_path, 5) == [
        sys.executable, "benchmarks/x.py", "--a", "1"]


def test_a_stopped_long_run_reports_its_last_evaluation_and_drops_its_checkpoint(tmp_path,
                                                                                monkeypatch):
    import json

    script = load_script()
    write = (f"import pathlib, time; d = pathlib.Path({str(tmp_path)!r}); "
             "(d / '00.rounds.csv').write_text('round,seconds,acc_mean\\n1,0.1,\\n"
             "20,0.1,0.81\\n21,0.1,\\n'); (d / '00.checkpoint.npz').write_bytes(b'x'); "
             "(d / '.00.checkpoint.npz.1a2b.tmp').write_bytes(b'x'); "
             "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    monkeypatch.setattr(script, "LONG_RUNS", [f'python -c "{write}"'])
    started = time.monotonic()
    # a grace of 0.5 s, not the 5 s of a device run: what is checked is the same, and the
    # test's worker waits 3.5 s, not 8
    (record,) = script.execute_long_runs(3.0, parallel=1, out_dir=tmp_path, grace=0.5)
    # a run deaf to SIGTERM is killed the grace after it (not waited for until it ends)
    assert time.monotonic() - started < 20
    assert record["status"] == "stopped at the deadline"
    assert record["rounds_evaluated"] == 20
    assert record["mean_accuracy_at_last_evaluation"] == 0.81
    assert list(tmp_path.glob("*checkpoint*")) == []  # the temporary file too
    assert json.loads((tmp_path / "summary.json").read_text())[0]["rounds_evaluated"] == 20


def test_a_finished_long_run_reports_where_its_time_went(tmp_path, monkeypatch, capsys):
    """From its result: the run's wall seconds, its rounds' and its checkpoints' (the
    paper-scale run's end-to-end gap to its rounds was not split before)."""
    import json

    script = load_script()
    result = {"final": {"mean_accuracy": 0.85}, "wall_seconds": 70.04,
              "rounds": [{"seconds": 0.25}, {"seconds": 0.5}, {"seconds": 60.0}],
              "provenance": {"checkpoints": {"written": 3, "rounds_not_checkpointed": 0,
                                             "seconds_in_run": 1.26}}}
    (tmp_path / "made.json").write_text(json.dumps(result))
    write = (f"import shutil; shutil.copy({str(tmp_path / 'made.json')!r}, "
             f"{str(tmp_path / '00.json')!r})")
    monkeypatch.setattr(script, "LONG_RUNS", [f'python -c "{write}"'])
    (record,) = script.execute_long_runs(30.0, parallel=1, out_dir=tmp_path)
    assert record["status"] == "done"
    assert (record["run_wall_s"], record["rounds_s"], record["checkpoint_s"]) == (70.0, 60.8,
                                                                                   1.3)
    assert "(run 70.0 s, rounds 60.8 s, checkpoints 1.3 s of it)" in capsys.readouterr().out
    del result["provenance"]
    assert script.time_split(result)["checkpoint_s"] is None  # a run without a checkpoint


def test_a_failing_row_is_reported_and_the_check_goes_on(capsys):
    script = load_script()

    def broken() -> float:
        raise RuntimeError("operation not permitted when stream is capturing")

    assert script.or_failure("  the same round, --cuda-graphs on", broken) is None
    assert capsys.readouterr().out == (
        "  the same round, --cuda-graphs on: FAILED: RuntimeError: operation not permitted "
        "when stream is capturing\n")
    assert script.or_failure("a row", lambda: 2.5) == 2.5


@pytest.mark.parametrize("profiled", [False, True])
def test_a_round_and_its_evaluation_are_timed_without_the_profilers_start(tmp_path,
                                                                          monkeypatch,
                                                                          profiled):
    """On a clock of its own: rounds of 1 s, an evaluation of 2 s in the second and the
    fourth, and profilers that take 5 s to start. Before, the profilers' start (importing
    torch._dynamo: 6 s in a loaded dry run) was counted in the evaluation's row and 20 times
    in the 400 rounds' estimate."""
    from types import SimpleNamespace

    script = load_script()
    now = [0.0]

    def fake_run(*args, on_round, **kwargs):
        assert kwargs["rounds"] == 4 and kwargs["eval_every"] == 2
        for seconds in (1.0, 3.0, 1.0, 3.0):
            now[0] += seconds
            on_round(None)

    class Profilers:
        def __init__(self, *args, **kwargs):
            pass

        def start(self):
            now[0] += 5.0

        def enable(self):
            pass

        stop = disable = enable

    written = []
    monkeypatch.setattr(script, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(script.fl, "run", fake_run)
    monkeypatch.setattr(script.torch.profiler, "profile", Profilers)
    monkeypatch.setattr("cProfile.Profile", Profilers)
    monkeypatch.setattr(script, "write_profiles", lambda *a: written.append(a[4]))
    train, evaluation = script.round_seconds("fedct", None, "dt", 2, "cpu",
                                             tmp_path if profiled else None)
    assert (train, evaluation) == (1.0, 2.0)
    assert written == ([1.0] if profiled else [])
