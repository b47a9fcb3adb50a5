"""benchmarks/batched_overhead.py: the current batched training against a version of it
given as a file, side by side; against itself the weights agree exactly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("rows", ["shared", "fedct"])
def test_the_current_version_against_itself(capsys, rows):
    spec = importlib.util.spec_from_file_location(
        "batched_overhead", ROOT / "benchmarks" / "batched_overhead.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["batched_overhead"] = module
    spec.loader.exec_module(module)
    current = ROOT / "src" / "fedlabels" / "learners" / "batched.py"
    assert module.main(["--baseline", str(current), "--clients", "4", "--calls", "3",
                        "--rows", rows, "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "'max_weight_gap': 0.0" in out and "'clients': 4" in out
    assert f"'rows': '{rows}'" in out and "'steps': 3" in out
