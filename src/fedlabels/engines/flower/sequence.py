"""A site's own record of the messages it answered: no rewinds, no replays with fresh noise.

The server numbers the messages to each client (``seq`` 1, 2, ...), but the site does not
take the server's word for where the run stands: it keeps, per run (the run key of
:mod:`.snapshots`), the last number it accepted and the digests of the messages and replies
it answered, in a file sealed with its key (:mod:`fedlabels.core.private_files`: 0600 in a 0700
directory, HMAC-SHA256), and the replies themselves beside it (``<run>/reply_<seq>.bin``,
checked against their digests). A message

* numbered ``last + 1`` is new: the role handles it;
* numbered ``<= last`` with the same content (digest) as the one answered then is a re-send
  after a lost reply, or a resumed ServerApp re-sending a round: it gets the stored reply,
  never a new release (no fresh noise);
* numbered ``<= last`` with other content, or ``> last + 1``, or not a whole number >= 1,
  is refused before anything is computed or stored (no snapshot either).

Nor does it take the server's word for the round (which bounds a site's plan, see
:mod:`.site_plan`): a new message's round number may not go back, and a message kind is
answered once per round (:meth:`SequenceGuard.check_round`), except the kinds a protocol
sends several times within one round (``ClientRole.multi_step_kinds``). A server that numbers
every message round 0 therefore gets one round's answers, not a run's.

A new Flower run of the same deployment that is not a resume (``resume`` false) starts a new
sequence: the site then starts from a fresh role, and what it releases is still charged to
its lifetime ledger (:mod:`fedlabels.privacy.site_ledger`), which a new run cannot reset.
Replies are kept for the round in progress and the one before (what a ServerApp resumed from
its last checkpoint re-sends). Each sequence has a random name (``nonce``, new with every run
from scratch) that the site ledger's charges carry, so that a charge whose release was never
handed out (a crash after the charge) is not made again when its number comes again. A new
sequence's name is on disk before anything is charged under it: the first sequence's in its
record; a later one's beside the record of the run before (``pending``, with its Flower run),
which stays whole for a resume until the new sequence's first reply replaces it. The site's
privacy-plan for the run is pinned the same way (in the record, or ``pending``'s), at the
run's first message, answered or refused (:meth:`SequenceGuard.pinned`).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.errors import FedLabelsError, RefusedError
from fedlabels.core.private_files import check_private, same_tag, tag, write_private

FORMAT = "fedlabels message sequence 1"


def message_digest(message: Message, attached: Message | None, rnd: int) -> str:
    """What identifies a message's content (the message, its attached request, the round)."""
    h = hashlib.sha256(str(rnd).encode())
    for part in (message, attached):
        data = b"" if part is None else encode_message(part)
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def _pack(reply: Message, after: Message | None) -> bytes:
    first = encode_message(reply)
    return (len(first).to_bytes(8, "big") + first
            + (b"" if after is None else encode_message(after)))


def _unpack(data: bytes) -> tuple[Message, Message | None]:
    n = int.from_bytes(data[:8], "big")
    rest = data[8 + n:]
    return decode_message(data[8:8 + n]), (decode_message(rest) if rest else None)


