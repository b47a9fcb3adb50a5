"""Crash and resume: a checkpoint at the end of rounds, written atomically.

A run whose result is ``X.json`` keeps ``X.checkpoint.npz`` beside it, replaced at the end of
a round (a temporary file, then ``os.replace``: a crash mid-write leaves the previous one).
Flower's ServerApp writes it after every round. The simulator writes it in a background
thread while the next rounds train, from a copy of the round's state, and paces it
(:class:`Keeper`): a round's checkpoint is taken once the previous file is on disk and
20 times what the previous checkpoint cost has passed since it was taken (its copy in the
run's thread plus its write), so checkpoints take at most about 5 % of the run. Where a
round takes longer than that (the CPU, seconds a round) every round is checkpointed; where
rounds take a tenth of a second (a GPU) one in several is, and a crash (power, SIGKILL)
loses the rounds since the last one, a few seconds of work. The last round is always
checkpointed, and so is the round an ``on_round`` hook stops the run after; a Ctrl-C
during a round resumes from the last file written. It is one ``.npz`` (read with
``allow_pickle=False``, never a pickle) holding

* ``meta``: a JSON text (UTF-8 bytes) — format, the run's identity (method, seed, options, models,
  federation summary, ...) and configuration, the round records, the communication meter,
  the planned rounds, the position of a reproducible noise source, the resume history, and
  the scalar entries of every role's state;
* ``a0``, ``a1``, ...: the array entries of the roles' states, indexed from ``meta``.

A run's checkpoint (:class:`Keeper`, format 5) keeps what grows with the rounds (the
records, the meter's counts, the ledgers' events: long JSON lists) in its journal
``X.checkpoint.journal`` instead, appended a checkpoint at a time, so a checkpoint writes
about as much at round 20,000 as at round 10 (:mod:`fedlabels.runs.journal`: the journal
first, fsynced, then the state file, which names the journal's length and last tag; a
crash anywhere reads back the state and history of one round). A checkpoint in one file
(format 4: a Flower site's snapshots; format 2, before the journal) is still read, and a run
resumed from one goes on with a journal. Formats 2 and 3 (before 2026-11-30) are read and
verified by their rule, an HMAC over the arrays' bytes.

The file is written with mode 0600 (a directory it creates is 0700) and authenticated:
``mac`` is HMAC-SHA256 of ``meta`` and every array's name, dtype, shape and SHA-256 digest
of its bytes (and so of the journal's last tag, which authenticates the journal up to it)
under the user's checkpoint key
(:func:`checkpoint_key`: 32 bytes, made once, 0600, in ``$FEDLABELS_KEY_DIR`` or
``~/.config/fedlabels/``), and ``key_id`` names that key. ``resume`` refuses in one line a
checkpoint changed since it was written (say ``rounds_planned`` edited to get around a
budget) or one written under another key (another user's or machine's). A Flower site's
snapshots (:mod:`fedlabels.engines.flower.snapshots`) use the site's own key instead.

The roles' states are :meth:`ClientRole.state_dict` (an iterative learner's under
``learner.``) and :meth:`ServerRole.state_dict`. Secret randomness (noise Generators) is
stored only while a reproducible source is installed; otherwise a resumed run draws it
afresh from OS entropy, by design. Everything else is seeded, so a resumed run gives the
uninterrupted run's records bit for bit (and, with a reproducible source, its noise too).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.array_table import ArrayTable, array_digest, raw_bytes
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import writing
from fedlabels.core.json_list import JSONList, json_list_view, text_of
from fedlabels.core.private_files import private_key, same_tag, tag, write_private_with
from fedlabels.core.provenance import version
from fedlabels.core.randomness import current_source, is_reproducible
from fedlabels.core.user_frames import carry_caller
from fedlabels.method.base import ClientRole, ServerRole
from fedlabels.method.state import State, own_copies
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.journal import Journal, append, journal_path, journaled, read_journal
from fedlabels.runs.loop import CommMeter, RoundHook, RunPlan, model_names

FORMAT = "fedlabels checkpoint 4"  # 4: one file, the MAC over the arrays' digests
JOURNALED = "fedlabels checkpoint 5"  # 5: and a journal (:mod:`fedlabels.runs.journal`)
#: the formats before, read and verified by their rule (the MAC over the arrays' bytes)
FORMAT_2 = "fedlabels checkpoint 2"  # 2: authenticated (mac, key_id)
JOURNALED_3 = "fedlabels checkpoint 3"  # 3: with a journal
BYTES_MAC = (FORMAT_2, JOURNALED_3)
WITH_JOURNAL = (JOURNALED, JOURNALED_3)
SUFFIX = ".checkpoint.npz"


def checkpoint_path(result: str | Path) -> Path:
    """The checkpoint beside a result: ``x.json`` -> ``x.checkpoint.npz`` (a checkpoint
    path itself is returned as it is)."""
    path = Path(result)
    if path.name.endswith(SUFFIX):
        return path
    return path.with_name(f"{path.stem}{SUFFIX}")


def result_beside(checkpoint: Path) -> Path:
    """The result a checkpoint belongs to: ``x.checkpoint.npz`` -> ``x.json``."""
    return checkpoint.with_name(checkpoint.name[:-len(SUFFIX)] + ".json")


def remove_checkpoint(path: Path) -> None:
    """Remove a checkpoint: its state file, then its journal."""
    path.unlink(missing_ok=True)
    journal_path(path).unlink(missing_ok=True)


@dataclass
class Checkpoint:
    """What a checkpoint holds (see the module docstring)."""

    meta: dict[str, Any]
    server: State
    clients: dict[int, State]
    #: its journal as read (to append to), ``None`` for a checkpoint in one file
    journal: Journal | None = None

    @property
    def records(self) -> list[RoundRecord]:
        return [RoundRecord(**r) for r in self.meta["records"]]

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.meta["config"])

    @property
    def rounds_planned(self) -> int:
        return int(self.meta["rounds_planned"])


def run_identity(plan: RunPlan, *, seed: int, eval_every: int, federation: dict[str, Any],
                 **settings: Any) -> dict[str, Any]:
    """What a resumed run must share with the checkpointed one (JSON-normalised):
    ``settings`` are the engine's other settings (reproducible noise, participation, ...)."""
    identity = {"fedlabels": version(), "method": plan.method.name, "seed": seed,
                "period": plan.settings.period, "eval_every": eval_every,
                "options": plan.settings.options.to_dict(),
                "models": model_names(plan.specs), "client_seeds": plan.client_seeds,
                "federation": federation, **settings}
    return dict(json.loads(json.dumps(identity, sort_keys=True, default=str)))


