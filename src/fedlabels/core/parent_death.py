"""Linux's ``prctl``: a child killed with its parent, a parent that adopts orphans.

* :func:`die_with_parent` — ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the calling process is
  killed when the thread that forked it exits (its parent killed with SIGKILL included);
* :func:`become_subreaper` — ``prctl(PR_SET_CHILD_SUBREAPER)``: orphaned descendants are
  re-parented to this process instead of init.

Both are no-ops (False) where ``prctl`` is not available (macOS, Windows).
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` on Linux; False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # pragma: no cover
        return False


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux); whether it worked."""
    return prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> bool:
    """Have this process killed (SIGKILL) when its parent dies (Linux); whether it worked."""
    return prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
