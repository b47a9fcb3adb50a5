"""Methods from other installed packages, found through the ``fedlabels.methods`` entry points.

A package that ships a method declares it in its metadata, e.g. in ``pyproject.toml``::

    [project.entry-points."fedlabels.methods"]
    echo = "fedlabels_echo:Echo"

The entry point's name is the method's name and its object a
:class:`~fedlabels.method.Method` subclass (or instance). Once installed, the method is
listed by ``fedlabels methods`` and runs with ``fedlabels run --method echo``, ``fl.run`` and
on Flower sites, which resolve a method by name the same way. A plug-in that fails to load,
is not a method, or takes a name already registered is left out with a one-line reason
naming its package; every other method stays available. A plug-in's options are set with
``--opt KEY=VALUE`` or a TOML ``[options]`` table: the generated CLI flags are fedlabels'
own methods', so no plug-in can change or break them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

GROUP = "fedlabels.methods"

_SCANNED: tuple[tuple[tuple[str, int], ...], list[EntryPoint]] | None = None


def _path_state() -> tuple[tuple[str, int], ...]:
    """``sys.path`` with each folder's modification time: installing or removing a package
    adds or removes a ``.dist-info`` folder, which changes its folder's time."""
    def mtime(folder: str) -> int:
        try:
            return os.stat(folder or ".").st_mtime_ns
        except OSError:
            return -1
    return tuple((folder, mtime(folder)) for folder in sys.path)


def group_entry_points() -> list[EntryPoint]:
    """The ``fedlabels.methods`` entry points, sorted; the installed packages' metadata is
    read again only when :func:`_path_state` changed (reading it all takes ~0.1 s)."""
    global _SCANNED
    state = _path_state()
    if _SCANNED is None or _SCANNED[0] != state:
        found = sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value))
        _SCANNED = (state, found)
    return list(_SCANNED[1])


def package_of(entry: EntryPoint) -> str:
    """The distribution that declares ``entry`` (its module when the metadata says none)."""
    dist = getattr(entry, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    return str(name) if name else entry.value.split(":")[0]


def load_entry_point(entry: EntryPoint, taken: Mapping[str, Any],
                     register: Callable[[Any, str], Any]) -> str | None:
    """Register the method ``entry`` names (``register(method, package)``); None, or why it
    was left out (one line)."""
    from fedlabels.method.base import Method

    where = f"plug-in method {entry.name!r} (package {package_of(entry)}, {entry.value})"
    if entry.name in taken:
        return (f"{where}: the name {entry.name!r} is already taken by another method; "
                "rename the entry point and the method")
    try:
        obj = entry.load()
        method = obj() if isinstance(obj, type) and issubclass(obj, Method) else obj
        if not isinstance(method, Method):
            return (f"{where}: the entry point names {type(obj).__name__} {obj!r}, not a "
                    "fedlabels Method subclass; point it at the method's class")
        if method.name != entry.name:
            return (f"{where}: the entry point is named {entry.name!r} but the method "
                    f"{method.name!r}; give both the same name")
        register(method, package_of(entry))
    except Exception as exc:  # a third-party package may fail in any way; say which
        text = " ".join(str(exc).split()) or "(no message)"
        return (f"{where} failed to load: {type(exc).__name__}: {text}; fix or uninstall "
                f"{package_of(entry)}")
    return None


def discover(taken: Mapping[str, Any], loaded: set[tuple[str, str]],
             register: Callable[[Any, str], Any]) -> dict[str, str]:
    """Load every ``fedlabels.methods`` entry point not yet in ``loaded`` (which it
    updates); returns entry-point name -> why it was left out, for those that failed."""
    broken: dict[str, str] = {}
    for entry in group_entry_points():
        key = (entry.name, entry.value)
        if key in loaded:
            continue
        loaded.add(key)
        reason = load_entry_point(entry, taken, register)
        if reason is not None:
            broken[entry.name] = reason
    return broken