def refuse_another_run(ckpt: Checkpoint, identity: Mapping[str, Any]) -> None:
    """A one-line error naming what differs where ``ckpt`` is not of the run ``identity``
    (:func:`run_identity`) describes."""
    saved = ckpt.meta["identity"]
    differ = sorted(k for k in {*saved, *identity} if saved.get(k) != identity.get(k))
    if differ and set(differ) <= {"federation", "data"}:  # the settings are the checkpoint's
        raise FedLabelsError("the data changed since the checkpointed run (the federation "
                             "it builds differs, with the same settings): a run resumes on "
                             "the data it started with; restore that data, or start a new "
                             "run.")
    if differ:
        raise FedLabelsError(f"the checkpoint is of another run: it differs in "
                             f"{', '.join(differ)}; resume with the checkpointed run's "
                             "settings (only the number of rounds may grow).")


def refuse_finished(checkpoint: Path, saved: Checkpoint, rounds: int | None) -> None:
    """A finished run (its result written, not interrupted, every checkpointed round in it)
    is not resumed unless ``rounds`` extends it: its files, wall_seconds included, stay."""
    result = result_beside(checkpoint)
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError):
        return  # no complete result yet: resuming writes it
    done = len(saved.records)
    if not isinstance(data, dict) or data.get("interrupted") \
            or len(data.get("rounds") or []) != done \
            or (data.get("deployment") or {}).get("status", "completed") != "completed":
        return  # a deployment writes its result after every round, "running" until the end
    if rounds is None or rounds <= int(saved.config.get("rounds", done)):
        raise FedLabelsError(f"{result} is a finished run ({done} round(s) run); nothing to "
                             "resume, its files are unchanged. To extend it, give more "
                             "rounds (--rounds N; Python: rounds=N).")


