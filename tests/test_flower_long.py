"""A long Flower deployment costs a site the same per message at the end as at the start.

Counting tests (bytes and records, never wall time): what a site stores and reads for one
message must not grow with the rounds before it.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower import snapshots
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site_state import canonical_bytes
from fedlabels.privacy import ledger as ledger_module
from fedlabels.privacy.events import XorEvent
from fedlabels.privacy.ledger import Ledger, events_from_json, events_to_json
from fedlabels.runs.config import RunConfig


def _xor(n_bits: int = 740) -> XorEvent:
    f = 0.4
    return XorEvent(4 * math.log((1 - f) / f), 4, f, n_bits)


def test_a_ledger_of_repeated_releases_is_stored_once_with_its_count() -> None:
    short = Ledger(1e-5, events=[_xor() for _ in range(10)]).events_json()
    long = Ledger(1e-5, events=[_xor() for _ in range(1000)]).events_json()
    assert len(long) - len(short) == 2  # "1000" for "10": one event and its count
    mixed = [_xor(), _xor(), _xor(7), _xor(), _xor(7), _xor(7), _xor(7)]
    text = Ledger(1e-5, events=list(mixed)).events_json()
    assert events_from_json(text) == mixed  # runs kept in order
    assert [item.get("repeat", 1) for item in json.loads(text)] == [2, 1, 1, 3]
    assert events_from_json(events_to_json(mixed)) == mixed  # the plain list still reads


def test_a_restored_ledger_encodes_each_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    text = Ledger(1e-5, events=[_xor() for _ in range(500)]).events_json()
    calls: list[int] = []
    original = ledger_module.event_to_dict

    def counted(event: Any) -> Any:
        calls.append(1)
        return original(event)

    monkeypatch.setattr(ledger_module, "event_to_dict", counted)
    restored = Ledger(1e-5)
    restored.restore_json(text)  # a site's role, restored for every message
    restored.record(_xor())
    again = restored.events_json()
    assert len(calls) == 2  # the run's event and the new one, not 501 events
    assert events_from_json(again) == [_xor()] * 501


def _grouped(events: list[Any]) -> list[list[Any]]:
    """The oracle: [event, how many in a row] over the whole list, grouped afresh."""
    runs: list[list[Any]] = []
    for event in events:
        if runs and runs[-1][0] == event:
            runs[-1][1] += 1
        else:
            runs.append([event, 1])
    return runs


def test_events_json_keeps_its_runs_as_the_list_grows_shrinks_and_is_restored() -> None:
    # the runs are kept between calls (not regrouped over the history each time); after
    # appends, a rewind, a replaced element and a restore they must equal a fresh grouping
    rng = random.Random(3)
    kinds = [_xor(), _xor(7), _xor(11)]
    led = Ledger(1e-5)
    for step in range(400):
        roll = rng.random()
        if roll < 0.75:
            led.events.append(rng.choice(kinds[:2] if step % 50 < 40 else kinds))
        elif roll < 0.85 and led.events:
            del led.events[rng.randrange(len(led.events)):]  # a rewound ledger
        elif roll < 0.9 and led.events:
            led.events[rng.randrange(len(led.events))] = rng.choice(kinds)
        elif roll < 0.95:
            text = led.events_json()
            led = Ledger(1e-5)
            led.restore_json(text)  # a role restored from its state
        text = led.events_json()
        items = json.loads(text)
        got = [[events_from_json(json.dumps([item.get("event", item)]))[0],
                item.get("repeat", 1)] for item in items]
        assert got == _grouped(led.events), step
        assert events_from_json(text) == led.events


def test_events_json_reads_the_history_in_c_not_in_a_python_loop() -> None:
    # the history is compared in C (json_list.kept) and only the new events are encoded
    led = Ledger(1e-5, events=[_xor() for _ in range(5000)])
    led.events_json()
    led.events.append(_xor(7))
    lines: list[int] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            lines.append(1)
        return tracer

    sys.settrace(tracer)
    try:
        text = led.events_json()
    finally:
        sys.settrace(None)
    # encoding the new event takes ~200 lines; a Python loop over the 5,000 took > 10,000
    assert len(lines) < 2000, len(lines)
    assert json.loads(text)[-1]["n_bits"] == 7  # the new event, alone


@pytest.mark.parametrize("item", [{"event": None, "repeat": 2}, {"repeat": 1},
                                  {"event": {}, "repeat": 1}, {"event": {}, "repeat": True},
                                  {"event": {}, "repeat": 2.0}, {"event": {}, "repeat": -3},
                                  {"event": {}, "repeat": 2, "more": 1},
                                  {"event": {}, "repeat": 10**9}, 7])
def test_a_bad_repeat_is_refused(item: Any) -> None:
    good = json.loads(events_to_json([_xor()]))[0]
    if isinstance(item, dict) and item.get("event") == {}:
        item = {**item, "event": good}
    with pytest.raises(FedLabelsError):
        events_from_json(json.dumps([good, item]))


def _state_sizes(tmp_path: Path, rounds: int,
                 monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Round -> bytes of site 0's sealed state after its message of that round."""
    sizes: dict[int, int] = {}
    save = snapshots.save_snapshot

    def measured(folder: Path, seq: int, rnd: int, state: Any, partition_id: int,
                 key: bytes) -> None:
        if partition_id == 0:
            sizes[rnd] = len(canonical_bytes(state, partition_id))
        save(folder, seq, rnd, state, partition_id, key)

    monkeypatch.setattr(snapshots, "save_snapshot", measured)
    cfg = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                    rounds=rounds, seed=0, eval_every=rounds,
                    options={"epsilon_per_round": 0.5, "mechanism": "xor"})
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    assert run_server(grid, server_context(prepared.spec)) is not None
    return sizes


