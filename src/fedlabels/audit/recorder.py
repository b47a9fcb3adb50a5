"""Record exactly what a method's server receives, without touching protocol or engine code.

:class:`RecordingMethod` wraps a :class:`~fedlabels.protocols.Method`: its client roles answer
as before, and every ``protocol`` reply is stored as the server decodes it (encoded and
decoded with the wire codec, so the record is bit-for-bit what travels), together with the
message the server sent and the round it belongs to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedlabels.comm import Message, decode_message, encode_message


@dataclass(frozen=True)
class Exchange:
    """One protocol exchange: what the server sent to a client and what came back."""

    round: int  # 0-based communication round
    cid: int
    ordinal: int  # 1-based count of this client's protocol replies so far
    down: Message  # the request; large arrays dropped (query indices, update bases kept)
    up: Message


class Recorder:
    """The protocol exchanges of a run (rounds selected by ``keep``)."""

    def __init__(self, keep: Callable[[int], bool] | None = None) -> None:
        self.keep = keep or (lambda rnd: True)
        self.round = -1
        self.exchanges: list[Exchange] = []
        self.protocol_replies: dict[int, int] = {}

    def add(self, cid: int, down: Message, up: Message) -> None:
        if up.category != "protocol":
            return
        ordinal = self.protocol_replies.get(cid, 0) + 1
        self.protocol_replies[cid] = ordinal
        if self.keep(self.round):
            # keep the query indices, and the start weights an update is relative to
            wanted = {"queries"} | ({"weights"} if "update" in up.arrays else set())
            small = Message(down.kind, arrays={k: v for k, v in down.arrays.items()
                                               if k in wanted},
                            config=dict(down.config), category=down.category)
            self.exchanges.append(Exchange(self.round, cid, ordinal, small,
                                           decode_message(encode_message(up))))

    def rounds(self) -> list[int]:
        return sorted({e.round for e in self.exchanges})

    def replies(self, cid: int, rnd: int) -> list[Exchange]:
        return [e for e in self.exchanges if e.cid == cid and e.round == rnd]


class _RecordingClient:
    """A client role whose protocol replies are recorded; everything else is delegated."""

    def __init__(self, inner: Any, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    def handle(self, message: Message) -> Message:
        reply = self._inner.handle(message)
        self._recorder.add(self._inner.cid, message, reply)
        return reply

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _RoundTrackingServer:
    """A server role that tells the recorder which round is running."""

    def __init__(self, inner: Any, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    def run_round(self, rnd: int, grid: Any) -> dict[str, float]:
        self._recorder.round = rnd
        return self._inner.run_round(rnd, grid)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingMethod:
    """A method whose server-bound messages are recorded in ``self.recorder``."""

    def __init__(self, inner: Any, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder
        self.name = inner.name
        self.description = inner.description
        self.requires_weights = inner.requires_weights
        self.clients: dict[int, Any] = {}  # the real client roles (e.g. a PATE student)

    def make_client(self, *args: Any, **kwargs: Any) -> Any:
        role = self.inner.make_client(*args, **kwargs)
        self.clients[role.cid] = role
        return _RecordingClient(role, self.recorder)

    def make_server(self, *args: Any, **kwargs: Any) -> Any:
        return _RoundTrackingServer(self.inner.make_server(*args, **kwargs), self.recorder)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
