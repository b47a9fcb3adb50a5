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
  sorted and encoded) and as ``meter.entries_json()`` after one more round;
* ``ledger``: one ledger's events as JSON (``events_json``) after one more release;
* ``write``: ``write_checkpoint`` of the records, byte counts and the 5 clients' and the
  server's ledgers (CPU only: its fsync waits are not counted), the file's size: in one
  file (``whole``: all of it rewritten) and with a journal (``journaled``: the journal of
  the T rounds written once, then each timed write adds one more round's record, byte
  counts and ledger events), its state file's size and what the journal grows a write.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedlabels.core.json_list import json_list
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

    incremental = _cpu_ms(one_more, repeat)
    client = Ledger(DELTA)
    client.events.extend(_release() for _ in range(rounds))
    client.events_json()
    ledger_json = _cpu_ms(lambda i: _grown(client).events_json(), repeat)
    with tempfile.TemporaryDirectory(prefix="dp-parts-") as tmp:
        path = Path(tmp) / "run.checkpoint.npz"
        record = RoundRecord(1, None, [0.9] * CLIENTS, {"consensus_accuracy": 0.9},
                             [123_456] * CLIENTS, [234_567] * CLIENTS, 0.05)
        records: list[Any] = [[record] * rounds, []]
        meta = {"records": EncodedJSON(json_list(records[0], _record_json, records[1])),
                "meter": EncodedJSON(meter.entries_json(), last=False)}
        states = {cid: {"ledger_events": client.events_json()} for cid in range(CLIENTS)}
        server = {"events#json": client.events_json()}
        write = _cpu_ms(lambda i: write_checkpoint(path, meta, server, states, b"k" * 32),
                        repeat)
        size = path.stat().st_size / 1e6
        journal = Journal(journal_path(path), b"k" * 32)
        write_checkpoint(path, meta, server, states, journal=journal)  # the T rounds, once
        later = [_one_round_more(meter, client, records, rounds + repeat + i)
                 for i in range(repeat)]  # built first: the snapshot's join is not the write
        grew = journal.length
        journaled = _cpu_ms(lambda i: write_checkpoint(path, *later[i], journal=journal),
                            repeat)
        grew, state = (journal.length - grew) / repeat, path.stat().st_size
    return (f"{rounds} rounds: check {old:.2f} ms (ε by bisection) -> admit {none:.3f} ms "
            f"(no target), {within:.2f} ms (a target); byte counts {sorted_all:.2f} -> "
            f"{incremental:.3f} ms; one ledger's JSON {ledger_json:.2f} ms; the checkpoint's "
            f"write {write:.1f} ms ({size:.1f} MB) whole -> {journaled:.2f} ms journaled "
            f"(state file {state / 1e3:.1f} kB, journal +{grew / 1e3:.1f} kB a write)")


def _one_round_more(meter: CommMeter, client: Ledger, records: list[Any],
                    rnd: int) -> tuple[dict[str, Any], dict[str, Any], dict[int, Any]]:
    """The checkpoint's meta and states after one more round (``records``: the round
    records and their :func:`json_list` cache)."""
    _count_round(meter, rnd)
    client.events.append(_release())
    items, done = records
    items.append(items[-1])
    meta = {"records": EncodedJSON(json_list(items, _record_json, done)),
            "meter": EncodedJSON(meter.entries_json(), last=False)}
    events = client.events_json()
    return meta, {"events#json": events}, {c: {"ledger_events": events} for c in range(CLIENTS)}


if __name__ == "__main__":
    main()