# --------------------------------------------------------------------------- file format
def _split(states: Mapping[str, State], table: ArrayTable) -> dict[str, Any]:
    """Scalars stay in the JSON; arrays go to ``table`` and are referenced by name. An
    array equal in dtype, shape and bytes to one already there is stored once and named
    by every entry holding it (FedAvg's clients end a round on the same global weights:
    100 copies of them and their optimiser state were 364 MB); the reader builds a fresh
    array for every reference, so code reading the older layout reads this one too."""
    out: dict[str, Any] = {}
    for role, state in states.items():
        entries: dict[str, Any] = {}
        for key, value in state.items():
            if isinstance(value, np.ndarray):
                name = f"a{table.add(value)}"
                entries[key] = {"array": name}
            else:
                entries[key] = {"value": value}
        out[role] = entries
    return out


def _join(entries: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> State:
    """A role's state: a fresh array for every reference (two entries may name one)."""
    return {key: (np.array(arrays[e["array"]]) if "array" in e else e["value"])
            for key, e in entries.items()}


def checkpoint_key() -> bytes:
    """This user's checkpoint key (made on first use; see the module docstring)."""
    given = os.environ.get("FEDLABELS_KEY_DIR")
    base = Path(given) if given else Path(os.environ.get("XDG_CONFIG_HOME") or
                                           Path.home() / ".config") / "fedlabels"
    return private_key(base.expanduser() / "checkpoint.key", "checkpoint key")


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"fedlabels key id" + key).hexdigest()[:16]


def _mac(key: bytes, text: str, arrays: Mapping[str, np.ndarray],
         digests: Mapping[str, bytes] | None = None, fmt: str = FORMAT) -> str:
    """HMAC-SHA256 of ``fmt``, ``text`` and each array's name, dtype, shape and SHA-256 of
    its bytes (``digests``, those :class:`ArrayTable` computed; else computed here). As
    binding as the HMAC over the bytes themselves (the rule of formats 2 and 3, kept in
    :func:`_bytes_mac`): two arrays' bytes under one digest would be a SHA-256 collision.
    It saves the second pass over every array a checkpoint writes."""
    parts: list[bytes | memoryview] = [fmt.encode(), text.encode()]
    for name in sorted(arrays):
        array = arrays[name]
        digest = array_digest(array) if digests is None else digests[name]
        parts += [name.encode(), array.dtype.str.encode(), repr(array.shape).encode(),
                  digest]
    return tag(key, *parts)


def _bytes_mac(key: bytes, text: str, arrays: Mapping[str, np.ndarray], fmt: str) -> str:
    """The MAC of formats 2 and 3: HMAC-SHA256 over the arrays' bytes."""
    parts: list[bytes | memoryview] = [fmt.encode(), text.encode()]
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        parts += [name.encode(), array.dtype.str.encode(), repr(array.shape).encode(),
                  raw_bytes(array)]
    return tag(key, *parts)


def _record_json(record: RoundRecord) -> str:
    """One round record as a checkpoint's ``records`` list holds it."""
    return json.dumps(asdict(record), sort_keys=True)


@dataclass(frozen=True)
class EncodedJSON:
    """A ``meta`` value already encoded as JSON text, written into the checkpoint as it is
    (the round records and the byte counts, encoded once each rather than again at every
    checkpoint). ``last``: written after every other entry (where the records have always
    been), else in its key's sorted place (as ``json.dumps(..., sort_keys=True)`` puts it)."""

    text: str | JSONList
    last: bool = True


def _meta_json(meta: Mapping[str, Any]) -> str:
    """``json.dumps(meta, sort_keys=True)`` with each :class:`EncodedJSON` value's text as
    it is: in its key's place, or (``last``) after the other entries."""
    def last(value: Any) -> bool:
        return isinstance(value, EncodedJSON) and value.last

    entries = sorted(meta.items(), key=lambda kv: kv[0])
    pieces: list[str] = []  # joined once: the long texts (records, byte counts) copied once
    for key, value in [*((k, v) for k, v in entries if not last(v)),
                       *((k, v) for k, v in entries if last(v))]:
        pieces += [", " if pieces else "{", json.dumps(key), ": ",
                   text_of(value.text) if isinstance(value, EncodedJSON)
                   else json.dumps(value, sort_keys=True)]
    return "".join([*pieces, "}"]) if pieces else "{}"


