"""A ``deploy local`` launcher killed with SIGKILL: its watchdog stops what it left running
(a ``flwr-serverapp`` orphaned to init, which ignored SIGTERM) and finalises the status,
which said ``running`` forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedlabels.deploy.processes import start_time
from fedlabels.deploy.watchdog import record_processes, running

pytestmark = pytest.mark.realprocess

SRC = str(Path(__file__).resolve().parents[1] / "src")
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(120)")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}


def _until(check, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_sigkilled_launcher_leaves_no_process_and_a_final_status(tmp_path: Path) -> None:
    status, processes = tmp_path / "r.status.json", tmp_path / "processes.json"
    status.write_text(json.dumps({"status": "running", "rounds_done": 2, "lost": {}}))
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    orphan = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert orphan.stdout is not None and orphan.stdout.readline() == b"ready\n"
        record_processes(processes, {orphan.pid: start_time(orphan.pid)})
        watchdog = subprocess.Popen(
            [sys.executable, "-m", "fedlabels.deploy.watchdog", str(launcher.pid),
             start_time(launcher.pid) or "", str(status), str(processes), "0.5"], env=_env())
        time.sleep(0.5)
        assert json.loads(status.read_text())["status"] == "running"  # the launcher lives
        assert running(orphan.pid, start_time(orphan.pid))
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _until(lambda: watchdog.poll() is not None, 10)
        assert _until(lambda: orphan.poll() is not None, 5)
        final = json.loads(status.read_text())
        assert final["status"] == "interrupted" and final["rounds_done"] == 2
        assert f"the launcher (pid {launcher.pid}) was killed" in final["error"]
        assert "1 remaining process(es) were stopped" in final["error"]
        assert orphan.returncode == -signal.SIGKILL  # SIGTERM was ignored
    finally:
        for proc in (launcher, orphan):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_watchdog_of_a_launcher_that_cleaned_up_does_nothing(tmp_path: Path) -> None:
    """Ended by the launcher (SIGTERM) it touches neither the status nor any process."""
    from fedlabels.deploy import watchdog

    status, processes = tmp_path / "r.status.json", tmp_path / "processes.json"
    status.write_text(json.dumps({"status": "running"}))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        record_processes(processes, {other.pid: start_time(other.pid)})
        guard = watchdog.start(status, processes)
        time.sleep(0.3)
        watchdog.end(guard)
        assert guard.returncode == -signal.SIGTERM
        time.sleep(0.2)
        assert other.poll() is None
        assert json.loads(status.read_text())["status"] == "running"
    finally:
        other.kill()
        other.wait()
