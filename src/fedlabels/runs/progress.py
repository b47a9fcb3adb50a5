"""What a run shows while it runs, decided in one place.

Progress goes to stderr (stdout keeps the tables and paths): a bar when stderr is a terminal,
plain lines (``fedct on breast_cancer: round 5/20: mean accuracy 0.907``) when it is
redirected, so a log file never fills with bar redraws.

The ``progress`` argument of :func:`fedlabels.run`, ``simulate`` and the demo: ``True`` shows
progress (a bar on a terminal, a line per evaluation otherwise), ``False`` nothing, ``None``
(the API default) a bar on a terminal and nothing otherwise. The verbosity is a process
setting (the CLI's global ``-q`` / ``-v``): quiet shows no progress and no informational
lines (only errors and the final table), verbose a line per round even on a terminal.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from fedlabels.core.verbosity import NORMAL as NORMAL
from fedlabels.core.verbosity import QUIET, QUIET_SECONDS
from fedlabels.core.verbosity import VERBOSE as VERBOSE
from fedlabels.core.verbosity import progress_mode as progress_mode
from fedlabels.core.verbosity import set_verbosity as set_verbosity
from fedlabels.core.verbosity import verbosity as verbosity

if TYPE_CHECKING:
    from fedlabels.results import RoundRecord


def info(message: str) -> None:
    """An informational line on stdout (not shown with ``-q``)."""
    if verbosity() > QUIET:
        print(message, flush=True)


class RoundProgress:
    """Shows each finished round (:meth:`update`) as a bar, a line, or not at all; and, in a
    long round, the exchange it is in (:meth:`step`)."""

    #: seconds without a line after which a step is shown as a line of its own (a one-round
    #: method on hundreds of clients, e.g. XCLP, otherwise printed nothing for minutes)
    quiet_seconds = QUIET_SECONDS

    def __init__(self, total: int, desc: str, progress: bool | None,
                 stream: TextIO | None = None) -> None:
        self.total, self.desc = total, desc
        self.stream = stream
        self.mode = progress_mode(progress, stream)
        self._bar: Any = None
        self._shown = self._round_start = time.monotonic()
        if self.mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="round", leave=False,
                             file=stream or sys.stderr)

    def step(self, kinds: str, rnd: int, n_clients: int) -> None:
        """The round ``rnd`` (0-based) sends ``kinds`` to ``n_clients`` clients: the bar
        names the step; a line says it when nothing was shown for :attr:`quiet_seconds`."""
        if self._bar is not None:
            self._bar.set_postfix_str(f"round {rnd + 1}: {kinds}", refresh=True)
            return
        now = time.monotonic()
        if self.mode != "off" and now - self._shown >= self.quiet_seconds:
            print(f"{self.desc}: round {rnd + 1}/{self.total}: {kinds} to {n_clients} "
                  f"client{'s' if n_clients != 1 else ''} ({now - self._round_start:.0f} s "
                  "into the round)", file=self.stream or sys.stderr, flush=True)
            self._shown = now

    def update(self, record: RoundRecord) -> None:
        self._shown = self._round_start = time.monotonic()
        if self._bar is not None:
            self._bar.update(1)
            if record.accuracies:
                self._bar.set_postfix(acc=f"{np.mean(record.accuracies):.3f}")
            elif record.rmse:  # regression
                self._bar.set_postfix(rmse=f"{np.mean(record.rmse):.4g}")
        elif self.mode == "rounds" or (self.mode == "evaluations"
                                       and (record.accuracies or record.rmse)):
            print(self.line(record), file=self.stream or sys.stderr, flush=True)

    def line(self, record: RoundRecord) -> str:
        text = f"{self.desc}: round {record.round}/{self.total}"
        if record.accuracies:
            text += f": mean accuracy {np.mean(record.accuracies):.3f}"
        elif record.rmse:  # regression
            text += f": mean RMSE {np.mean(record.rmse):.4g}, R² {np.mean(record.r2 or []):.3f}"
        if self.mode == "rounds":
            up = np.mean(record.bytes_up) if record.bytes_up else 0.0
            text += f" ({record.seconds:.2f} s, {up:,.0f} B up per client)"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> RoundProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StepsShown:
    """A grid that tells a :class:`RoundProgress` each exchange it runs (its message kinds
    and how many clients), then runs it on ``grid``; anything else is ``grid``'s."""

    def __init__(self, grid: Any, shown: RoundProgress) -> None:
        self.grid, self.shown = grid, shown

    def exchange(self, messages: Any, rnd: int) -> Any:
        kinds = ", ".join(sorted({m.kind for m in messages.values()}))
        self.shown.step(kinds, rnd, len(messages))
        return self.grid.exchange(messages, rnd)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)
