"""Record exactly what a method's server receives, without touching protocol or engine code.

:class:`RecordingMethod` wraps a :class:`~fedlabels.methods.Method`: its client roles answer
as before, and every ``protocol`` reply is stored as the server decodes it (encoded and
decoded with the wire codec, so the record is bit-for-bit what travels), together with the
message the server sent and the round it belongs to.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.data import ClientData
from fedlabels.method.base import ClientRole, Grid, Method, MethodContext, ServerRole, Settings
from fedlabels.method.options import MethodOptions


@dataclass(frozen=True)
class Exchange:
    """One protocol exchange: what the server sent to a client and what came back."""

    round: int  # 0-based communication round
    cid: int
    ordinal: int  # 1-based count of this client's protocol replies so far
    down: Message  # the request; large arrays dropped (query indices, update bases kept)
    up: Message
    prev_config: dict[str, Any] = field(default_factory=dict)  # this client's previous request


class Recorder:
    """The protocol exchanges of a run (rounds selected by ``keep``).

    By default only exchanges with a ``protocol`` reply are kept, with the request's query
    indices (and an update's start weights); with ``down=True`` (the curious-client threat
    model) every ``protocol`` request is kept whole, as the client decodes it. ``check``
    (optional) is called on every kept exchange as it is recorded, so that a reply the audit
    cannot read stops the run at once rather than after its last round.
    """

    def __init__(self, keep: Callable[[int], bool] | None = None, down: bool = False,
                 check: Callable[[Exchange], None] | None = None) -> None:
        self.keep = keep or (lambda rnd: True)
        self.down = down
        self.check = check
        self.round = -1
        self.exchanges: list[Exchange] = []
        self.protocol_replies: dict[int, int] = {}
        self.last_config: dict[int, dict[str, Any]] = {}

    def add(self, cid: int, down: Message, up: Message) -> None:
        replied = up.category == "protocol"
        prev = self.last_config.get(cid, {})
        if down.category == "protocol":
            self.last_config[cid] = dict(down.config)
        if not replied and not (self.down and down.category == "protocol"):
            return
        ordinal = self.protocol_replies.get(cid, 0) + int(replied)
        self.protocol_replies[cid] = ordinal
        if self.keep(self.round):
            if self.down:
                kept = decode_message(encode_message(down))
            else:  # keep the query indices, and the start weights an update is relative to
                wanted = {"queries"} | ({"weights"} if "update" in up.arrays else set())
                kept = Message(down.kind, arrays={k: v for k, v in down.arrays.items()
                                                  if k in wanted},
                               config=dict(down.config), category=down.category)
            ex = Exchange(self.round, cid, max(ordinal, 1), kept,
                          decode_message(encode_message(up)), prev)
            if self.check is not None:
                self.check(ex)
            self.exchanges.append(ex)

    def rounds(self) -> list[int]:
        return sorted({e.round for e in self.exchanges})

    def replies(self, cid: int, rnd: int) -> list[Exchange]:
        return [e for e in self.exchanges if e.cid == cid and e.round == rnd]


def _recorded(cid: int, handler: Callable[[Message], Message],
              recorder: Recorder) -> Callable[[Message], Message]:
    """``handler`` of client ``cid``, with each of its replies passed to ``recorder``."""

    def handle(message: Message) -> Message:
        reply = handler(message)
        recorder.add(cid, message, reply)
        return reply

    return handle


class _RoundTrackingServer(ServerRole):
    """A server role that tells the recorder which round is running; the rest is delegated."""

    def __init__(self, inner: ServerRole, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        self._recorder.round = rnd
        return self._inner.run_round(rnd, grid)

    def evaluation_message(self, cid: int) -> Message:
        return self._inner.evaluation_message(cid)

    @property
    def evaluation_after_round(self) -> bool:  # type: ignore[override]
        return self._inner.evaluation_after_round

    def result_extra(self) -> dict[str, Any]:
        return self._inner.result_extra()

    def final_arrays(self) -> dict[str, np.ndarray]:
        return self._inner.final_arrays()

    def __getattr__(self, name: str) -> Any:  # method-specific server attributes
        return getattr(self._inner, name)


class RecordingMethod(Method):
    """``inner``, with what its server receives recorded in ``self.recorder``.

    Every declaration (name, options, threat model, ...) and role is ``inner``'s: the client
    roles are ``inner``'s own, with each registered message handler wrapped to record its
    reply (roles register their handlers when built), and the server tells the recorder
    which round runs.
    """

    def __init__(self, inner: Method, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder
        self.clients: dict[int, ClientRole] = {}  # the real client roles (e.g. a PATE student)
        # Method's declarations are class variables, set per method class: take inner's
        for name in inspect.get_annotations(Method):
            setattr(self, name, getattr(inner, name))

    def parse_options(self, raw: Mapping[str, Any] | MethodOptions | None) -> MethodOptions:
        return self.inner.parse_options(raw)

    def validate(self, n_clients: int, settings: Settings, learners: list[Any]) -> None:
        self.inner.validate(n_clients, settings, learners)

    def check_clients(self, n_clients: int, settings: Settings) -> None:
        self.inner.check_clients(n_clients, settings)

    def check_models(self, learners: list[Any]) -> None:
        self.inner.check_models(learners)

    def checks_models(self) -> bool:
        return self.inner.checks_models()

    def client_datasets(self, clients: list[ClientData]) -> list[ClientData]:
        return self.inner.client_datasets(clients)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        server = self.inner.make_server(ctx, n_public, learners, client_sizes)
        return _RoundTrackingServer(server, self.recorder)

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        role = self.inner.make_client(cid, data, learner, ctx, X_public, X_test, y_test)
        self.clients[role.cid] = role
        for kind, handler in list(role.handlers.items()):
            role.handlers[kind] = _recorded(role.cid, handler, self.recorder)
        return role

    def __getattr__(self, name: str) -> Any:  # method-specific attributes
        return getattr(self.inner, name)
