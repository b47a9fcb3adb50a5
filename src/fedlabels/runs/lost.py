"""Clients lost during a run, decided alike by every engine.

A client is lost when its reply cannot be used: on Flower, an error reply, a SuperNode
that left or a reply that never came; on every engine, a reply the server's check refuses
(:meth:`~fedlabels.method.base.ServerRole.check_reply`: wrong shape, labels outside the
classes, NaN, another message kind). A lost client gets no further messages. The run goes
on with the others where the method accepts that many clients
(``Capabilities.tolerates_lost_clients`` and ``Method.validate``), else stops with one line
naming the round, each client lost and why (:func:`check_survivors`); the result records
them (``lost``: client -> round and reason).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedlabels.core.errors import FedLabelsError


class ClientsLost(FedLabelsError):
    """Too few clients remain for the method to continue."""


def lost_detail(failed: Mapping[int, str],
                name: Callable[[int], str] = lambda cid: f"client {cid}") -> str:
    """``client 1: malformed reply to fedct.train: ...; client 3: ...``."""
    return "; ".join(f"{name(c)}: {why}" for c, why in sorted(failed.items()))


def check_survivors(plan: Any, learners: list[Any], alive: list[int],
                    failed: Mapping[int, str], rnd: int,
                    name: Callable[[int], str] = lambda cid: f"client {cid}",
                    all_lost_hint: str = "") -> str:
    """After ``failed`` (client -> reason) were lost in round ``rnd`` (0-based), leaving
    ``alive``: the line to show if the method (``plan.method``) goes on with the rest, else
    :class:`ClientsLost` saying which clients were lost, why, and why the method cannot go
    on. ``name`` names a client (Flower adds its SuperNode)."""
    detail = lost_detail(failed, name)
    if not alive:
        raise ClientsLost(f"round {rnd + 1}: every client was lost ({detail})." + all_lost_hint)
    method = plan.method
    if not method.capabilities.tolerates_lost_clients:
        raise ClientsLost(f"round {rnd + 1}: lost {detail}; method {method.name!r} cannot go "
                          "on without all its clients.")
    try:
        method.validate(len(alive), plan.settings, [learners[c] for c in alive])
    except FedLabelsError as exc:
        raise ClientsLost(f"round {rnd + 1}: lost {detail}. Only {len(alive)} client(s) "
                          f"remain ({alive}), too few to go on: {exc}") from None
    return f"round {rnd + 1}: lost {detail}; continuing with clients {alive}."
