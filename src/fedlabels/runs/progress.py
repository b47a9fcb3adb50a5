"""What a run shows while it runs, decided in one place.

Progress goes to stderr (stdout keeps the tables and paths): a bar when stderr is a terminal,
plain lines (``fedct on breast_cancer: round 5/20: mean accuracy 0.907``) when it is
redirected, so a log file never fills with bar redraws. A round shows the mean accuracy (RMSE
for regression), the one metric the rounds record; the CLI says so before a run with another
``--metric`` (:func:`fedlabels.cli.run_options.note_progress_metric`).

The ``progress`` argument of :func:`fedlabels.run`, ``simulate`` and the demo: ``True`` shows
progress (a bar on a terminal, a line per evaluation otherwise: in a run of more than 100
rounds at most one each 10 s, with the time left), ``False`` nothing, ``None``
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
    #: a run of more rounds than this shows an evaluation's line (redirected) only where
    #: :attr:`line_seconds` have passed since the last one, and the first and last always,
    #: with the time left: 3,000 rounds of 30 ms printed 3,000 lines
    every_line_rounds = 100
    line_seconds = 10.0

    def __init__(self, total: int, desc: str, progress: bool | None,
                 stream: TextIO | None = None) -> None:
        self.total, self.desc = total, desc
        self.stream = stream
        self.mode = progress_mode(progress, stream)
        self._bar: Any = None
        self._shown = self._round_start = time.monotonic()
        self._line_at: float | None = None  # when the last evaluation's line was printed
        #: the first round this session shows and when it ended (the time left is timed
        #: from there: a resumed run refits its models in that round)
        self._first: tuple[int, float] | None = None
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
        now = self._shown = self._round_start = time.monotonic()
        if self._first is None:
            self._first = record.round, now
        if self._bar is not None:
            self._bar.update(1)
            if record.accuracies:
                self._bar.set_postfix(acc=f"{np.mean(record.accuracies):.3f}")
            elif record.rmse:  # regression
                self._bar.set_postfix(rmse=f"{np.mean(record.rmse):.4g}")
        elif self.mode == "rounds":
            print(self.line(record), file=self.stream or sys.stderr, flush=True)
        elif self.mode == "evaluations" and (record.accuracies or record.rmse):
            long_run = self.total > self.every_line_rounds
            if long_run and record.round < self.total and self._line_at is not None \
                    and now - self._line_at < self.line_seconds:
                return
            self._line_at = now
            print(self.line(record) + (self._left(record.round, now) if long_run else ""),
                  file=self.stream or sys.stderr, flush=True)

    def _left(self, done: int, now: float) -> str:
        """`` (about 3 min left)``: the rounds to go at the mean time of this session's rounds
        after its first (which, resumed, also refits the models: its time alone said 4 min
        left of a 27 s extension)."""
        if self._first is None or done >= self.total:
            return ""
        first_round, started = self._first
        ran = done - first_round
        if ran <= 0:
            return ""
        left = (now - started) / ran * (self.total - done)
        text = (f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min" if left < 5400
                else f"{left / 3600:.1f} h")
        return f" (about {text} left)"

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
