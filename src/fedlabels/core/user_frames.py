"""Where a warning of fedlabels points: the user's line, in the thread that warns or, for a
worker thread running fedlabels' code alone, in the thread whose call started the work.

A frame is the user's when it lies outside fedlabels, :mod:`threading` and
:mod:`concurrent.futures` (a worker's own machinery is never the line to fix).
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_THREADING = os.path.abspath(threading.__file__)
_CONCURRENT = os.path.dirname(os.path.abspath(concurrent.futures.__file__)) + os.sep
_LOCAL = threading.local()  # .origin: (filename, lineno, module globals) of the starting call


def _not_users(frame: FrameType) -> bool:
    name = os.path.abspath(frame.f_code.co_filename)
    return name.startswith((_PACKAGE, _CONCURRENT)) or name == _THREADING


def first_user_frame(frame: FrameType) -> tuple[FrameType, int, bool]:
    """From ``frame`` (level 1) outwards, the first frame that is the user's, its level and
    True; or the thread's outermost frame, its level and False (none is the user's)."""
    level = 1
    while _not_users(frame):
        if frame.f_back is None:
            return frame, level, False
        frame = frame.f_back
        level += 1
    return frame, level, True


def carry_caller(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` for a worker thread, carrying where the user's call that starts the work is
    (the first user frame of the thread that wraps it, else that thread's own carried
    origin), so :func:`warn_user` in the worker points there."""
    frame, _, found = first_user_frame(sys._getframe(1))
    origin = ((frame.f_code.co_filename, frame.f_lineno, frame.f_globals) if found
              else getattr(_LOCAL, "origin", None))

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        previous = getattr(_LOCAL, "origin", None)
        _LOCAL.origin = origin
        try:
            return fn(*args, **kwargs)
        finally:
            _LOCAL.origin = previous

    return run


def warn_user(message: Warning | str, category: type[Warning] | None = None) -> None:
    """``warnings.warn`` at the user's line: the first user frame of this thread; in a
    worker thread without one, the call that started the work (:func:`carry_caller`);
    else the thread's outermost frame."""
    _, level, found = first_user_frame(sys._getframe(1))
    origin = getattr(_LOCAL, "origin", None)
    if found or origin is None:
        warnings.warn(message, category, stacklevel=level + 1)
        return
    filename, lineno, module_globals = origin
    kind = category or (type(message) if isinstance(message, Warning) else UserWarning)
    warnings.warn_explicit(message, kind, filename, lineno,
                           registry=module_globals.setdefault("__warningregistry__", {}),
                           module_globals=module_globals)

