"""The user cache that ``fedlabels fetch`` fills; nothing is downloaded at run time."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$FEDLABELS_CACHE`` if set, else ``$XDG_CACHE_HOME/fedlabels`` or ``~/.cache/fedlabels``."""
    env = os.environ.get("FEDLABELS_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fedlabels"


def dataset_dir(name: str) -> Path:
    """Where a fetched dataset lives."""
    return cache_dir() / name
