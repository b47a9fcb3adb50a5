"""A checkpoint's append-only part: what grows with the rounds, written once.

A run's round records, byte counts and privacy ledgers are JSON lists that only grow. In
one checkpoint file they were rewritten whole every round (a DP run checkpoints every
round: 47 MB and 0.3 s of CPU a round at 20,000 rounds of 5 clients). With a journal,
``X.checkpoint.npz`` keeps the rest and ``X.checkpoint.journal`` beside it, 0600, gets
only what each checkpoint added:

* a record is a 4-byte big-endian length ``n``, ``n`` bytes of JSON ``{name: [keep,
  text]}`` (the entry ``name`` is its text as of the previous record cut to ``keep``
  characters, then ``text``: a list's closing bracket off, the new elements and the bracket
  on), and a 32-byte tag, HMAC-SHA256 under the checkpoint key of the previous record's tag
  (32 zero bytes before the first) and the payload: the last tag authenticates the whole
  journal up to it;
* the state file says which length and last tag of the journal it goes with (its
  ``journal`` entry, under its own HMAC), and which of its entries come from the journal.

A writer hands a list over as a :class:`~fedlabels.core.json_list.JSONList` (its elements'
texts, not joined) where it can: the record then takes the elements added since the last
append without the whole text being built or compared, and is the record the texts give.

A checkpoint appends its record (fsynced) and then replaces the state file. A crash during
the append, between the two or during the state file's write leaves the previous state
file, which names a shorter journal: a reader takes that many bytes only (a torn or extra
tail is never read), and a resumed run (:meth:`Journal.drop_tail`) or the next append cuts
the tail off. A journal changed or
swapped after it was written fails its tags, and is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.json_list import JSONList, text_of
from fedlabels.core.private_files import private_dir

#: a string entry at least this long and holding a JSON list goes to the journal
MIN_CHARS = 256
_START = bytes(32)
_LENGTH = struct.Struct(">I")


def journal_path(state: Path) -> Path:
    """``x.checkpoint.npz`` -> ``x.checkpoint.journal``."""
    name = state.name[:-4] if state.name.endswith(".npz") else state.name
    return state.with_name(f"{name}.journal")


def journaled(value: object) -> bool:
    """Whether a state entry's value goes to the journal: a long JSON list's text (or
    :class:`~fedlabels.core.json_list.JSONList`)."""
    if isinstance(value, JSONList):
        return len(value) >= MIN_CHARS
    return isinstance(value, str) and len(value) >= MIN_CHARS and value.startswith("[")


def _tag(key: bytes, previous: bytes, payload: bytes) -> bytes:
    return hmac.new(key, b"fedlabels journal" + previous + payload, hashlib.sha256).digest()


@dataclass
class Journal:
    """The journal of one checkpoint file, as far as its writer has appended: its length,
    last tag and the text of every entry it holds (as a reader rebuilds them)."""

    path: Path
    key: bytes
    length: int = 0
    head: bytes = _START
    #: (a writer's: as given, a :class:`~fedlabels.core.json_list.JSONList` or text)
    texts: dict[str, str | JSONList] = field(default_factory=dict)

    def append(self, entries: Mapping[str, str | JSONList]) -> dict[str, Any]:
        """Append what ``entries`` add to the texts held; the state file's ``journal``
        entry (length, last tag, the entries' names). Raises with the journal as before.
        An entry given as a :class:`~fedlabels.core.json_list.JSONList` that extends the
        one appended before hands over its new elements only (:meth:`JSONList.extension`):
        neither text is joined or compared, so an append costs what it adds, not the
        history's length; the record is the one its texts would give."""
        changes: dict[str, list[Any]] = {}
        for name, value in entries.items():
            old = self.texts.get(name)
            if isinstance(value, JSONList) and isinstance(old, JSONList):
                added = value.extension(old)
                if added == "":
                    continue  # the same text
                if added is not None:
                    changes[name] = [len(old) - 1, added]
                    continue
            change = _change(text_of(old), text_of(value))
            if change is not None:
                changes[name] = change
        if changes:
            payload = json.dumps(changes, sort_keys=True).encode()
            head = _tag(self.key, self.head, payload)
            self._write(_LENGTH.pack(len(payload)) + payload + head)
            self.length += _LENGTH.size + len(payload) + len(head)
            self.head = head
        self.texts.update(entries)  # (equal texts: the newer view extends further)
        return {"length": self.length, "tag": self.head.hex(), "entries": sorted(entries)}

    def text(self, name: str) -> str:
        """The text of entry ``name`` as appended (KeyError: none)."""
        return str(text_of(self.texts[name]))

    def drop_tail(self) -> None:
        """Cut off what lies beyond :attr:`length` (a record torn by a crash, or one whose
        state file was never written): on resume, before the run goes on."""
        try:
            if self.path.stat().st_size > self.length:
                os.truncate(self.path, self.length)
        except FileNotFoundError:
            pass

    def _write(self, data: bytes) -> None:
        """``data`` at :attr:`length` (what lies beyond is a torn or unused tail, cut off),
        fsynced; on failure the file is cut back to :attr:`length`."""
        folder = private_dir(self.path.parent, tighten=False)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)
            if os.fstat(fd).st_size < self.length:  # cut or replaced under us: start anew
                self.length, self.head, self.texts = 0, _START, {}
                raise _Restart
            os.ftruncate(fd, self.length)
            try:
                view = memoryview(data)
                at = self.length
                while view:
                    written = os.pwrite(fd, view, at)
                    if written <= 0:
                        raise OSError(f"wrote {len(data) - len(view)} of {len(data)} bytes")
                    view, at = view[written:], at + written
                os.fsync(fd)
            except BaseException:
                os.ftruncate(fd, self.length)
                raise
        finally:
            os.close(fd)
        if created:
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def _change(old: str | None, text: str) -> list[Any] | None:
    """A record's ``[keep, text]`` taking ``old`` to ``text`` (``None``: equal): the list's
    new elements where ``text`` extends ``old`` (its closing bracket off), else all of it."""
    if old is not None and (old is text or old == text):
        return None
    keep = len(old) - 1 if old else 0
    if old is None or not text.startswith(old[:keep]):
        keep = 0  # not an extension: the whole text again
    return [keep, text[keep:]]


