"""Supervising the processes of a local deployment, and its status file (Linux and macOS;
the subreaper and parent-death signal, :mod:`fedlabels.core.parent_death`, are Linux only).

* :func:`descendants`, :func:`alive`, :func:`start_time`, :func:`cmdline`, :func:`send`;
* :func:`finalise_status` — a final status for a run whose ServerApp could not write one.

This module does not import Flower.
"""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import suppress
from pathlib import Path
from typing import Any

from fedlabels.core.files import write_atomic

#: the process table (Linux); absent elsewhere
PROC = Path("/proc")


def has_proc() -> bool:
    """Whether this system has the process table (:data:`PROC`)."""
    return (PROC / "self" / "stat").is_file()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the state first), or None
    when there is no such process (or no ``/proc``)."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """A process's start time (``/proc/PID/stat`` field 22), to tell a reused pid apart."""
    fields = stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def parent(pid: int) -> int | None:
    """The parent pid of a live process (``/proc/PID/stat`` field 4)."""
    fields = stat_fields(pid)
    try:
        return None if fields is None else int(fields[1])
    except (IndexError, ValueError):
        return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(roots: list[int]) -> list[int]:
    """Pids of all live descendants of ``roots`` (from ``ps``; works on Linux and macOS)."""
    try:
        table = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True,
                               text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):  # pragma: no cover
        return []
    children: dict[int, list[int]] = {}
    for line in table.splitlines():
        parts = line.split()
        if len(parts) == 2:
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    found: list[int] = []
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.append(child)
                stack.append(child)
    return found


def send(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    # a zombie child of ours counts as gone
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


FINAL = ("completed", "stopped", "failed", "interrupted")


def read_status(status_path: Path) -> dict[str, Any]:
    try:
        data = json.loads(status_path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def finished(status_path: Path, since: float = 0.0) -> bool:
    """Whether the status file, written at or after ``since`` (epoch seconds; an earlier run's
    final status does not count), says the run is over."""
    try:
        if status_path.stat().st_mtime < since:
            return False
    except OSError:
        return False
    return read_status(status_path).get("status") in FINAL


def finalise_status(status_path: Path, status: str, error: str,
                    replace: bool = False) -> None:
    """Give a run that has no final status one (the ServerApp could not write it: it was
    killed, it crashed, or the launcher stopped it); a final status is left as it is, except
    with ``replace`` (the launcher knows the cause better: the SuperLink died, and the
    ServerApp, stopped afterwards, wrote ``interrupted``)."""
    data = read_status(status_path)
    if data.get("status") in FINAL and not (replace and data.get("status") != "completed"):
        return
    data.update(status=status, error=error)
    write_atomic(status_path, json.dumps(data, indent=2, default=str) + "\n")
