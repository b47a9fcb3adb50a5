"""Long runs: one round's bookkeeping must not grow with the rounds before it.

A DP run checkpoints every round (its server keeps a privacy ledger), and the checkpoint
holds the round records and every client's ledger; encoding them all again each round made
round t cost O(t) and a run of T rounds O(T²) (DP-FedCT on breast_cancer: 111 ms a round at
round 100, 386 ms at round 900).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedlabels.api import load_federation
from fedlabels.data import Federation
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.method import server_state
from fedlabels.methods import METHODS
from fedlabels.privacy import ledger as ledger_module
from fedlabels.privacy.events import XorEvent
from fedlabels.privacy.ledger import Ledger, events_from_json, events_to_json
from fedlabels.runs import checkpoint as ckpt_module
from fedlabels.runs.checkpoint import load_checkpoint

CLIENTS, ROUNDS = 3, 8


@pytest.fixture(scope="module")
def fed() -> Federation:
    return load_federation("breast_cancer", clients=CLIENTS, seed=0)


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _xor(i: int) -> XorEvent:
    f = 0.4
    return XorEvent(4 * math.log((1 - f) / f), 4, f, 100 + i)


def test_ledger_json_encodes_each_event_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger(1e-5, events=[_xor(i) for i in range(50)])
    assert ledger.events_json() == events_to_json(ledger.events)  # the plain encoding
    calls = _counting(monkeypatch, ledger_module, "event_to_dict")
    ledger.record(_xor(50))
    text = ledger.events_json()
    assert len(calls) == 1  # the new event only, not the 51 of the ledger
    assert text == events_to_json(ledger.events)
    ledger.events[10] = _xor(999)  # a list changed in place: re-encoded from there
    assert events_from_json(ledger.events_json()) == ledger.events


def test_dp_checkpoint_encodes_each_record_and_event_once(
        fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _counting(monkeypatch, ckpt_module, "asdict")
    events = _counting(monkeypatch, ledger_module, "event_to_dict")
    server_events: list[Any] = []
    tree = server_state._tree

    def counted_tree(value: Any) -> Any:
        if type(value).__name__.endswith("Event"):
            server_events.append(value)
        return tree(value)

    monkeypatch.setattr(server_state, "_tree", counted_tree)
    path = tmp_path / "run.checkpoint.npz"
    result = simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=ROUNDS, seed=0,
                      progress=False, options={"epsilon_per_round": 1.0}, checkpoint=path,
                      workers=1)
    assert result.extra["provenance"]["checkpoints"]["written"] == ROUNDS  # every round
    # once per record and per client release, not again at each of the 8 checkpoints
    # (before: 1 + 2 + ... + 8 = 36 records and 3 x 36 client events encoded, and the
    # server's ledger 8 times over)
    assert len(records) == ROUNDS
    assert len(events) == CLIENTS * ROUNDS
    saved = load_checkpoint(path)
    in_ledger = json.loads(str(saved.server["events#json"]))
    assert len(in_ledger) >= ROUNDS
    assert len(server_events) == len(in_ledger)  # the server's ledger: each event once
    assert [r.to_dict() for r in saved.records] == [r.to_dict() for r in result.rounds]
    for state in saved.clients.values():
        released = events_from_json(str(state["ledger_events"]))
        assert len(released) == ROUNDS
        # the same event each round: stored once with its count, not ROUNDS times
        assert json.loads(str(state["ledger_events"])) == [
            {"event": json.loads(events_to_json(released[:1]))[0], "repeat": ROUNDS}]


def test_checkpoint_meta_is_utf8_not_four_bytes_a_character(
        fed: Federation, tmp_path: Path) -> None:
    path = tmp_path / "run.checkpoint.npz"
    simulate(METHODS["fedct"], fed, as_models("dt"), rounds=3, seed=0, progress=False,
             checkpoint=path, workers=1)
    with np.load(path, allow_pickle=False) as npz:
        meta = npz["meta"]
        text = meta.tobytes().decode()
        assert meta.nbytes == len(text.encode())  # a numpy str array: 4 bytes a character
    assert "journal" in json.loads(text)  # the records are in the journal
    assert len(load_checkpoint(path).records) == 3


def test_the_cached_elements_are_found_without_a_python_step_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """json_list compared every cached element with the list's in a Python loop, and the
    server's state checked every event frozen again, at every checkpoint (together about
    5 ms a ledger at 8,000 rounds); both now look at the new elements only."""
    import sys

    from fedlabels.core import json_list as json_list_module

    events = [_xor(i) for i in range(3000)]
    done: list[Any] = []
    json_list_module.json_list(events, ledger_module._event_json, done)
    events.append(_xor(3000))
    lines: list[int] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == json_list_module.__file__:
            if event == "line":
                lines.append(frame.f_lineno)
            return tracer
        return None

    sys.settrace(tracer)
    try:
        text = json_list_module.json_list(events, ledger_module._event_json, done)
    finally:
        sys.settrace(None)
    assert text == events_to_json(events)
    assert len(lines) < 100  # before: 3 lines an element kept, 9,000
    frozen = _counting(monkeypatch, server_state, "_frozen")
    cache: dict[str, list[Any]] = {}
    first = server_state.encode_attr_cached("events", events[:-1], cache)
    server_state.encode_attr_cached("events", events, cache)
    assert len(frozen) == len(events)  # each event checked once (before: 2 x 3,000 + 1)
    assert first == server_state.encode_attr("events", events[:-1])
    assert server_state.encode_attr_cached("events", events, {}) == \
        server_state.encode_attr("events", events)
