"""The process's verbosity (the CLI's global ``-q`` / ``-v``) and the progress a running
run asked for, here so that every layer can ask them (:mod:`fedlabels.runs.progress`
decides what a run shows; reading a large image folder says how far it is)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

QUIET, NORMAL, VERBOSE = 0, 1, 2
#: seconds without a line after which a long step (a round's exchange, decoding many
#: images) says where it is
QUIET_SECONDS = 30.0
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


def progress_mode(progress: bool | None, stream: TextIO | None = None) -> str:
    """``"off"``, ``"bar"``, ``"evaluations"`` (a line per evaluation) or ``"rounds"``."""
    if progress is False or verbosity() == QUIET:
        return "off"
    if verbosity() == VERBOSE:
        return "rounds"
    isatty = getattr(stream or sys.stderr, "isatty", None)
    if callable(isatty) and isatty():
        return "bar"
    return "evaluations" if progress else "off"


def lines_shown(stream: TextIO) -> bool:
    """Whether a line of progress goes to ``stream``, as a run's lines do
    (:func:`progress_mode` of the progress the running run asked for is not off)."""
    return progress_mode(_state["progress"], stream) != "off"