def write_checkpoint(path: str | Path, meta: dict[str, Any], server: State,
                     clients: Mapping[int, State], key: bytes | None = None,
                     journal: Journal | None = None) -> Path:
    """Write a checkpoint atomically (on any failure the previous file stays as it was),
    0600, authenticated under ``key`` (default: ``journal``'s, else :func:`checkpoint_key`).
    A ``meta`` value may be :class:`EncodedJSON`, a state's value a
    :class:`~fedlabels.core.json_list.JSONList`. With ``journal`` (of this path, under the
    same key), the long JSON lists (the :class:`EncodedJSON` values and a role's long
    list-valued strings and JSONLists) go to it, appended first, what they added only."""
    path = Path(path)
    key = (journal.key if journal is not None else checkpoint_key()) if key is None else key
    table = ArrayTable()
    states = _split({"server": server, **{f"client.{c}": s for c, s in clients.items()}},
                    table)
    arrays = table.arrays
    fmt = FORMAT
    if journal is not None:
        meta, fmt = _journaled(journal, meta, states), JOURNALED
    for held in states.values():  # a short list stays in the state file, as text
        for e in held.values():
            if isinstance(e.get("value"), JSONList):
                e["value"] = e["value"].text
    text = _meta_json({**meta, "format": fmt, "states": states})
    # UTF-8 bytes: a numpy string takes 4 bytes a character, and the records make the text
    # grow with the rounds (3,000 rounds of FedCT: 13.7 MB instead of 3.4 MB)
    entries: dict[str, Any] = {"meta": np.frombuffer(text.encode(), dtype=np.uint8),
                               "mac": np.array(_mac(key, text, arrays, table.digests, fmt)),
                               "key_id": np.array(_key_id(key)), **arrays}
    # streamed into the temporary file: tens of MB are not assembled in memory first
    write_private_with(path, lambda fh: np.savez(fh, **entries), tighten=False)
    return path


def _journaled(journal: Journal, meta: dict[str, Any],
                states: dict[str, Any]) -> dict[str, Any]:
    """Append the long lists of ``meta`` and ``states`` (taken out of ``states``) to
    ``journal``; the state file's ``meta``, naming the journal's part in ``journal``."""
    entries = {f"meta/{k}": v.text for k, v in meta.items() if isinstance(v, EncodedJSON)}
    for role, held in states.items():
        for k, e in list(held.items()):
            if journaled(e.get("value")):
                entries[f"{role}/{k}"] = held.pop(k)["value"]
    kept = {k: v for k, v in meta.items() if f"meta/{k}" not in entries}
    return {**kept, "journal": append(journal, entries)}


def _from_journal(journal: Journal, meta: dict[str, Any]) -> None:
    """Put the entries ``meta`` says are in ``journal`` back where they were written from."""
    states = meta["states"]
    for name in meta.pop("journal")["entries"]:
        role, key = name.split("/", 1)
        text = journal.text(name)
        if role == "meta":
            meta[key] = json.loads(text)
        else:
            states.setdefault(role, {})[key] = {"value": text}


