"""A site's lifetime privacy ledger on its own disk: append-only, chained, authenticated.

One file per dataset the site holds, ``<ledger dir>/<dataset id>/ledger.jsonl`` (the dataset
id is an HMAC of the private rows under the site's key: the same data gives the same ledger
in every run, and the name reveals nothing about the data). Each line is one entry::

    {"n": i, "entry": {...}, "mac": HMAC(key, n, mac of line i-1, canonical entry)}

so an entry cannot be changed, removed from the middle, reordered or forged without the
key (removing the *last* lines, or the whole file, needs write access to the site's 0700
directory: that is the site operator, who can also change the budget). Entry 0 names the
format and the dataset id; every later entry is one release event
(:mod:`fedlabels.privacy.ledger`), the run and the message it answered, or a noiseless
answer computed from the private data (``"noiseless"``: outside every guarantee, so no ε;
recorded, and refused a second time where the budget is the site's plan's), or the budget a
site without ``ledger-epsilon`` took from its plan (``"plan_budget"``, recorded once), or
the operator's ``ledger-epsilon`` and its δ (``"ledger_epsilon"``: recorded before the first
release or noiseless answer made under it, and again where the operator changes or removes
it, so ``fedlabels deploy ledger`` shows the budget and what is left; ledgers written before
11-30 record none until their next release), or the coordinator's plan a site that trusts it
(``trust-coordinator=true``, no plan of its own) followed in a run (``"coordinator_plan"``,
once per run).

:meth:`SiteLedger.charge` accounts every recorded event plus the new ones with
:func:`~fedlabels.privacy.ledger.account_events` at the site's δ, refuses beyond the site's
lifetime ε, and appends and fsyncs the entries **before** the release is made: a crash after
the charge loses no charge (at worst a charge for a release never sent).

A site charges for every message of a run, so a charge must not read the whole ledger
(it did: three full reads and tag checks a message, 578 kB read a message at round 400 of
a DP-FedCT deployment). Beside the ledger, ``ledger.head`` (0600, HMAC under the site's key)
seals what a charge needs of the entries so far: their number, the bytes they fill, the last
tag of the chain, the release events as runs of equal events in order, the plan's budget,
the operator's budget as last recorded, the noiseless answers and the last message charged
per sequence. A charge reads the head and checks only the entries appended after it; a head
that is missing, fails its tag, or does not continue into the file (the file is shorter, or
the bytes after it are no chained entries) makes it read and check the whole ledger, as
before, and seal a new head. The accounting therefore always comes from checked entries. The
head is a cache, written after each append without fsync: a stale one is caught up from the
file. An edit of entries the head covers does not change what a charge accounts;
``fedlabels deploy ledger``
(:func:`read_ledgers`) checks every entry.

A last line cut short (no newline: a crash or power loss during its append, before the
charge returned, so its release was never made) is dropped when the ledger is read, and
cut off before the next append; a complete line that fails its check is refused as ever.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import BudgetRefusal, FedLabelsError
from fedlabels.core.private_files import append_private, check_private, private_dir, same_tag, tag
from fedlabels.privacy.accounting import PrivacySpent
from fedlabels.privacy.ledger import REL_TOL, Ledger, event_from_dict, event_to_dict

FORMAT = "fedlabels site ledger 1"
FILE = "ledger.jsonl"
HEAD = "ledger.head"
HEAD_FORMAT = "fedlabels site ledger head 1"


def dataset_id(key: bytes, X: np.ndarray, y: np.ndarray) -> str:
    """The site's name for a dataset: an HMAC of its rows and labels under the site's key."""
    X, y = np.ascontiguousarray(X), np.ascontiguousarray(y)
    return tag(key, b"fedlabels dataset", X.dtype.str.encode(), repr(X.shape).encode(),
               X.tobytes(), y.dtype.str.encode(), y.tobytes())[:32]


def _canonical(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()


@dataclass
class SiteLedger:
    """The ledger of one dataset of one site (see the module docstring).

    ``epsilon``: the lifetime budget (the site operator's, or one run of the site's plan:
    ``plan_budget``; None: recorded, not limited);
    ``delta``: the δ the ledger states every ε at."""

    path: Path
    key: bytes
    dataset: str
    epsilon: float | None
    delta: float
    #: the budget is one run of the site's privacy-plan (no ``ledger-epsilon`` was set): a
    #: second noiseless answer is refused too
    plan_budget: bool = False
    #: the release events the ledger holds after the last :meth:`charge` (-1: none made)
    releases: int = field(default=-1, init=False, compare=False)

    @classmethod
    def open(cls, folder: str | Path, key: bytes, X: np.ndarray, y: np.ndarray, *,
             epsilon: float | None, delta: float) -> SiteLedger:
        ds = dataset_id(key, X, y)
        # the ledger folder too is 0700 (mkdir's parents would get the umask's mode)
        ledger = cls(private_dir(private_dir(folder) / ds) / FILE, key, ds, epsilon, delta)
        if not ledger.path.exists():
            ledger._append([{"format": FORMAT, "dataset": ds}], "")
        return ledger

    def _lines(self) -> list[dict[str, Any]]:
        """The entries after checking every tag and the chain; a one-line error otherwise
        (a last line cut short is dropped: see the module docstring)."""
        check_private(self.path, "the site's privacy ledger")
        entries, self._last, self._size = _chain(self.path.read_bytes(), 0, "", self)
        if not entries or entries[0] != {"format": FORMAT, "dataset": self.dataset}:
            raise self._broken(0)
        self._n = len(entries)
        return entries

    def _head(self) -> dict[str, Any]:
        """What a charge needs of the entries so far (see the module docstring): from the
        sealed head and the entries after it, else from all entries; the head is sealed
        again where it was behind."""
        check_private(self.path, "the site's privacy ledger")
        head = self._read_head()
        if head is not None:
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(head["size"])
                    tail = fh.read()
                new, last, size = _chain(tail, head["n"], head["last"], self)
            except (OSError, TypeError, ValueError, FedLabelsError):
                head = None
            else:
                self._n, self._last, self._size = head["n"] + len(new), last, head["size"] + size
                if new:
                    _fold(head, new)
                    self._seal(head)
                return head
        entries = self._lines()
        head = {"runs": [], "plan_budget": None, "budget": None, "noiseless": [],
                "recent": {}}
        _fold(head, entries[1:])
        self._seal(head)
        return head

    def _read_head(self) -> dict[str, Any] | None:
        """The sealed head if it is whole, sealed under the key, of this dataset and within
        the file; None otherwise (then the whole ledger is read)."""
        try:
            saved = json.loads(self.path.with_name(HEAD).read_bytes())
            body = saved["body"]
            ok = (same_tag(saved["mac"], tag(self.key, HEAD_FORMAT.encode(), _canonical(body)))
                  and body["format"] == HEAD_FORMAT and body["dataset"] == self.dataset
                  and 0 < body["size"] <= self.path.stat().st_size and body["n"] >= 1)
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None
        return dict(body) if ok else None

    def _seal(self, head: dict[str, Any]) -> None:
        """Write the head of the entries read or appended so far (0600, atomic; no fsync:
        a head lost in a crash is rebuilt from the file)."""
        head.update(format=HEAD_FORMAT, dataset=self.dataset, n=self._n, size=self._size,
                    last=self._last)
        data = json.dumps({"body": head, "mac": tag(self.key, HEAD_FORMAT.encode(),
                                                    _canonical(head))}).encode()
        path = self.path.with_name(HEAD)
        tmp = path.with_name(f".{HEAD}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except OSError:  # a cache: without it the next charge reads the whole ledger
            tmp.unlink(missing_ok=True)

    def _broken(self, line: int) -> FedLabelsError:
        return FedLabelsError(
            f"the site's privacy ledger {self.path} failed its integrity check at entry "
            f"{line} (HMAC chain under the site's key): it was changed outside this site, or "
            "the key changed. Refusing every release until the operator restores it.")

    def _append(self, entries: Sequence[dict[str, Any]], prev: str,
                head: dict[str, Any] | None = None) -> None:
        """Append ``entries`` after the ``self._n`` entries read (chained from ``prev``),
        cutting off a torn last line first; then seal ``head`` with them."""
        start = 0 if not self.path.exists() else self._n
        if start and self.path.stat().st_size > self._size:  # a line cut short: dropped
            os.truncate(self.path, self._size)
        out = []
        for i, entry in enumerate(entries, start):
            mac = tag(self.key, str(i).encode(), prev.encode(), _canonical(entry))
            out.append(json.dumps({"n": i, "entry": entry, "mac": mac}, sort_keys=True))
            prev = mac
        data = ("\n".join(out) + "\n").encode()
        append_private(self.path, data)
        self._n, self._last = start + len(entries), prev
        self._size = (self._size if start else 0) + len(data)
        if head is not None:
            _fold(head, list(entries))
            self._seal(head)

    def events(self) -> list[Any]:
        return _events(self._lines())

    def noiseless(self) -> int:
        """How many noiseless answers (outside the guarantee) the ledger records."""
        return _noiseless(self._lines())

    def spent(self) -> PrivacySpent:
        return self._ledger(self.events()).spent()

    def _ledger(self, events: list[Any]) -> Ledger:
        what = "this site's dataset" + (
            " (its lifetime budget is one run of the site's privacy-plan; set ledger-epsilon "
            "in the node config to allow more runs)" if self.plan_budget else "")
        return Ledger(self.delta, self.epsilon, events, what=what)

    def _ledger_of_runs(self, runs: Sequence[Sequence[Any]]) -> Ledger:
        """:meth:`_ledger` of a head's runs (each decoded once, counted a run at a time)."""
        ledger = self._ledger([])
        ledger.restore_runs([(event_from_dict(event), int(count)) for event, count in runs])
        return ledger

    def charge(self, events: Sequence[Any], run_plan: Sequence[Any] | None = None,
               **about: Any) -> PrivacySpent:
        """Record ``events`` before their release; refuse beyond the lifetime budget.

        ``run_plan`` (the events the whole run plans, given with its first release): refuse
        at once when the releases of other runs (other ``sequence``s) and the whole plan do
        not fit in the budget, rather than release part of a run that cannot finish.

        ``about`` (the run, the message number) is stored with each entry. A charge that
        names the same message (``sequence``, ``seq`` and ``charge``: :data:`UNSENT_KEYS`)
        as recorded ones with the same events is not made again: its message number came
        again although the site's message record has no reply for it (the sequence
        guard admits it as new), so the recorded charge's release was never handed out (a
        crash or an error after the charge) and covers the release made now."""
        with self._locked():
            head = self._head()
            past = self._ledger_of_runs(head["runs"])
            self.releases = sum(int(count) for _, count in head["runs"])
            if _charged_unsent(head, events, about):
                return past.spent()
            if run_plan is not None and self.epsilon is not None:  # once a run: all entries
                self._check_room(self._lines(), list(run_plan), about.get("sequence"))
            after = past.check(events)
            at = datetime.now(UTC).isoformat(timespec="seconds")
            self._append([*self._budget_note(head, at),
                          *({"event": event_to_dict(ev), "at": at, **about} for ev in events)],
                         self._last, head)
            self.releases += len(events)
        return after

    def _check_room(self, entries: Sequence[dict[str, Any]], plan: list[Any],
                    sequence: Any) -> None:
        earlier = [event_from_dict(e["event"]) for e in entries[1:]
                   if "event" in e and (sequence is None or e.get("sequence") != sequence)]
        ledger = self._ledger(earlier)
        after = ledger.account([*earlier, *plan]).epsilon
        assert self.epsilon is not None
        if after > self.epsilon * (1.0 + REL_TOL):
            raise BudgetRefusal(
                f"privacy budget exceeded: {ledger.what} has spent ε = "
                f"{ledger.spent().epsilon:.6g} in earlier runs, and this run's plan "
                f"({len(plan)} release(s)) would bring it to ε = {after:.6g} (δ = "
                f"{self.delta:g}) > its budget ε = {self.epsilon:.6g}. Refusing the run "
                "before its first release.")

    def note_noiseless(self, what: str, **about: Any) -> None:
        """Record a noiseless answer computed from the private data (``what``; outside every
        guarantee, so no ε) before it is given. With ``plan_budget`` (a budget the site took
        from its plan, not one the operator set) a second one is refused: one run of the
        plan gets one, a new run of it none. A note for the same message of the same
        sequence (its answer never handed out, as for :meth:`charge`) is not made again."""
        with self._locked():
            head = self._head()
            noted = [{"sequence": s, "seq": q} for s, q in head["noiseless"]]
            if any(_same_message(e, about, ("sequence", "seq")) for e in noted):
                return  # noted, then never answered (a crash): the same answer
            if self.plan_budget and noted:
                raise BudgetRefusal(
                    f"refusing a second noiseless {what} for this site's dataset: its "
                    f"ledger {self.path} already records one, and this site's lifetime "
                    "budget is one run of its privacy-plan (set ledger-epsilon in the node "
                    "config to allow more runs).")
            at = datetime.now(UTC).isoformat(timespec="seconds")
            self._append([*self._budget_note(head, at), {"noiseless": what, "at": at, **about}],
                         self._last, head)

    def _budget_note(self, head: dict[str, Any], at: str) -> list[dict[str, Any]]:
        """The entry recording the operator's budget (``ledger-epsilon`` and the ledger's δ;
        None: none set) where it differs from the one last recorded (``head["budget"]``;
        a head sealed before 11-30 has none); else none. A budget taken from the site's
        plan is recorded by :meth:`fix_plan_budget` instead."""
        operator = None if self.plan_budget else self.epsilon
        recorded = head.get("budget")
        if recorded is None and operator is None:
            return []
        if recorded is not None and recorded == [operator, self.delta]:
            return []
        return [{"ledger_epsilon": operator, "delta": self.delta, "at": at}]

    def note_coordinator_plan(self, plan: dict[str, Any], **about: Any) -> None:
        """Record that this site follows the coordinator's ``plan`` (method, rounds, period,
        model, options) in the run ``about`` names, having no plan of its own: once per
        sequence (a second note for the same ``sequence`` is not made)."""
        with self._locked():
            entries = self._lines()
            if any("coordinator_plan" in e and _same_message(e, about, ("sequence",))
                   for e in entries[1:]):
                return
            at = datetime.now(UTC).isoformat(timespec="seconds")
            self._append([{"coordinator_plan": plan, "at": at, **about}], self._last)

    def fix_plan_budget(self, one_run: Callable[[], float | None]) -> float | None:
        """The dataset's lifetime budget taken from the site's plan: the one recorded, else
        ``one_run()`` (one run of the plan as this first run computes it; None: no plan to
        take it from), recorded now. A later run never changes it (its plan, or the public
        set the coordinator ships, may make one run of it cost more)."""
        with self._locked():
            head = self._head()
            if head["plan_budget"] is not None:
                return float(head["plan_budget"])
            epsilon = one_run()
            if epsilon is not None:
                at = datetime.now(UTC).isoformat(timespec="seconds")
                self._append([{"plan_budget": epsilon, "delta": self.delta, "at": at}],
                             self._last, head)
            return epsilon

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer at a time (two ClientApps of one site may run at once)."""
        with open(self.path, "rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def summary(self, entries: Sequence[dict[str, Any]] | None = None,
                spent: PrivacySpent | None = None) -> dict[str, Any]:
        """The dataset's releases, noiseless answers and (ε, δ) (of ``entries``, already
        read and checked: :meth:`_lines`; else read now; ``spent``: their spend at the
        ledger's δ, already accounted)."""
        entries = self._lines() if entries is None else entries
        events = _events(entries)
        spent = self._ledger(events).spent() if spent is None else spent
        return {"dataset": self.dataset, "releases": len(events),
                "noiseless_answers": _noiseless(entries),
                "lifetime_epsilon": self.epsilon, **spent.to_dict()}


