"""What ``deploy local`` cannot do once it is SIGKILLed: stop its processes, finalise its status.

A launcher killed with SIGKILL runs no cleanup. Its direct children die with it
(``PR_SET_PDEATHSIG``), but the ``flwr-serverapp`` that Flower's SuperExec started is
orphaned to init and keeps running (it ignored SIGTERM while its SuperLink was gone), and the
status file says ``running`` forever. So the launcher starts this watchdog, in its own session
and without the parent-death signal; it waits while the launcher lives, then

* stops every process the launcher recorded (``processes.json`` in the workdir: pid and start
  time, so a reused pid is left alone) that is still alive: SIGTERM, SIGKILL after a grace;
* gives the status file a final status (``interrupted``) if it has none.

The launcher ends the watchdog itself (SIGTERM) when it stops its processes as usual, so the
watchdog acts only after a launcher that could not. This module does not import Flower.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from fedlabels.core.files import write_atomic
from fedlabels.deploy.processes import (
    finalise_status,
    has_proc,
    send,
    start_time,
    stat_fields,
)


def running(pid: int, started: str | None) -> bool:
    """Whether ``pid`` is the process that started at ``started`` and has not exited (a zombie
    has exited). Without ``/proc`` (not Linux) only whether the pid exists: the watchdog
    would otherwise take a live launcher for a dead one and finalise its status."""
    if not has_proc():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # it exists, owned by someone else
            return True
        return True
    stat = stat_fields(pid)
    return stat is not None and len(stat) > 19 and stat[0] not in ("Z", "X") \
        and (started is None or stat[19] == started)


def record_processes(path: Path, seen: dict[int, str | None]) -> None:
    """The launcher's record of what it started (pid -> start time), for the watchdog."""
    write_atomic(path, json.dumps({str(p): s for p, s in seen.items()}) + "\n")


def stop_recorded(path: Path, grace: float = 5.0) -> list[int]:
    """Stop the recorded processes that still run; returns their pids."""
    try:
        seen = {int(p): s for p, s in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return []
    live = [pid for pid, started in seen.items() if running(pid, started)]
    for pid in live:
        send(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(running(p, seen[p]) for p in live):
        time.sleep(0.1)
    for pid in live:
        if running(pid, seen[pid]):
            send(pid, signal.SIGKILL)
    return live


def watch(launcher: int, started: str | None, status: Path, processes: Path,
          interval: float = 0.5, grace: float = 5.0) -> bool:
    """Wait while the launcher runs, then clean up after it; whether there was anything."""
    while running(launcher, started):
        time.sleep(interval)
    stopped = stop_recorded(processes, grace)
    finalise_status(status, "interrupted", f"the launcher (pid {launcher}) was killed before "
                    f"it could stop the run (e.g. SIGKILL); its {len(stopped)} remaining "
                    "process(es) were stopped; resume it with `fedlabels deploy local "
                    "--resume` and the same --workdir")
    return bool(stopped)


def start(status: Path, processes: Path) -> subprocess.Popen[bytes]:
    """Start the watchdog of this process (the launcher)."""
    me = os.getpid()
    return subprocess.Popen(
        [sys.executable, "-m", "fedlabels.deploy.watchdog", str(me), start_time(me) or "",
         str(status), str(processes)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)  # not in the launcher's group: a Ctrl-C is the launcher's


def end(proc: subprocess.Popen[bytes]) -> None:
    """The launcher stopped its processes itself: the watchdog has nothing to do."""
    send(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def main(argv: list[str] | None = None) -> None:
    """``python -m fedlabels.deploy.watchdog LAUNCHER_PID START_TIME STATUS PROCESSES
    [GRACE]``."""
    launcher, started, status, processes, *grace = (argv or sys.argv[1:])
    watch(int(launcher), started or None, Path(status), Path(processes),
          grace=float(grace[0]) if grace else 5.0)


if __name__ == "__main__":
    main()
