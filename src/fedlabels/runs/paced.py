"""A file rewritten after each round, spaced by what its write costs.

A deployed run's result JSON holds every round, so one write of it grows with the rounds
(about 0.3-0.5 s at 3,000 rounds): written after every round it became most of a long run's
time. :class:`PacedWrite` writes after a round only once ``1 / share`` times the last write's
cost has passed since that write started (so writes take at most about ``share`` of the
run); a write put off stays pending until the next one due, or :meth:`PacedWrite.flush`
(the end of the run, a stop, an error).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class PacedWrite:
    """Runs a round's write when due (see the module docstring): the first at once."""

    share: float
    clock: Callable[[], float] = time.perf_counter
    started_at: float | None = None
    cost: float = 0.0
    pending: Callable[[], Any] | None = None
    written: int = 0
    put_off: int = 0

    def __call__(self, write: Callable[[], Any]) -> None:
        """``write`` now if due, else keep it as the pending one (replacing an older)."""
        now = self.clock()
        if self.started_at is not None and now - self.started_at < self.cost / self.share:
            self.pending = write
            self.put_off += 1
            return
        self._write(write, now)

    def flush(self) -> None:
        """The write put off last, if any (the newest state: nothing is lost)."""
        if self.pending is not None:
            self._write(self.pending, self.clock())

    def _write(self, write: Callable[[], Any], now: float) -> None:
        self.pending = None
        write()
        self.started_at, self.cost = now, self.clock() - now
        self.written += 1


__all__ = ["PacedWrite"]