@dataclass
class SequenceGuard:
    """The site's record of one run's message sequence (see the module docstring)."""

    path: Path
    key: bytes
    flower_run: int | None = None
    last: int = 0
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the latest round answered, and the message kinds answered in it
    round: int = -1
    kinds: list[str] = field(default_factory=list)
    #: the site's own count of the rounds of this run it answered (:meth:`rounds_with`)
    rounds_answered: int = 0
    #: this sequence's random name (new with every run from scratch, kept by a resume): the
    #: site ledger's charges name it, so a charge whose release was never handed out is
    #: recognised when its message number comes again (:meth:`SiteLedger.charge`)
    nonce: str = field(default_factory=lambda: secrets.token_hex(16))
    #: a new sequence not answered yet, kept beside the record of the run before it:
    #: ``{"flower_run": ..., "nonce": ...}`` (None: none)
    pending: dict[str, Any] | None = None
    #: the site's privacy-plan as read at the run's first message, answered or refused
    #: (None: not read yet, or no plan): the run keeps it, a changed file applies from the
    #: next run (:meth:`pinned`, :meth:`admit`)
    plan: dict[str, Any] | None = None

    @classmethod
    def load(cls, path: Path, key: bytes) -> SequenceGuard:
        guard = cls(path, key)
        if not path.exists():
            return guard
        check_private(path, "the site's message record")
        try:
            saved = json.loads(path.read_bytes())
            body = saved["body"]
            ok = same_tag(saved["mac"], guard._mac(body)) and body["format"] == FORMAT
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise FedLabelsError(f"the site's message record {path} failed its integrity "
                                 "check (HMAC under the site's key); refusing to answer.")
        guard.flower_run, guard.last = body["flower_run"], int(body["last"])
        guard.replies = dict(body["replies"])
        guard.round, guard.kinds = int(body.get("round", -1)), list(body.get("kinds", []))
        # older records: at least the rounds up to the latest (their numbers never go back)
        guard.rounds_answered = int(body.get("rounds_answered", guard.round + 1))
        guard.nonce = str(body.get("nonce") or guard.nonce)  # older records: a new name
        guard.pending = body.get("pending")
        guard.plan = body.get("plan")
        return guard

    def _mac(self, body: dict[str, Any]) -> str:
        return tag(self.key, FORMAT.encode(), json.dumps(body, sort_keys=True).encode())

    def save(self) -> None:
        body = {"format": FORMAT, "flower_run": self.flower_run, "last": self.last,
                "replies": self.replies, "round": self.round, "kinds": self.kinds,
                "rounds_answered": self.rounds_answered,
                "nonce": self.nonce, "pending": self.pending, "plan": self.plan}
        write_private(self.path, json.dumps({"body": body, "mac": self._mac(body)}).encode())

    def pinned(self, flower_run: int, resume: bool) -> dict[str, Any] | None:
        """The plan pinned for Flower run ``flower_run`` (a ``resume`` of this record's run
        keeps its plan): None where none is, and the site reads its file."""
        if flower_run == self.flower_run or resume:
            return self.plan
        if self.pending is not None and self.pending.get("flower_run") == flower_run:
            return self.pending.get("plan")
        return None

    def admit(self, flower_run: int, resume: bool, seq: Any, rnd: Any, digest: str,
              plan: dict[str, Any] | None = None) -> tuple[Message, Message | None] | None:
        """None: a new message to handle; a stored (reply, attached answer) to give again;
        or a refusal (:class:`FedLabelsError`). ``plan``: the site's plan for the run
        (:meth:`pinned`, else as read now), on disk with the run's sequence before the
        message is handled or refused, so a later message of the run keeps it."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 \
                or isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0:
            raise RefusedError("message refused: its sequence or round number is not a "
                                 "whole number >= 1 (>= 0 for rounds).")
        first = not self.path.exists()
        if flower_run != self.flower_run and not resume:  # a new run from scratch
            pending = self.pending if self.pending is not None \
                and self.pending.get("flower_run") == flower_run else None
            nonce = str(pending["nonce"]) if pending is not None else secrets.token_hex(16)
            if not first and (pending is None or pending.get("plan") != plan):
                # a later sequence's name and plan, on disk before anything is charged under
                # it, beside the record of the run before (whole for a resume until this
                # sequence's first reply): a crash before that reply keeps its name, so its
                # charge covers the release made when the message comes again
                self.pending = {"flower_run": flower_run, "nonce": nonce, "plan": plan}
                self.save()
            self.flower_run, self.last, self.replies = flower_run, 0, {}
            self.round, self.kinds, self.nonce, self.plan = -1, [], nonce, plan
            self.rounds_answered = 0
            # the first sequence's name and plan are on disk before anything is charged
            changed = first
        else:  # this record's run, or its resume: a plan read now (none pinned) is pinned
            pins = self.plan is None and plan is not None
            self.plan = plan if pins else self.plan
            changed = first or pins
        self.flower_run = flower_run
        if changed:
            self.save()
        if seq == self.last + 1:
            return None
        stored = self.replies.get(str(seq))
        if seq <= self.last and stored is not None and stored["digest"] == digest:
            data = self._reply_path(seq).read_bytes()
            if hashlib.sha256(data).hexdigest() != stored["reply"]:
                raise FedLabelsError(f"the site's stored reply {self._reply_path(seq)} failed "
                                     "its integrity check; refusing to answer.")
            return _unpack(data)
        what = ("out of order" if seq > self.last else
                "a rewind or a replay with other content")
        raise RefusedError(f"message refused: number {seq} is {what} (this site last "
                             f"answered number {self.last} of this run).")

    def report(self, seq: int) -> str | None:
        """The site ledger's report recorded with the reply to message ``seq`` (None: none)."""
        value = self.replies.get(str(seq), {}).get("report")
        return value if isinstance(value, str) else None

    def check_round(self, rnd: int, kind: str, multi_step: frozenset[str]) -> None:
        """Refuse a new message (of ``kind``, round ``rnd``) whose round goes back, or a
        second message of a kind already answered in this round (unless in
        ``multi_step``)."""
        if rnd < self.round:
            raise RefusedError(f"message refused: round {rnd} goes back (this site already "
                               f"answered round {self.round} of this run).")
        if rnd == self.round and kind in self.kinds and kind not in multi_step:
            raise RefusedError(f"message refused: a second {kind} in round {rnd} (this site "
                               "answers each message kind once per round).")

    def rounds_with(self, rnd: int) -> int:
        """The rounds of this run the site will have answered once it answers a message of
        round ``rnd``: its own count, one more where ``rnd`` is not the latest round's."""
        return self.rounds_answered + (rnd != self.round)

    def accept(self, seq: int, rnd: int, digest: str, reply: Message,
               after: Message | None, kind: str = "", report: str | None = None) -> None:
        """Record the reply to message ``seq`` (of round ``rnd`` and ``kind``) and save;
        ``report``: what the site's ledger said with it (given again with a re-send:
        :meth:`report`)."""
        data = _pack(reply, after)
        write_private(self._reply_path(seq), data)
        if rnd != self.round:
            self.round, self.kinds = rnd, []
            self.rounds_answered += 1
        if kind and kind not in self.kinds:
            self.kinds.append(kind)
        self.last, self.pending = seq, None  # the record is this sequence's now
        self.replies[str(seq)] = {"digest": digest, "round": rnd,
                                  "reply": hashlib.sha256(data).hexdigest(),
                                  **({"report": report} if report is not None else {})}
        old = [s for s, r in self.replies.items() if r["round"] < rnd - 1]
        self.replies = {s: r for s, r in self.replies.items() if s not in old}
        self.save()
        for s in old:
            self._reply_path(int(s)).unlink(missing_ok=True)

    def _reply_path(self, seq: int) -> Path:
        return self.path.with_suffix("") / f"reply_{seq}.bin"
