"""benchmarks/pld_gain.py: both arms run with the σ they name (RDP's, given as
noise_multiplier, above PLD's, its PLD ε below the target), the record is written once, bad
arguments refused. No accuracy is asserted (a benchmark of DP runs, not a test of them)."""

from __future__ import annotations

import json

import pytest

from conftest import load_benchmark


def test_each_arm_runs_with_its_calibration(tmp_path):
    script = load_benchmark("pld_gain")
    out = tmp_path / "gain.json"
    # ε 1: the PLD calibrations (most of the test's time) take half as long as at ε 8
    assert script.main(["--smoke", "--epsilons", "1", "--reps", "2", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert {(r["setting"], r["seed"]) for r in runs} == {
        (s, seed) for s in ("record", "fedct", "client") for seed in (0, 1)}
    for run in runs:
        assert run["rdp"]["sigma"] > run["pld"]["sigma"]
        assert run["rdp"]["epsilon_reported"] < run["pld"]["epsilon_reported"] <= 1.0
    with pytest.raises(SystemExit):  # an existing record is never overwritten
        script.main(["--smoke", "--out", str(out)])
    with pytest.raises(SystemExit):
        script.main(["--smoke", "--settings", "client,dpsgd"])


def test_the_interval_is_students_t():
    script = load_benchmark("pld_gain")
    from scipy import stats

    mean, low, high = script.interval([0.1, 0.3, 0.2])
    expected = stats.t.interval(0.95, 2, loc=0.2, scale=stats.sem([0.1, 0.3, 0.2]))
    assert mean == pytest.approx(0.2)
    assert (low, high) == pytest.approx(expected)
