"""One process at a time runs a checkpointed run.

``fedlabels resume X.json`` while ``fedlabels run ... -o X.json`` is still going (or a second
``run --overwrite`` of the same name) would have two processes write one checkpoint and
result. :func:`checkpoint_lock` takes an exclusive ``flock`` on ``.X.checkpoint.npz.lock``
beside the checkpoint for the run's whole length, and removes the file at the end; the
kernel releases the lock when the process ends, a SIGKILL included (the file then stays,
unlocked), so a stale lock never blocks a resume. Where ``fcntl`` is missing
(Windows) no lock is taken. Directories it made for the lock are removed at the end if
they are still empty (a run refused after the lock was taken left them behind); the
temporary file of a checkpoint write a SIGKILL interrupted is removed once the lock is held.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.private_files import private_dir


def lock_path(checkpoint: str | Path) -> Path:
    path = Path(checkpoint)
    return path.with_name(f".{path.name}.lock")


@contextmanager
def checkpoint_lock(checkpoint: str | Path) -> Iterator[None]:
    """Hold the run of ``checkpoint`` for this process, or a one-line error naming the
    process that holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path = lock_path(checkpoint)
    made = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    private_dir(path.parent, tighten=False)  # as the checkpoint makes it: 0700 where missing
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise FedLabelsError(
                f"{checkpoint} belongs to a run still going in another process (pid "
                f"{holder}); wait for it to end, or stop it (Ctrl-C keeps its rounds), then "
                "resume.") from None
        try:  # the file may have been removed by its last holder after we opened it
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        _remove_stale_writes(Path(checkpoint))
        yield
    finally:
        path.unlink(missing_ok=True)  # while still held: a newcomer opens a fresh file
        os.close(fd)  # releases the lock
        for folder in made:  # a run refused (or stopped) before it wrote a file: no
            try:             # empty directories of its output left behind
                folder.rmdir()
            except OSError:  # not empty (the run's files), or not ours to remove
                break


def _remove_stale_writes(checkpoint: Path) -> None:
    """Remove the temporary files of checkpoint writes that a killed run left beside
    ``checkpoint`` (``.X.checkpoint.npz.<8 hex>.tmp``, from ``write_private_with``): each
    held every client's model, as large as the checkpoint, and stayed for good. Called with
    the lock held: no other process is writing one."""
    made = re.compile(re.escape(f".{checkpoint.name}.") + r"[0-9a-f]{8}\.tmp")
    with suppress(OSError):
        for entry in os.scandir(checkpoint.parent):
            if made.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with suppress(OSError):
                    os.unlink(entry.path)