#: what names one charge of one message of one sequence (see :meth:`SiteLedger.charge`)
UNSENT_KEYS = ("sequence", "seq", "charge")


def _charged_unsent(head: dict[str, Any], events: Sequence[Any],
                    about: dict[str, Any]) -> bool:
    """Whether the ledger already holds exactly ``events`` for the charge ``about`` names
    (``head["recent"]``: the charges of the last message charged in each sequence, the only
    one whose reply can be missing: the site's message record admits a number as new only
    after it stored the reply to the one before)."""
    if any(about.get(k) is None for k in UNSENT_KEYS):
        return False
    recent = head["recent"].get(str(about["sequence"]))
    if recent is None or recent["seq"] != about["seq"]:
        return False
    same = recent["charges"].get(json.dumps(about["charge"]), [])
    return bool(same) and same == [json.loads(json.dumps(event_to_dict(ev))) for ev in events]


def _fold(head: dict[str, Any], entries: Sequence[dict[str, Any]]) -> None:
    """Add ``entries`` (after the header) to a head's summary (see the module docstring)."""
    runs = head["runs"]
    for entry in entries:
        if "event" in entry:
            event = entry["event"]
            if runs and runs[-1][0] == event:
                runs[-1][1] += 1
            else:
                runs.append([event, 1])
            if all(entry.get(k) is not None for k in UNSENT_KEYS):
                key = str(entry["sequence"])
                recent = head["recent"].get(key)
                if recent is None or recent["seq"] != entry["seq"]:
                    recent = head["recent"][key] = {"seq": entry["seq"], "charges": {}}
                recent["charges"].setdefault(json.dumps(entry["charge"]), []).append(event)
        if "noiseless" in entry:
            head["noiseless"].append([entry.get("sequence"), entry.get("seq")])
        if "plan_budget" in entry and head["plan_budget"] is None:
            head["plan_budget"] = float(entry["plan_budget"])
        if "ledger_epsilon" in entry:
            head["budget"] = [entry["ledger_epsilon"], entry["delta"]]