class _Restart(Exception):
    """The journal file is shorter than its writer appended: write it afresh."""


def append(journal: Journal, entries: Mapping[str, str | JSONList]) -> dict[str, Any]:
    """:meth:`Journal.append`, starting the journal afresh (every entry whole) where its
    file was cut or removed since the last append."""
    try:
        return journal.append(entries)
    except _Restart:
        return journal.append(entries)


def read_journal(path: Path, key: bytes, saved: Mapping[str, Any]) -> Journal:
    """The journal a state file's ``journal`` entry ``saved`` names, checked: its first
    ``length`` bytes (a tail beyond them is ignored), every tag under ``key``."""
    length, want = int(saved["length"]), bytes.fromhex(str(saved["tag"]))
    try:
        with open(path, "rb") as fh:
            data = fh.read(length)
    except FileNotFoundError:
        state = path.with_name(path.name.removesuffix(".journal") + ".npz")
        raise FedLabelsError(f"no journal {path} beside its checkpoint {state.name}: a "
                             "checkpoint is these two files (the journal keeps its "
                             "history); copy, move or restore both together, or start the "
                             "run afresh.") from None
    if len(data) < length:
        raise FedLabelsError(f"refusing journal {path}: it is shorter ({len(data)} bytes) "
                             f"than its checkpoint says ({length}); it was cut after it "
                             "was written.")
    pieces: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    head, at = _START, 0
    while at < length:
        (n,) = _LENGTH.unpack_from(data, at) if at + _LENGTH.size <= length else (-1,)
        end = at + _LENGTH.size + n
        if n < 0 or end + 32 > length:
            break  # the tag check below refuses it
        payload = data[at + _LENGTH.size:end]
        head = _tag(key, head, payload)
        if not hmac.compare_digest(head, data[end:end + 32]):
            break
        for name, (keep, text) in json.loads(payload).items():
            _cut(pieces.setdefault(name, []), sizes.get(name, 0), int(keep))
            pieces[name].append(text)
            sizes[name] = int(keep) + len(text)
        at = end + 32
    if at != length or not hmac.compare_digest(head, want):
        raise FedLabelsError(f"refusing journal {path}: it was changed after it was "
                             "written (its HMAC does not match its checkpoint's).")
    texts: dict[str, str | JSONList] = {name: "".join(parts) for name, parts in pieces.items()}
    return Journal(path, key, length, head, texts)


def _cut(parts: list[str], size: int, keep: int) -> None:
    """Cut the text ``parts`` join to (``size`` characters) to its first ``keep``: a list's
    bracket off, in place, without joining the whole text."""
    while parts and size - len(parts[-1]) >= keep:
        size -= len(parts.pop())
    if parts and size > keep:
        parts[-1] = parts[-1][:len(parts[-1]) - (size - keep)]


__all__ = ["MIN_CHARS", "Journal", "append", "journal_path", "journaled", "read_journal"]
