"""The simulator's grid with every reply checked by the server before it sees it.

The simulator's clients are the user's own code (or fedlabels'), so a reply the server
refuses (:meth:`~fedlabels.method.base.ServerRole.check_reply`) stops the run with one line
naming the client and what is wrong, instead of a traceback from deep in an aggregation,
or a vote quietly moved. A Flower deployment drops such a site instead
(:class:`~fedlabels.engines.flower.grid.FlowerGrid`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.replies import MalformedReply, describe


class CheckedGrid:
    """``inner`` (any grid) whose replies ``server.check_reply`` checks."""

    def __init__(self, inner: Any, server: Any) -> None:
        self.inner = inner
        self.server = server

    @property
    def client_ids(self) -> list[int]:
        return list(self.inner.client_ids)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        replies = self.inner.exchange(messages, rnd)
        for cid in sorted(replies):
            try:
                self.server.check_reply(cid, messages[cid], replies[cid])
            except MalformedReply as exc:
                raise FedLabelsError(f"round {rnd + 1}: "
                                     f"{describe(cid, messages[cid], exc)}.") from None
        return dict(replies)

    def __getattr__(self, name: str) -> Any:  # the inner grid's other attributes
        return getattr(self.inner, name)
