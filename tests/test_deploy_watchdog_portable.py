"""The deploy watchdog on a system without ``/proc``: a live launcher is not taken for a dead
one (the watchdog stopped its processes and finalised its status as ``interrupted`` at once)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedlabels.deploy import processes, watchdog


@pytest.mark.parametrize("has_proc", [True, False])
def test_running_tells_live_from_exited_processes(monkeypatch, tmp_path, has_proc) -> None:
    if not has_proc:
        monkeypatch.setattr(processes, "PROC", tmp_path / "no-proc")
    elif not processes.PROC.is_dir():
        pytest.skip("this system has no /proc")
    assert watchdog.running(os.getpid(), None)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # exited and reaped: its pid names no process
    assert not watchdog.running(child.pid, None)
