"""Where a result came from: versions, threads, the command line, start and end time.

:func:`provenance` is stored as ``provenance`` in every result. The command line is the one
``fedlabels`` was started with (``None`` for runs started from Python); library versions are
read from the installed distributions: every one of :data:`LIBRARIES` that is installed,
used by the run or not, so the entry does not depend on which process imported what (a run
with ``--workers 2`` imports torch in its workers only). They are read once per process (a
scan of every installed distribution, 0.3 s, was repeated at the end of each run), and a
library installed under another distribution's name (``xgboost-cpu``) is found without
reading every distribution's metadata and file list.
"""

from __future__ import annotations

import functools
import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from fedlabels.core.version import __version__

# distribution name -> its top-level module (to find the distribution that installs it)
LIBRARIES = {"numpy": "numpy", "scipy": "scipy", "scikit-learn": "sklearn", "torch": "torch",
             "flwr": "flwr", "xgboost": "xgboost", "dp-accounting": "dp_accounting"}
_command_line: list[str] | None = None


def version() -> str:
    """The installed fedlabels version."""
    from importlib import metadata  # ~40 ms: not at import (every command imports this)

    try:
        return metadata.version("fedlabels")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return __version__


@contextmanager
def command_line(argv: Sequence[str]) -> Iterator[None]:
    """Record ``argv`` as the command line of the results made inside the block."""
    global _command_line
    previous, _command_line = _command_line, list(argv)
    try:
        yield
    finally:
        _command_line = previous


def library_versions() -> dict[str, str]:
    """Installed version per library, under the distribution's own name: the module
    ``xgboost`` of ``fedlabels[tabular]`` comes from ``xgboost-cpu``. Nothing is imported;
    read once per process (a new dict each call)."""
    return dict(_library_versions())


@functools.cache
def _library_versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist, module in LIBRARIES.items():
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            for other in _distributions_of(module):
                out[other] = metadata.version(other)
    return out


def _distributions_of(module: str) -> list[str]:
    """``importlib.metadata.packages_distributions().get(module, [])``, without reading
    every distribution's metadata and file list: a distribution's ``top_level.txt``, else
    its file list only where its text names ``module`` at all, and the name of those that
    provide it (the whole scan took a second on a loaded machine, once a run)."""
    from importlib import metadata

    inferred = getattr(metadata, "_top_level_inferred", None)
    if inferred is None:  # a Python whose importlib lacks it: the whole scan
        return list(metadata.packages_distributions().get(module, []))
    names = []
    for dist in metadata.distributions():
        declared = (dist.read_text("top_level.txt") or "").split()
        if declared:
            provides = module in declared
        else:  # what packages_distributions infers from the file list, where it can hold it
            listed = "".join(dist.read_text(name) or "" for name in (
                "RECORD", "installed-files.txt", "SOURCES.txt"))
            provides = module in listed and module in inferred(dist)
        if provides:
            names.append(dist.metadata["Name"])
    return names


def provenance(started: float) -> dict[str, Any]:
    """The ``provenance`` entry of a result; ``started`` is the run's ``time.perf_counter()``
    at its start (the start time is derived from it and the end, now)."""
    from fedlabels.core.threads import torch_threads

    end = datetime.now(UTC)
    start = end - timedelta(seconds=time.perf_counter() - started)
    return {"fedlabels": version(), "python": platform.python_version(),
            "platform": platform.platform(), "libraries": library_versions(),
            "torch_threads": torch_threads(), "command_line": _command_line,
            "started_utc": start.isoformat(timespec="seconds"),
            "ended_utc": end.isoformat(timespec="seconds")}
