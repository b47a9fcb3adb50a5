"""``benchmarks/xclp_protocol.py``'s trace: one line per server phase and per client per
SecureHamming step, written as the run goes, also from forked workers, and summed per step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fedlabels as fl
from conftest import load_benchmark
from fedlabels.api import load_federation
from fedlabels.methods.xclp.server import XCLPServerCore
from fedlabels.secure.hamming_protocol import HammingParty

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "xclp_protocol.py"
PHASES = ("setup", "seed", "hamming", "graph_and_solve", "influence", "rowsums", "result")


def _bench():  # type: ignore[no-untyped-def]
    return load_benchmark("xclp_protocol")


def test_trace_lines_come_from_every_client_and_phase_and_sum_per_step(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    bench = _bench()
    for phase in PHASES:  # restored after the test
        monkeypatch.setattr(XCLPServerCore, phase, getattr(XCLPServerCore, phase))
    monkeypatch.setattr(HammingParty, "step", HammingParty.step)
    bench.trace()
    fed = load_federation("breast_cancer", clients=4, partition="quantity:0.5,20", seed=0)
    fl.run("xclp", fed, rounds=1, seed=0, progress=False, workers=2, options={
        "secure": "paillier", "lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3,
        "key_bits": 512, "insecure_small_keys": True})
    err = capfd.readouterr().err  # the forked workers' lines too (same file descriptor)
    trace = tmp_path / "run.trace"
    trace.write_text(err)
    lines = [json.loads(t) for t in err.splitlines() if t.startswith("{")]
    ends = [x for x in lines if x["event"] == "end"]
    assert {x["phase"] for x in ends if "phase" in x} == set(PHASES)
    assert [x["phase"] for x in bench.STEPS] == list(PHASES)
    steps = bench.step_summary(trace)
    assert sorted(steps) == ["1", "2", "3"]
    for s in steps.values():  # every client answered every Paillier step
        assert sorted(s["cpu_s"]) == ["0", "1", "2", "3"]
        assert s["span_s"] >= max(s["wall_s"].values()) - 0.02
        assert s["cpu_s_total"] == pytest.approx(sum(s["cpu_s"].values()), abs=0.01)
    pids = {x["pid"] for x in ends if "client" in x}
    assert len(pids) == 2  # the two workers' lines, not the simulator's
    assert all(x["t"] >= 0 and x["wall_s"] >= 0 and x["cpu_s"] >= 0 for x in ends)
