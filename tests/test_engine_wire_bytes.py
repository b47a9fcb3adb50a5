"""The simulator's grids count the bytes of the wire format, written out by hand here (not
by ``encode_message``), in both directions, and hand each side a copy as it came off the
wire: the one-process grid and the grid whose clients train together alike (worker
processes: ``tests/test_workers.py`` compares them with the one-process grid)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from fedlabels.comm import Message
from fedlabels.engines.inprocess import InProcessGrid
from fedlabels.engines.together import TogetherGrid
from fedlabels.runs.loop import CommMeter


def _wire_size(message: Message) -> int:
    """magic (4) + header length (4) + the JSON header + the arrays' bytes (codec.py)."""
    header: dict[str, Any] = {"k": message.kind,
                              "a": [[n, a.dtype.newbyteorder("<").str, list(a.shape)]
                                    for n, a in message.arrays.items()]}
    if message.config:
        header["c"] = message.config
    if message.category != "protocol":
        header["g"] = message.category
    head = json.dumps(header, separators=(",", ":")).encode()
    return 8 + len(head) + sum(a.nbytes for a in message.arrays.values())


class _Learner:
    pass


class _Client:
    """Keeps what it was sent and answers with a half of it (a view of its own array)."""

    def __init__(self) -> None:
        self.learner = _Learner()
        self.kept: np.ndarray | None = None

    def handle(self, msg: Message) -> Message:
        self.kept = msg.arrays["x"]
        if self.kept.flags.writeable:  # a careless client changes what it was sent
            self.kept += 1.0
        return Message("reply", arrays={"half": self.kept[::2]},
                       config={"n": int(self.kept.size)}, category=msg.category)


def _grid(kind: str, clients: dict[int, _Client]) -> Any:
    inner = InProcessGrid(clients, CommMeter())  # type: ignore[arg-type]
    return inner if kind == "one process" else TogetherGrid(inner)


@pytest.mark.parametrize("kind", ["one process", "together"])
def test_grids_count_the_wire_bytes_and_hand_over_wire_copies(kind: str) -> None:
    clients = {0: _Client(), 3: _Client()}
    grid = _grid(kind, clients)
    sent = {0: Message("k.train", arrays={"x": np.arange(7, dtype=np.float64)},
                       config={"round": 0, "lr": 0.5}),
            3: Message("evaluate", arrays={"x": np.zeros(3, dtype=np.float64)},
                       category="evaluation")}
    originals = {c: m.arrays["x"].copy() for c, m in sent.items()}
    replies = grid.exchange(sent, 4)
    counted = grid.meter.bytes
    for cid, msg in sent.items():
        assert counted[(4, cid, "down", msg.category)] == _wire_size(msg)
        assert counted[(4, cid, "up", msg.category)] == _wire_size(replies[cid])
        # the client got a copy: its in-place change stays on its side
        assert np.array_equal(msg.arrays["x"], originals[cid])
        # and the server a copy of the reply: changing it leaves the client's array alone
        kept = clients[cid].kept
        assert kept is not None
        before = kept.copy()
        half = replies[cid].arrays["half"]
        assert not np.shares_memory(half, kept)
        if half.flags.writeable:
            half += 100.0
        assert np.array_equal(kept, before)
    assert len(counted) == 4