def test_a_dp_sites_stored_state_does_not_grow_with_its_releases(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _state_sizes(tmp_path, 12, monkeypatch)
    # one release a round: the ledger in the state held one more event (about 360 bytes)
    # after every round, so the snapshot, the HMAC and context.state grew with the run
    assert sorted(sizes) == list(range(12)), sizes  # rounds 0..11
    # (a few bytes vary with the noise generator's state: its numbers' digits)
    assert abs(sizes[11] - sizes[2]) < 64, sizes


def _site_ledger(tmp_path: Path, epsilon: float | None = None) -> Any:
    import numpy as np

    from fedlabels.privacy.site_ledger import SiteLedger

    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    return SiteLedger.open(tmp_path / "ledger", b"k" * 32, X, np.array([0, 1, 0, 1]),
                           epsilon=epsilon, delta=1e-5)


def _one_message(site: Any, seq: int) -> None:
    """What a site does to its ledger for one DP message: the plan's budget, one charge."""
    site.fix_plan_budget(lambda: None)
    site.charge([_xor(0)], sequence="s", seq=seq, round=seq, charge=0)


def _tags_of_one_message(tmp_path: Path, history: int,
                         monkeypatch: pytest.MonkeyPatch) -> int:
    from fedlabels.privacy import site_ledger

    site = _site_ledger(tmp_path)
    site.charge([_xor(0)] * history, sequence="s", seq=1, round=1, charge=0)
    _one_message(site, 2)
    calls: list[int] = []
    original = site_ledger.tag

    def counted(*args: Any) -> str:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(site_ledger, "tag", counted)
    _one_message(site, 3)
    monkeypatch.setattr(site_ledger, "tag", original)
    return len(calls)


def test_a_charge_checks_the_new_entries_not_the_whole_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    few = _tags_of_one_message(tmp_path / "few", 3, monkeypatch)
    many = _tags_of_one_message(tmp_path / "many", 1000, monkeypatch)
    # before: every entry's tag checked three times a message (1,007 entries: 3,000 tags)
    assert many == few <= 6, (few, many)


def test_the_ledgers_head_follows_the_file_and_a_stale_or_forged_one_is_not_trusted(
        tmp_path: Path) -> None:
    from fedlabels.privacy.site_ledger import HEAD

    site = _site_ledger(tmp_path, epsilon=100.0)
    _one_message(site, 1)
    head = site.path.with_name(HEAD)
    assert head.stat().st_mode & 0o777 == 0o600
    old = head.read_bytes()
    for seq in (2, 3):
        _one_message(site, seq)
    head.write_bytes(old)  # an older head: the entries after it are read and checked
    assert _site_ledger(tmp_path, 100.0).charge([_xor(0)], sequence="s", seq=4).epsilon \
        == pytest.approx(Ledger(1e-5, events=[_xor(0)] * 4).spent().epsilon)
    forged = json.loads(head.read_bytes())
    forged["body"]["runs"] = []  # claims no releases: its tag fails, the file is read
    head.write_text(json.dumps(forged))
    assert _site_ledger(tmp_path, 100.0).charge([_xor(0)], sequence="s", seq=5).epsilon \
        == pytest.approx(Ledger(1e-5, events=[_xor(0)] * 5).spent().epsilon)
    head.unlink()
    assert len(_site_ledger(tmp_path).events()) == 5


def test_a_last_entry_cut_short_is_dropped_and_a_bad_complete_one_refused(
        tmp_path: Path) -> None:
    site = _site_ledger(tmp_path)
    for seq in (1, 2):
        _one_message(site, seq)
    whole = site.path.read_bytes()
    last = whole.splitlines(keepends=True)[-1]
    for cut in (1, len(last) // 2, len(last) - 1):  # a crash during the append
        site.path.write_bytes(whole + last[:cut].replace(b'"n": 2', b'"n": 3'))
        assert len(_site_ledger(tmp_path).events()) == 2  # read without the torn line
        _one_message(_site_ledger(tmp_path), 3)  # charged after cutting it off
        assert site.path.read_bytes().startswith(whole)
        assert len(_site_ledger(tmp_path).events()) == 3  # the whole chain checks
        site.path.write_bytes(whole)
        site.path.with_name("ledger.head").unlink()
    # a complete line (its newline written) that fails its check is refused, not dropped
    site.path.write_bytes(whole + last.replace(b'"n": 2', b'"n": 3'))
    with pytest.raises(FedLabelsError, match="integrity check"):
        _site_ledger(tmp_path).events()
    with pytest.raises(FedLabelsError, match="integrity check"):
        _one_message(_site_ledger(tmp_path), 3)


def test_the_launchers_process_record_keeps_only_what_may_still_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SuperNode starts a process per message: the launcher's record of its descendants
    (``processes.json``, written again whenever a new one appears) held every one ever
    seen, so it grew with the rounds; now those that are gone are dropped."""
    import subprocess
    import sys

    from fedlabels.deploy import launcher as launcher_module
    from fedlabels.deploy.launcher import LocalDeployment

    deployment = LocalDeployment.__new__(LocalDeployment)  # no Flower process needed
    deployment._seen, deployment.processes_file = {}, tmp_path / "processes.json"
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    deployment.procs = {"supernode_0": root}
    try:
        for _ in range(30):  # 30 messages, each a process that ran and was reaped
            message = subprocess.Popen(["true"])
            message.wait()
            monkeypatch.setattr(launcher_module, "descendants",
                                lambda roots, pid=message.pid: [live.pid, pid])
            deployment._seen.setdefault(root.pid, None)
            deployment._record()
        recorded = json.loads(deployment.processes_file.read_text())
        assert str(live.pid) in recorded and str(root.pid) in recorded
        assert len(recorded) <= 3, recorded  # before: 32
    finally:
        for proc in (root, live):
            proc.kill()
            proc.wait()
