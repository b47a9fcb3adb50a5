"""The simulator's grid with every reply checked by the server before it sees it.

A reply the server refuses (:meth:`~fedlabels.method.base.ServerRole.check_reply`: wrong
shape, labels outside the classes, NaN, another message kind) loses its client, as a
Flower deployment's :class:`~fedlabels.engines.flower.grid.FlowerGrid` loses the site: the
reply is dropped, the client gets no further messages, and ``on_lost`` decides whether the
run goes on (:func:`fedlabels.runs.lost.check_survivors`). Before, the simulator stopped
where a deployment went on, so one learner gave two outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.replies import MalformedReply, lost_reason


class CheckedGrid:
    """``inner`` (any grid) whose replies ``server.check_reply`` checks; a refused reply's
    client moves to :attr:`lost` (client -> round and reason) and out of
    :attr:`client_ids`, and ``on_lost(failed, rnd)`` is called with the newly lost ones."""

    def __init__(self, inner: Any, server: Any,
                 on_lost: Callable[[dict[int, str], int], None] | None = None) -> None:
        self.inner = inner
        self.server = server
        self.on_lost = on_lost
        self.lost: dict[int, dict[str, Any]] = {}

    @property
    def client_ids(self) -> list[int]:
        return [c for c in self.inner.client_ids if c not in self.lost]

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        gone = sorted(set(messages) & set(self.lost))
        if gone:  # as FlowerGrid: a server role sends only to grid.client_ids
            raise FedLabelsError(f"round {rnd + 1}: messages for lost clients {gone}.")
        replies = dict(self.inner.exchange(messages, rnd))
        failed: dict[int, str] = {}
        for cid in sorted(replies):
            try:
                self.server.check_reply(cid, messages[cid], replies[cid])
            except MalformedReply as exc:
                failed[cid] = lost_reason(messages[cid], exc)
                del replies[cid]
        if failed:
            for cid, reason in failed.items():
                self.lost[cid] = {"round": rnd + 1, "reason": reason}
            if self.on_lost is not None:
                self.on_lost(failed, rnd)
        return replies

    def __getattr__(self, name: str) -> Any:  # the inner grid's other attributes
        return getattr(self.inner, name)