def _chain(data: bytes, n: int, prev: str, ledger: SiteLedger
           ) -> tuple[list[dict[str, Any]], str, int]:
    """The entries of ``data`` (lines numbered from ``n``, chained from ``prev``), checked;
    their last tag and the bytes of their lines. A last line without its newline (cut short
    during its append) is dropped; any other bad line is refused."""
    complete = data.rfind(b"\n") + 1
    entries = []
    for i, line in enumerate(data[:complete].splitlines(), n):
        try:
            row = json.loads(line)
            entry, k, mac = row["entry"], row["n"], row["mac"]
        except (ValueError, KeyError, TypeError, RecursionError):  # [[[[...]]]]
            raise ledger._broken(i) from None
        if k != i or not isinstance(entry, dict) or not same_tag(
                mac, tag(ledger.key, str(k).encode(), prev.encode(), _canonical(entry))):
            raise ledger._broken(i)
        entries.append(entry)
        prev = mac
    return entries, prev, complete


def _same_message(entry: dict[str, Any], about: dict[str, Any], keys: Sequence[str]) -> bool:
    """Whether ``entry`` names the message ``about`` names (every one of ``keys`` given and
    equal)."""
    return all(about.get(k) is not None and entry.get(k) == about[k] for k in keys)


def _noiseless(entries: Sequence[dict[str, Any]]) -> int:
    return sum("noiseless" in e for e in entries[1:])


