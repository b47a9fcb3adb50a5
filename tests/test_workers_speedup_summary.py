"""benchmarks/workers_speedup.py's timeline summary, on a timeline worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import load_benchmark

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "workers_speedup.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_benchmark("workers_speedup")


def _handle(w: int, c: int, start: float, end: float, cpu: float) -> dict[str, Any]:
    return {"event": "handle", "round": 0, "worker": w, "client": c, "start": start,
            "end": end, "cpu": cpu, "received": end}


def test_busy_overlap_and_idle_at_each_exchange_end(bench: Any) -> None:
    events = [
        {"event": "dispatch", "round": 0, "time": 0.0},
        _handle(0, 0, 0.0, 1.0, 0.9), _handle(1, 1, 0.0, 2.0, 1.8),
        _handle(0, 2, 1.0, 1.5, 0.5),
        {"event": "collected", "round": 0, "time": 2.1},
        {"event": "dispatch", "round": 1, "time": 2.5},
        _handle(0, 0, 2.5, 3.0, 0.4), _handle(1, 1, 2.5, 3.2, 0.7),
        {"event": "collected", "round": 1, "time": 3.3},
    ]
    out = bench.summarise_timeline(events)
    # busy: [0, 2] and [2.5, 3.2]; both: [0, 1.5] and [2.5, 3.0]
    assert out["any_busy_s"] == pytest.approx(2.7)
    assert out["two_or_more_busy_s"] == pytest.approx(2.0)
    assert out["busy_s_per_worker"] == {"0": 2.0, "1": 2.7}
    assert out["between_exchanges_s"] == pytest.approx(0.4)
    # worker 0 finished 0.5 s before worker 1 in the first exchange, 0.2 s in the second
    assert out["idle_at_end_s_per_worker"] == {"0": 0.7, "1": 0.0}
    assert [x["idle_at_end_s"] for x in out["exchanges"]] == [{"0": 0.5, "1": 0.0},
                                                              {"0": 0.2, "1": 0.0}]
    assert [x["span_s"] for x in out["exchanges"]] == [2.1, 0.8]
    assert out["handle_s"] == {"0": 1.5, "1": 2.7, "2": 0.5}
    assert out["handle_cpu_s"] == {"0": 1.3, "1": 2.5, "2": 0.5}


def test_the_16_core_cases_have_two_clients_per_worker(bench: Any) -> None:
    """The cases for a 16-core machine: 32 clients (ceiling 32 / ceil(32 / 16) = 16x), the
    same work per client as the 2-core cases, fewer rounds."""
    cases = bench._cases(300)
    for name, two_core in (("fedct-rf-32", "fedct-rf"), ("fedavg-mlp-32", "fedavg-mlp")):
        big, small = cases[name], cases[two_core]
        assert big["data"]["clients"] == 32
        assert {k: v for k, v in big["data"].items() if k != "clients"} == {
            k: v for k, v in small["data"].items() if k != "clients"}
        assert big["run"]["method"] == small["run"]["method"]
        assert big["run"]["model"] == small["run"]["model"]
