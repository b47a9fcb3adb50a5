"""`make check` is the fast loop and `make test` the whole suite (CI runs it): the pytest
commands each would run (``make -n``, nothing run) select by marker as pytest itself
evaluates their ``-m`` expressions."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

ROOT = Path(__file__).resolve().parents[1]
#: the real-process mark, spelt apart: the Makefile collects the files whose text holds it
#: in the real-process pytest, which this file has no part in
REAL = "real" "process"


def _selections(target: str) -> list[str]:
    """The ``-m`` expressions of the pytest commands ``make -n TARGET`` prints."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    # STAMP stands for the venv: taken as built, so only the target's own recipe prints
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", target], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    found = [m.group(1) or m.group(2) for m in re.finditer(
        r'-m pytest\b[^\n]*?\s-m\s+(?:"([^"]*)"|(\S+))', out)]
    assert found, out
    return found


def _runs(expressions: list[str], *marks: str) -> bool:
    """Whether a test with ``marks`` is selected by one of the pytest commands."""
    return any(Expression.compile(e).evaluate(lambda name: name in marks)
               for e in expressions)


def test_make_check_leaves_out_the_slow_and_real_process_tests():
    """`make check` ran the tests marked slow (32 longer end-to-end runs): it leaves them
    out, and the real-process ones as before, and runs every other test."""
    check = _selections("check")
    assert _runs(check) and _runs(check, "cuda")
    assert not _runs(check, "slow") and not _runs(check, REAL)
    assert not _runs(check, "slow", REAL)


def test_make_test_runs_every_test():
    """`make test` (what CI runs) still runs the slow tests and the real-process ones."""
    full = _selections("test")
    for marks in ((), ("slow",), (REAL,), ("slow", REAL)):
        assert _runs(full, *marks), marks