def _plan_budget(entries: Sequence[dict[str, Any]]) -> float | None:
    """The budget the site took from its plan, as the first run recorded it (None: none)."""
    return next((float(e["plan_budget"]) for e in entries[1:] if "plan_budget" in e), None)


def _budget(entries: Sequence[dict[str, Any]], delta: float,
            spent_at: Callable[[float], PrivacySpent] | None = None) -> dict[str, Any]:
    """The dataset's lifetime budget as the ledger records it, and what is left of it:
    the operator's ``ledger-epsilon`` as last recorded, else the one run of its plan the site
    took (``budget_from``: ``ledger-epsilon`` or ``privacy-plan``; None: none recorded, the
    site sets none, or a ledger-epsilon before 11-30, which was not recorded). ``left`` is the
    budget less the spend at the budget's own δ (``budget_delta``); the ledger's other
    figures are at ``delta``. ``spent_at(δ)``: the entries' spend at δ, accounted once for
    every figure that needs it (:func:`_accounted`); else accounted here."""
    operator = [e for e in entries[1:] if "ledger_epsilon" in e]
    plan = [e for e in entries[1:] if "plan_budget" in e]
    if operator and operator[-1]["ledger_epsilon"] is not None:
        budget, at, source = float(operator[-1]["ledger_epsilon"]), operator[-1], \
            "ledger-epsilon"
    elif plan:
        budget, at, source = float(plan[0]["plan_budget"]), plan[0], "privacy-plan"
    else:
        return {"budget": None, "budget_from": None, "budget_delta": None, "left": None}
    at_delta = float(at.get("delta", delta))
    left = budget - (spent_at or _accounted(_events(entries)))(at_delta).epsilon
    if abs(left) <= budget * REL_TOL:  # spent to the budget (as a charge compares them)
        left = 0.0
    return {"budget": budget, "budget_from": source, "budget_delta": at_delta, "left": left}


