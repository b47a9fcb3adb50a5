"""The process's verbosity (the CLI's global ``-q`` / ``-v``) and the progress a running
run asked for, here so that every layer can ask them (:mod:`fedlabels.runs.progress`
decides what a run shows; reading a large image folder says how far it is)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

QUIET, NORMAL, VERBOSE = 0, 1, 2
_state: dict[str, Any] = {"verbosity": NORMAL, "progress": None}


def set_verbosity(level: int) -> None:
    """``QUIET``, ``NORMAL`` or ``VERBOSE`` for this process."""
    if level not in (QUIET, NORMAL, VERBOSE):
        raise ValueError(f"verbosity must be QUIET, NORMAL or VERBOSE, got {level!r}")
    _state["verbosity"] = level


def verbosity() -> int:
    return int(_state["verbosity"])


@contextmanager
def progress_asked(progress: bool | None) -> Iterator[None]:
    """A run's ``progress`` argument (``fedlabels run --no-progress``: False) while it
    loads its data."""
    before = _state["progress"]
    _state["progress"] = progress
    try:
        yield
    finally:
        _state["progress"] = before


def lines_shown(stream: TextIO) -> bool:
    """Whether a line of progress goes to ``stream``, as a run's lines do: never with
    ``-q`` or ``progress=False``; with ``-v``, ``progress=True`` or a terminal."""
    progress = _state["progress"]
    if progress is False or verbosity() == QUIET:
        return False
    if verbosity() == VERBOSE or progress:
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())
