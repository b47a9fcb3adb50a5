"""What one late round of a long DP-FedCT run costs in its bookkeeping, by part, at T rounds
(docs/usage.md, Long runs), without running the T rounds: the state of the
``benchmarks/dp_long_rounds.py`` run (5 clients, s* = 740 bits, ε = 1 a round) is built
directly, then one more round's parts are timed (CPU, the median of ``--repeat``)::

    nice -n 10 python benchmarks/dp_round_parts.py --rounds 1000,8000,20000

* ``check``: the server's budget check of the next release as ``check(tight=False)`` does
  it (the exact accountant's ε by bisection, its binomial window built for the new n), and
  as ``admit`` does it without a target (nothing) and with one just above the exact
  accountant's ε (a decision by one or two evaluations of δ(ε), the window built);
* ``meter``: the checkpoint's byte counts as ``json.dumps(meter.entries())`` (every round
  sorted and encoded), as ``meter.entries_json()`` after one more round (the new round
  encoded, every round's text joined) and as ``meter.entries_view()`` (what a checkpoint
  takes now: the new round encoded, nothing joined);
* ``ledger``: one ledger's events as JSON (``events_json``) after one more release;
* ``write``: ``write_checkpoint`` of the records, byte counts, the 5 clients' ledgers (one
  run of equal events each) and the server's events (one a round, an element each, as
  ``ServerRole.state_views`` encodes them) (CPU only: its fsync waits are not counted), the
  file's size: in one file (``whole``: all of it rewritten) and with a journal, the journal
  of the T rounds written once, then each timed checkpoint encodes one more round (its
  record, byte counts and events) and writes it: ``texts`` as the checkpoint did before
  (each list's whole text joined, the journal comparing it with the text it holds) and
  ``pieces`` as it does now (each list a ``JSONList``: the journal takes the new elements),
  side by side in one process; the state file's size and what the journal grows a write.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedlabels.core.json_list import JSONList, json_list_view
from fedlabels.method.server_state import _element_json
from fedlabels.privacy.events import XorEvent
from fedlabels.privacy.ledger import Ledger
from fedlabels.privacy.mechanisms import flip_probability
from fedlabels.results import RoundRecord
from fedlabels.runs.checkpoint import EncodedJSON, _record_json, write_checkpoint
from fedlabels.runs.journal import Journal, journal_path
from fedlabels.runs.loop import CommMeter

BITS, CLIENTS, DELTA = 740, 5, 1e-5


def _cpu_ms(step: Callable[[int], object], repeat: int) -> float:
    """Median CPU milliseconds of ``step(i)``, i = 0 .. repeat - 1."""
    times = []
    for i in range(repeat):
        started = time.process_time()
        step(i)
        times.append(time.process_time() - started)
    return 1000 * statistics.median(times)


def _release() -> XorEvent:
    return XorEvent(1.0, BITS, flip_probability(1.0, BITS), 370 * 2)


def _count_round(meter: CommMeter, rnd: int) -> None:
    for cid in range(CLIENTS):
        for direction in ("down", "up"):
            meter.add(rnd, cid, direction, "protocol", 10_000 + rnd)
            meter.add(rnd, cid, direction, "evaluation", 90 + cid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="1000,8000,20000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for rounds in (int(r) for r in args.rounds.split(",")):
        print(_measure(rounds, args.repeat), flush=True)


def _grown(ledger: Ledger) -> Ledger:
    """``ledger`` with one more release: a new n, nothing memoised."""
    ledger.events.append(_release())
    return ledger


def _measure(rounds: int, repeat: int) -> str:
    free = Ledger(DELTA, per_client=True)
    free.events.extend(_release() for _ in range(rounds))
    spent = free.spent()  # the exact accountant's ε, below RDP's: a target just above
    budget = Ledger(DELTA, target=1.01 * spent.epsilon, per_client=True)  # it asks exact
    budget.events.extend(free.events)
    old = _cpu_ms(lambda i: _grown(free).check([_release()], tight=False), repeat)
    none = _cpu_ms(lambda i: _grown(free).admit([_release()]), repeat)
    within = _cpu_ms(lambda i: _grown(budget).admit([_release()]), repeat)
    meter = CommMeter()
    for rnd in range(rounds):
        _count_round(meter, rnd)
    meter.entries_json()
    sorted_all = _cpu_ms(lambda i: json.dumps(meter.entries()), repeat)

    def one_more(i: int) -> str:
        _count_round(meter, rounds + i)
        return meter.entries_json()

    def one_more_view(i: int) -> JSONList:
        _count_round(meter, rounds + repeat + i)
        return meter.entries_view()

    incremental = _cpu_ms(one_more, repeat)
    view = _cpu_ms(one_more_view, repeat)
    client = Ledger(DELTA)
    client.events.extend(_release() for _ in range(rounds))
    client.events_json()
    ledger_json = _cpu_ms(lambda i: _grown(client).events_json(), repeat)
    with tempfile.TemporaryDirectory(prefix="dp-parts-") as tmp:
        path = Path(tmp) / "run.checkpoint.npz"
        record = RoundRecord(1, None, [0.9] * CLIENTS, {"consensus_accuracy": 0.9},
                             [123_456] * CLIENTS, [234_567] * CLIENTS, 0.05)
        after = rounds + 2 * repeat  # (one_more above counted rounds up to there)
        states = {kind: _State(copy.deepcopy(meter), copy.deepcopy(client),
                               [record] * rounds, list(client.events))
                  for kind in ("texts", "pieces")}
        snapshots = {kind: state.more(after) for kind, state in states.items()}
        snapshots["texts"] = _texts(snapshots["texts"])
        write = _cpu_ms(lambda i: write_checkpoint(path, *snapshots["texts"], b"k" * 32),
                        repeat)
        size = path.stat().st_size / 1e6
        paths = {kind: Path(tmp) / kind / "run.checkpoint.npz" for kind in states}
        journals = {}
        for kind, at in paths.items():
            at.parent.mkdir()
            journals[kind] = Journal(journal_path(at), b"k" * 32)
            write_checkpoint(at, *snapshots[kind], journal=journals[kind])  # the T rounds
        grew = journals["pieces"].length
        times: dict[str, list[float]] = {kind: [] for kind in states}
        for i in range(repeat):  # one round more each, the two ways in turn
            for kind, state in states.items():
                started = time.process_time()
                snapshot = state.more(after + 1 + i)
                write_checkpoint(paths[kind], *(_texts(snapshot) if kind == "texts"
                                                else snapshot), journal=journals[kind])
                times[kind].append(time.process_time() - started)
        texts, pieces = (1000 * statistics.median(times[k]) for k in ("texts", "pieces"))
        grew = (journals["pieces"].length - grew) / repeat
        state_size = paths["pieces"].stat().st_size
    return (f"{rounds} rounds: check {old:.2f} ms (ε by bisection) -> admit {none:.3f} ms "
            f"(no target), {within:.2f} ms (a target); byte counts {sorted_all:.2f} -> "
            f"{incremental:.3f} ms (joined) -> {view:.3f} ms (pieces); one ledger's JSON "
            f"{ledger_json:.2f} ms; the checkpoint's "
            f"write {write:.1f} ms ({size:.1f} MB) whole -> a round encoded and written "
            f"journaled {texts:.2f} ms (texts) -> {pieces:.3f} ms (pieces) (state file "
            f"{state_size / 1e3:.1f} kB, journal +{grew / 1e3:.1f} kB a round)")


class _State:
    """What a checkpoint holds that grows: the byte counts, a client's ledger (the 5
    clients'), the round records and the server's events, with their encoders' caches."""

    def __init__(self, meter: CommMeter, client: Ledger, records: list[Any],
                 events: list[Any]) -> None:
        self.meter, self.client, self.records, self.events = meter, client, records, events
        self.records_done: list[Any] = []
        self.events_done: list[Any] = []

    def more(self, rnd: int) -> tuple[dict[str, Any], dict[str, Any], dict[int, Any]]:
        """One more round (``rnd``) counted and released; the checkpoint's meta and states,
        each long list as a ``JSONList``."""
        _count_round(self.meter, rnd)
        self.client.events.append(_release())
        self.events.append(self.client.events[-1])
        self.records.append(self.records[-1])
        meta = {"records": EncodedJSON(json_list_view(self.records, _record_json,
                                                      self.records_done)),
                "meter": EncodedJSON(self.meter.entries_view(), last=False)}
        ledger = self.client.events_json()
        server = {"events#json": json_list_view(self.events, _element_json, self.events_done)}
        return meta, server, {c: {"ledger_events": ledger} for c in range(CLIENTS)}


def _texts(snapshot: tuple[dict[str, Any], dict[str, Any], dict[int, Any]]
           ) -> tuple[dict[str, Any], dict[str, Any], dict[int, Any]]:
    """``snapshot`` with every ``JSONList`` joined into its text (the checkpoint before)."""
    meta, server, clients = snapshot
    return ({k: EncodedJSON(_joined(v.text), v.last) for k, v in meta.items()},
            {k: _joined(v) for k, v in server.items()}, clients)


def _joined(value: Any) -> Any:
    return value.text if isinstance(value, JSONList) else value


if __name__ == "__main__":
    main()
