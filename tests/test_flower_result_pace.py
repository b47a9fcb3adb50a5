"""The ServerApp's result JSON is written paced (fedlabels.runs.paced), not after every
round: one write holds every round (0.3-0.5 s at 3,000 rounds). What is on disk mid-run is
always a valid result, the final file holds every round, and an interrupt writes the last
complete round's result that the pacing put off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fedlabels.engines.flower.server_app as server_app
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.config import RunConfig
from fedlabels.runs.paced import PacedWrite

CFG = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=6,
                seed=0)


def test_writes_are_spaced_by_their_cost_and_the_last_one_put_off_is_flushed() -> None:
    now = [0.0]
    done: list[int] = []

    def write(rnd: int) -> Any:
        def run() -> None:
            now[0] += 1.0  # each write takes 1 s
            done.append(rnd)
        return run

    pace = PacedWrite(0.25, clock=lambda: now[0])
    for rnd in range(1, 13):  # rounds of 0.5 s; a write is due 1 s / 0.25 after the last began
        pace(write(rnd))
        now[0] += 0.5
    assert done == [1, 7]  # at 0 s and 4 s (rounds 2-6 and 8-12 put off)
    assert pace.put_off == 10 and pace.pending is not None
    pace.flush()  # the end of the run: the newest state, put off, is written
    assert done == [1, 7, 12] and pace.pending is None
    pace.flush()  # nothing pending: nothing written
    assert done == [1, 7, 12] and pace.written == 3


def _counting_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ServerApp's result writes: (rounds in the file) of each."""
    writes: list[int] = []
    save = RunResult.save_json

    def counted(self: RunResult, path: Any, overwrite: bool = False) -> Path:
        writes.append(len(self.rounds))
        return save(self, path, overwrite)

    monkeypatch.setattr(RunResult, "save_json", counted)
    return writes


def test_the_result_is_written_paced_valid_mid_run_and_complete_at_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With writes as costly as a 3,000-round result's against quick rounds (a share that
    puts every write after the first off), the result is written after round 1 and at the
    end, not after each of the 6 rounds (before: 7 writes)."""
    monkeypatch.setattr(server_app, "RESULT_SHARE", 1e-9)
    writes = _counting_writes(monkeypatch)
    prepared, grid = loopback_deployment(CFG, tmp_path / "sites")
    output = Path(prepared.spec.output)
    seen: list[int] = []

    def look(record: RoundRecord) -> None:  # the file as a reader sees it mid-run
        data = json.loads(output.read_text())
        seen.append(len(data["rounds"]))
        assert data["deployment"]["status"] == "running"

    result = server_app.run_server(grid, server_context(prepared.spec), on_round=look)
    assert writes == [1, 6]
    assert seen == [1] * 6
    final = json.loads(output.read_text())
    assert result is not None and len(final["rounds"]) == 6
    assert final["deployment"]["status"] == "completed"
    assert final["rounds"] == json.loads(json.dumps(result.to_dict()["rounds"]))


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_writes_the_result_the_pacing_put_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: type[BaseException]) -> None:
    monkeypatch.setattr(server_app, "RESULT_SHARE", 1e-9)
    writes = _counting_writes(monkeypatch)
    prepared, grid = loopback_deployment(CFG, tmp_path / "sites")

    def interrupted(record: RoundRecord) -> None:
        if record.round == 4:
            raise stop

    with pytest.raises(stop):
        server_app.run_server(grid, server_context(prepared.spec), on_round=interrupted)
    assert writes == [1, 4]
    data = json.loads(Path(prepared.spec.output).read_text())
    assert [r["round"] for r in data["rounds"]] == [1, 2, 3, 4]
    status = json.loads(Path(prepared.spec.status).read_text())
    assert status["status"] == "interrupted"