def _accounted(events: list[Any]) -> Callable[[float], PrivacySpent]:
    """The spend of ``events`` at a δ, each δ accounted once (a ledger's summary and its
    budget's remainder share it where their δ is one)."""
    done: dict[float, PrivacySpent] = {}

    def spent_at(delta: float) -> PrivacySpent:
        if delta not in done:
            done[delta] = Ledger(delta, None, events).spent()
        return done[delta]

    return spent_at


def _events(entries: Sequence[dict[str, Any]]) -> list[Any]:
    """The release events of a ledger's entries (entry 0 is the header; noiseless answers
    carry no event)."""
    return [event_from_dict(e["event"]) for e in entries[1:] if "event" in e]


def read_ledgers(folder: str | Path, key: bytes, delta: float) -> list[dict[str, Any]]:
    """Every dataset ledger under a site's ledger ``folder``, checked under ``key`` and
    accounted at ``delta``: its :meth:`SiteLedger.summary`, the budget recorded from the site's
    plan, the lifetime budget and what is left of it (:func:`_budget`), the runs in which it
    followed the coordinator's plan (having none of its own) and those plans, and the time
    of its last entry; a ledger that fails its check gives ``{"dataset": ..., "error":
    ...}`` instead. Nothing is written."""
    out: list[dict[str, Any]] = []
    for path in sorted(Path(folder).glob(f"*/{FILE}")):
        ledger = SiteLedger(path, key, path.parent.name, None, delta)
        try:
            entries = ledger._lines()  # read and checked once
        except FedLabelsError as exc:
            out.append({"dataset": path.parent.name, "path": str(path), "error": str(exc)})
            continue
        spent_at = _accounted(_events(entries))  # the events decoded and accounted once
        row = ledger.summary(entries, spent_at(delta))
        row.pop("lifetime_epsilon")
        # runs: the sequences that released (older entries, without one: their Flower run)
        runs = {e.get("sequence") or f"flower run {e.get('flower_run')}" for e in entries[1:]
                if "event" in e or "noiseless" in e}
        trusted = [e for e in entries[1:] if "coordinator_plan" in e]
        out.append({**row, "runs": len(runs), "path": str(path),
                    "plan_budget": _plan_budget(entries),
                    **_budget(entries, delta, spent_at),
                    # runs in which the site followed the coordinator's plan, having none
                    "coordinator_runs": len({e.get("sequence") for e in trusted}),
                    "coordinator_plans": [{"at": e.get("at"), "plan": e["coordinator_plan"]}
                                          for e in trusted],
                    "last_entry": entries[-1].get("at") if len(entries) > 1 else None})
    return out