def load_checkpoint(path: str | Path, key: bytes | None = None) -> Checkpoint:
    """Read a checkpoint (``X.checkpoint.npz``, or the result ``X.json`` it belongs to),
    after checking it was written under ``key`` (default: :func:`checkpoint_key`) and not
    changed since."""
    path = checkpoint_path(path)
    # the user's key: say how to resume elsewhere (a site's snapshots have the site's own)
    elsewhere = "" if key is not None else (
        "; resume it as the user and on the machine that wrote it, or with "
        "FEDLABELS_KEY_DIR naming a directory that holds a copy of that user's "
        f"checkpoint.key (and, beside each other, {path.name} and {journal_path(path).name})")
    key = checkpoint_key() if key is None else key
    from fedlabels.core.npz_size import check_inflated_size

    check_inflated_size(path, "checkpoint")  # before its HMAC: that reads every array
    try:
        with np.load(path, allow_pickle=False) as npz:
            raw = npz["meta"]  # UTF-8 bytes; a numpy string in files written before
            text = raw.tobytes().decode() if raw.dtype == np.uint8 else str(raw)
            meta = json.loads(text)
            fmt = meta.get("format")
            if fmt not in (FORMAT, JOURNALED, *BYTES_MAC):
                raise FedLabelsError(f"{path} is not a {JOURNALED} (format "
                                     f"{fmt!r}); start the run afresh.")
            arrays = {n: npz[n] for n in npz.files if n not in ("meta", "mac", "key_id")}
            if str(npz["key_id"]) != _key_id(key):
                raise FedLabelsError(f"refusing checkpoint {path}: it was written under "
                                     f"another key (another user's or machine's run)"
                                     f"{elsewhere}.")
            mac = _bytes_mac(key, text, arrays, fmt) if fmt in BYTES_MAC \
                else _mac(key, text, arrays, fmt=fmt)
            if not same_tag(str(npz["mac"]), mac):
                raise FedLabelsError(f"refusing checkpoint {path}: it was changed after it "
                                     "was written (its HMAC does not match).")
            journal = None
            if fmt in WITH_JOURNAL:
                journal = read_journal(journal_path(path), key, meta["journal"])
                _from_journal(journal, meta)
            states = meta.pop("states")
            server = _join(states.pop("server"), arrays)
            clients = {int(k.split(".", 1)[1]): _join(v, arrays) for k, v in states.items()}
    except FileNotFoundError:
        raise FedLabelsError(f"no checkpoint {path}: a run writes one beside its result as "
                             "it goes (none with --no-checkpoint); nothing to resume.") from None
    except FedLabelsError:  # a refusal above says it in full
        raise
    except (OSError, ValueError, KeyError) as exc:
        reason = str(exc).rstrip(".")
        raise FedLabelsError(f"cannot read checkpoint {path}: {reason}.") from None
    return Checkpoint(meta, server, clients, journal)


# --------------------------------------------------------------------------- a run's keeper
#: the share of a simulator run's time its checkpoints may take (:class:`Keeper`)
CHECKPOINT_SHARE = 0.05


@dataclass
class CheckpointPace:
    """A run's checkpoints so far: when the last was taken and what it cost."""

    taken_at: float | None = None
    #: the last checkpoint's copy in the run's thread plus, once done, its write (seconds)
    cost: float = 0.0
    #: the rounds the last checkpoint taken holds
    rounds: int = 0
    written: int = 0
    skipped: int = 0
    #: the run's own time spent on checkpoints: copies and waits
    run_seconds: float = 0.0

    def wrote(self, rounds: int) -> None:
        """A checkpoint holding ``rounds`` rounds was taken."""
        self.rounds = rounds
        self.written += 1

    def taken(self, at: float, copy_seconds: float, rounds: int) -> None:
        """A paced checkpoint was taken at ``at``, its copy costing ``copy_seconds``."""
        self.taken_at, self.cost = at, copy_seconds
        self.run_seconds += copy_seconds
        self.wrote(rounds)

    def record(self) -> dict[str, Any]:
        """For the result's ``provenance``: every session's counts (see :meth:`carried`) and
        the rounds the last checkpoint holds (where a resume would continue)."""
        return {"written": self.written, "rounds_not_checkpointed": self.skipped,
                "seconds_in_run": round(self.run_seconds, 4), "last_round": self.rounds}

    def saved(self) -> dict[str, Any]:
        """What a checkpoint keeps of the counts, as of its own snapshot (itself not yet
        counted)."""
        return {"written": self.written, "skipped": self.skipped,
                "run_seconds": self.run_seconds}

    def carried(self, saved: Mapping[str, Any] | None, rounds: int) -> None:
        """Continue the counts of the session a checkpoint holding ``rounds`` rounds was
        written in: its own file among them (the rounds after it are run again)."""
        if saved is not None:
            self.written = int(saved["written"]) + 1
            self.skipped = int(saved["skipped"])
            self.run_seconds = float(saved["run_seconds"])
        self.rounds = rounds


