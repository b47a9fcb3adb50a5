"""The site's message record (``sequence.SequenceGuard``): only the next number is new; a
number answered before gets its stored reply only with the same content; replies are kept
for the round in progress and the one before; a resume keeps the sequence, a new run from
scratch starts it again; numbers below 1 (rounds below 0) are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlabels.comm import Message
from fedlabels.core.errors import RefusedError
from fedlabels.engines.flower.sequence import SequenceGuard, message_digest

KEY = b"k" * 32


def _answered(tmp_path: Path, rounds: list[int]) -> SequenceGuard:
    """A guard of run 7 that answered one message per entry of ``rounds`` (its round)."""
    guard = SequenceGuard.load(tmp_path / "runs" / "r.json", KEY)
    for seq, rnd in enumerate(rounds, 1):
        assert guard.admit(7, False, seq, rnd, f"d{seq}") is None
        guard.accept(seq, rnd, f"d{seq}", Message("x.reply", config={"seq": seq}), None,
                     f"k{seq}")
    return SequenceGuard.load(tmp_path / "runs" / "r.json", KEY)


def _given_again(guard: SequenceGuard, seq: int, rnd: int, resume: bool = False) -> int:
    again = guard.admit(7, resume, seq, rnd, f"d{seq}")
    assert again is not None and again[1] is None
    return int(again[0].config["seq"])


def test_only_the_next_number_is_new(tmp_path: Path) -> None:
    guard = _answered(tmp_path, [0, 0])
    for ahead in (4, 5):
        with pytest.raises(RefusedError, match=f"number {ahead} is out of order"):
            guard.admit(7, False, ahead, 1, "new")
    assert guard.admit(7, False, 3, 1, "new") is None


def test_a_resend_gets_its_reply_only_with_the_same_content(tmp_path: Path) -> None:
    guard = _answered(tmp_path, [0, 0])
    assert _given_again(guard, 2, 0) == 2
    with pytest.raises(RefusedError, match="number 2 is a rewind or a replay with other"):
        guard.admit(7, False, 2, 0, "other")


def test_replies_are_kept_for_this_round_and_the_one_before(tmp_path: Path) -> None:
    guard = _answered(tmp_path, [0, 1, 2])
    assert _given_again(guard, 2, 1) == 2 and _given_again(guard, 3, 2) == 3
    with pytest.raises(RefusedError, match="number 1 is a rewind"):
        guard.admit(7, False, 1, 0, "d1")
    assert not (tmp_path / "runs" / "r" / "reply_1.bin").exists()


def test_a_resume_keeps_the_sequence_a_new_run_starts_it_again(tmp_path: Path) -> None:
    guard = _answered(tmp_path, [0, 0])
    resumed = guard.admit(8, True, 2, 0, "d2")  # another Flower run, resuming this one
    assert resumed is not None and resumed[0].config["seq"] == 2
    fresh = SequenceGuard.load(tmp_path / "runs" / "r.json", KEY)
    assert fresh.admit(9, False, 1, 0, "other") is None  # from scratch: number 1 is new
    assert fresh.last == 0 and fresh.round == -1


@pytest.mark.parametrize("seq,rnd", [(0, 0), (-1, 0), (1, -1), (True, 0), (1, 0.0)])
def test_numbers_below_one_and_rounds_below_zero_are_refused(tmp_path: Path, seq: object,
                                                             rnd: object) -> None:
    guard = SequenceGuard.load(tmp_path / "r.json", KEY)
    with pytest.raises(RefusedError, match="not a whole number >= 1"):
        guard.admit(7, False, seq, rnd, "d")


def test_the_digest_covers_the_round_and_the_attached_request() -> None:
    msg = Message("fedct.train", config={"seq": 1})
    request = Message("evaluate", category="evaluation")
    digests = {message_digest(msg, None, 0), message_digest(msg, None, 1),
               message_digest(msg, request, 0)}
    assert len(digests) == 3
    assert message_digest(msg, None, 0) == message_digest(
        Message("fedct.train", config={"seq": 1}), None, 0)


def test_a_changed_record_or_stored_reply_is_refused(tmp_path: Path) -> None:
    """Both are checked under the site's key (the record) and its digest (the reply)."""
    import json

    from fedlabels.core.errors import FedLabelsError

    guard = _answered(tmp_path, [0, 0])
    reply = tmp_path / "runs" / "r" / "reply_2.bin"
    reply.write_bytes(reply.read_bytes().replace(b'"seq":2', b'"seq":3'))
    with pytest.raises(FedLabelsError, match=r"stored reply .* failed its integrity check"):
        guard.admit(7, False, 2, 0, "d2")
    record = tmp_path / "runs" / "r.json"
    saved = json.loads(record.read_text())
    saved["body"]["last"] = 0  # a rewind written into the record
    record.write_text(json.dumps(saved))
    with pytest.raises(FedLabelsError, match=r"message record .* failed its integrity check"):
        SequenceGuard.load(record, KEY)