@dataclass
class Keeper:
    """Checkpoints a run at the end of its rounds, and restores one into fresh roles.

    Without ``background`` (Flower's ServerApp) after every round, in the run's thread.
    With it (the simulator) paced, in a background thread: after a round the checkpoint is
    taken when no write is under way and ``1 / share`` times the last checkpoint's cost
    (its copy in the run's thread plus its write) has passed since the last was taken, and
    always after the last round (:meth:`finish`) and after the round an ``on_round`` hook
    stops the run at.
    """

    path: Path | None
    identity: dict[str, Any]
    config: dict[str, Any]
    rounds_planned: int
    server: ServerRole
    clients: Mapping[int, ClientRole]
    meter: CommMeter
    started: float = field(default_factory=time.perf_counter)
    previous_seconds: float = 0.0
    resumed: list[dict[str, Any]] = field(default_factory=list)
    records: list[RoundRecord] = field(default_factory=list)
    #: an engine's own bookkeeping (JSON), saved and restored with the rest (Flower: lost
    #: clients, message counts); its ``clients`` may be empty (the states stay at the sites)
    engine: dict[str, Any] = field(default_factory=dict)
    #: the clients' states from where they live (roles held by worker processes), used in
    #: place of the ``clients`` roles' own: arrays of their own (received, not live), so
    #: neither loaded into the roles nor copied for a background write; it returns ``None``
    #: while the roles themselves hold the states
    client_states: Callable[[], Mapping[int, State] | None] | None = None
    #: paced checkpoints written in a background thread (the simulator): a round's state is
    #: copied at its end and the next rounds train while the file is written
    background: bool = False
    #: with ``background``: the share of the run's time checkpoints may take (see above)
    share: float = CHECKPOINT_SHARE
    #: where the run started (a dataset's relative path is relative to it): kept on resume
    directory: str = field(default_factory=os.getcwd)
    #: the clock the pacing reads (tests give their own)
    clock: Callable[[], float] = time.perf_counter
    _writer: threading.Thread | None = field(default=None, init=False, repr=False)
    _failure: BaseException | None = field(default=None, init=False, repr=False)
    _pace: CheckpointPace = field(default_factory=CheckpointPace, init=False, repr=False)
    #: the records encoded so far and their JSON, in order (:meth:`_records_json`)
    _encoded: list[Any] = field(default_factory=list, init=False,
                                                     repr=False)
    #: the checkpoint's journal as far as written (made at the first write, or restored)
    _journal: Journal | None = field(default=None, init=False, repr=False)

    def fresh(self) -> list[RoundRecord]:
        """A new run (no records yet): a checkpoint left at the path by an earlier run is
        removed now, so a crash before round 1 cannot leave it to be resumed as this run's."""
        if self.path is not None:
            remove_checkpoint(self.path)
        return []

    def restore(self, ckpt: Checkpoint, rounds: int) -> list[RoundRecord]:
        """Load ``ckpt`` into the roles and meter; the completed records, to continue."""
        self.check(ckpt, rounds)
        self.server.load_state_dict(ckpt.server)
        for cid, role in self.clients.items():
            role.load_state_dict(ckpt.clients[cid])
        for rnd, cid, direction, category, n in ckpt.meta["meter"]:
            self.meter.add(rnd, cid, direction, category, n)
        sent = ckpt.meta.get("meter_sent")  # None: an older checkpoint, what was sent unknown
        self.meter.sent = None if sent is None else {(k, source, key) for k, source, key in sent}
        if ckpt.meta["noise_source"] is not None:
            position = int(ckpt.meta["noise_source"]["position"])
            current_source().setstate(position)  # type: ignore[union-attr]
        self.previous_seconds = float(ckpt.meta["wall_seconds"])
        self.engine = dict(ckpt.meta.get("engine", {}))
        self.directory = str(ckpt.meta.get("directory", self.directory))
        self.records = ckpt.records
        self._journal = ckpt.journal  # None (a checkpoint in one file): started afresh
        if self._journal is not None:
            self._journal.drop_tail()
        self._pace.carried(ckpt.meta.get("checkpoints"), len(self.records))  # on disk
        self.resumed = [*ckpt.meta["resumed"],
                        {"from_round": len(self.records),
                         "rounds_planned_before": ckpt.rounds_planned,
                         "rounds_planned": rounds,
                         "at_utc": datetime.now(UTC).isoformat(timespec="seconds")}]
        return list(self.records)

    def check(self, ckpt: Checkpoint, rounds: int) -> None:
        """Refuse a checkpoint of another run, or a change the run cannot take."""
        refuse_another_run(ckpt, self.identity)
        was = "reproducible" if ckpt.meta["noise_source"] is not None else "secret"
        if (was == "reproducible") != is_reproducible():
            raise FedLabelsError(f"the checkpointed run drew its noise from a {was} source "
                                 "and this one would not; resume it the same way "
                                 "(--insecure-reproducible-noise, or neither).")
        if was == "reproducible" and ckpt.meta["noise_source"]["key"] != _source_key():
            raise FedLabelsError("the checkpointed run's reproducible noise came from another "
                                 "seed; resume it under the same reproducible seed.")
        if sorted(ckpt.clients) != sorted(self.clients):
            raise FedLabelsError(f"the checkpoint holds clients {sorted(ckpt.clients)}, this "
                                 f"run has {sorted(self.clients)}.")
        if rounds < ckpt.rounds_planned:
            raise FedLabelsError(f"the checkpointed run planned {ckpt.rounds_planned} rounds "
                                 f"({len(ckpt.meta['records'])} completed); --rounds may only "
                                 f"extend it (give at least {ckpt.rounds_planned}).")

    def hook(self, on_round: RoundHook | None) -> Callable[[RoundRecord], None]:
        """``on_round`` after the checkpoint of the round just recorded is written (with
        ``background``: started, or put off by the pacing). Should ``on_round`` raise (a
        hook that stops the run), the round's checkpoint is written first if it was put
        off: the roles are still as the round left them."""
        def after_round(record: RoundRecord) -> None:
            self.records.append(record)
            if self.path is not None and self.background:
                self._paced()
            elif self.path is not None:
                started = self.clock()
                self.save()
                self._pace.run_seconds += self.clock() - started
            if on_round is not None:
                try:
                    on_round(record)
                except BaseException:
                    self.finish()
                    raise
        return after_round

    def _paced(self) -> None:
        """Start this round's checkpoint in the background if it is due (see the class)."""
        pace = self._pace
        if self._writer is not None and self._writer.is_alive():
            pace.skipped += 1  # the previous file is still being written
            return
        self.barrier()  # the finished write's failure, if any, raised here
        now = self.clock()
        if pace.taken_at is not None and now - pace.taken_at < pace.cost / self.share:
            pace.skipped += 1
            return
        snapshot = self._snapshot(copied=True)
        copied = self.clock()
        pace.taken(now, copied - now, len(self.records))
        self._writer = threading.Thread(target=carry_caller(self._write_in_background),
                                        args=(*snapshot, pace), name="fedlabels-checkpoint")
        self._writer.start()

    def finish(self) -> None:
        """Wait for a checkpoint being written, and write the last recorded round's if the
        pacing put it off; call it only while the roles are as that round left them (after
        the last round, or between rounds). Raises a write's failure here."""
        started = self.clock()
        self.barrier()
        if self.path is not None and self._pace.rounds < len(self.records):
            self._pace.skipped -= 1  # the round put off is checkpointed after all
            self.save()
        self._pace.run_seconds += self.clock() - started

    def barrier(self) -> None:
        """Wait for a checkpoint being written in the background; raise its failure (a full
        disk, say) here, in the run's thread."""
        self.settle()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def settle(self) -> None:
        """Wait for a checkpoint being written in the background, keeping any failure to
        itself (the run is failing already)."""
        if self._writer is not None:
            self._writer.join()  # a Ctrl-C here leaves it set: the next wait joins it again
        self._writer = None

    def _write_in_background(self, meta: dict[str, Any], server: State,
                             clients: dict[int, State], pace: CheckpointPace) -> None:
        started = self.clock()
        try:
            self._write(meta, server, clients)
        except BaseException as exc:  # raised by barrier() in the run's thread
            self._failure = exc
        pace.cost += self.clock() - started

    def save(self) -> None:
        """Write the checkpoint of the rounds recorded so far, now."""
        self._write(*self._snapshot(copied=False))
        self._pace.wrote(len(self.records))

    def _snapshot(self, copied: bool) -> tuple[dict[str, Any], State, dict[int, State]]:
        """Everything a checkpoint holds, as of now; ``copied``: arrays of its own, so the
        next round may change the roles while the file is written (a role's arrays copied,
        a learner's state, copied by its ``state_dict`` already, not copied again)."""
        assert self.path is not None
        received = None if self.client_states is None else self.client_states()
        secret = not is_reproducible()
        clients = {}
        for cid, role in self.clients.items():
            state = role.state_dict() if received is None else dict(received[cid])
            if secret:  # noise Generators: drawn afresh after a resume
                state.update(dict.fromkeys(type(role).secret_state))
            clients[cid] = own_copies(state) if copied and received is None else state
        source = current_source()
        meta = {"identity": self.identity, "config": self.config,
                "rounds_planned": self.rounds_planned,
                "records": EncodedJSON(self._records_json()),
                "meter": EncodedJSON(self.meter.entries_view(), last=False),
                "meter_sent": None if self.meter.sent is None else
                [list(k) for k in sorted(self.meter.sent)],
                "checkpoints": self._pace.saved(),
                "noise_source": None if secret else {
                    "position": source.getstate(),  # type: ignore[union-attr]
                    "key": _source_key()},
                "wall_seconds": self.previous_seconds + time.perf_counter() - self.started,
                "resumed": self.resumed, "engine": self.engine,
                "directory": self.directory}
        server = _server_state(self.server)
        if copied:
            meta, server = copy.deepcopy(meta), own_copies(server)
        return meta, server, clients

    def _records_json(self) -> JSONList:
        """:attr:`records` as a JSON list, each record encoded once: a DP run checkpoints
        every round, and encoding every record again each time cost O(T) a round
        (:func:`~fedlabels.core.json_list.json_list_view`: a record is not changed once
        checkpointed); the journal appends the new records' text only."""
        return json_list_view(self.records, _record_json, self._encoded)

    def _write(self, meta: dict[str, Any], server: State, clients: dict[int, State]) -> None:
        assert self.path is not None
        if self._journal is None:
            self._journal = Journal(journal_path(self.path), checkpoint_key())
        with writing(str(self.path)):  # a full disk: a one-line error, the last one kept
            write_checkpoint(self.path, meta, server, clients, journal=self._journal)

    def stamp(self, result: RunResult) -> RunResult:
        """Record the resume history and what the checkpoints cost in ``provenance``, and
        count every session's time."""
        result.wall_seconds += self.previous_seconds
        provenance = result.extra.setdefault("provenance", {})
        if self.resumed:
            provenance["resumed"] = list(self.resumed)
        if self.path is not None:
            provenance["checkpoints"] = self._pace.record()
        return result


def _server_state(server: ServerRole) -> dict[str, Any]:
    """``server``'s state as a checkpoint takes it: its lists of events as
    :class:`~fedlabels.core.json_list.JSONList` (:meth:`ServerRole.state_views`), where its
    class keeps the base's ``state_dict`` (one of its own is used as it is)."""
    if type(server).state_dict is ServerRole.state_dict:
        return server.state_views()
    return server.state_dict()


def _source_key() -> str:
    """A fingerprint of the installed reproducible source's key (not the key itself)."""
    import hashlib

    key = getattr(current_source(), "key", b"")
    return hashlib.sha256(b"fedlabels checkpoint " + key).hexdigest()[:16]


def check_extension(plan: RunPlan, learners: list[Any], ckpt: Checkpoint) -> None:
    """A run extended beyond its planned rounds must be one the method can extend."""
    if plan.settings.rounds <= ckpt.rounds_planned:
        return
    reason = plan.method.extension_refusal(plan.settings, learners)
    if reason is not None:
        raise FedLabelsError(f"cannot extend this {plan.method.name} run from "
                             f"{ckpt.rounds_planned} to {plan.settings.rounds} rounds: "
                             f"{reason}.")
