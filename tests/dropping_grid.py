"""A test Grid that loses clients at chosen messages, as a deployment loses nodes.

:class:`DroppingGrid` wraps another grid (usually an ``InProcessGrid``). A trigger
``(cid, kind, step)`` fires on the first message of ``kind`` (and config ``step``, if given;
a message without one counts as step 1) sent to client ``cid``: from then on the client is
lost, as ``FlowerGrid`` treats a node that failed. The triggering message is not delivered
(``deliver=False``, the client never sees it) or delivered with its reply lost
(``deliver=True``, the client did the work); either way the client is missing from that
exchange's replies, leaves ``client_ids``, and a later message to it is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fedlabels.comm import Message
from fedlabels.method.base import Grid


@dataclass(frozen=True)
class Drop:
    """Lose client ``cid`` at its first ``kind`` message (with config ``step``, if set)."""

    cid: int
    kind: str
    step: int | None = None
    deliver: bool = False

    def fires(self, cid: int, message: Message) -> bool:
        return cid == self.cid and message.kind == self.kind and (
            self.step is None or int(message.config.get("step", 1)) == self.step)


#: XCLP's dropout phases as triggers (client 1 in the examples of docs/xclp.md)
XCLP_PHASES = {
    "before-hamming": ("xclp.hamming", 1),
    "during-hamming": ("xclp.hamming", 2),
    "before-rowsums": ("xclp.influence", None),
    "within-rowsums": ("xclp.rowsums", None),
}


def xclp_drop(cid: int, phase: str, deliver: bool = False) -> Drop:
    kind, step = XCLP_PHASES[phase]
    return Drop(cid, kind, step, deliver)


class DroppingGrid:
    """``inner`` with the clients of ``drops`` lost from their trigger on."""

    def __init__(self, inner: Grid, drops: list[Drop]) -> None:
        self.inner = inner
        self.drops = list(drops)
        self.lost: dict[int, Drop] = {}

    @property
    def client_ids(self) -> list[int]:
        return [c for c in self.inner.client_ids if c not in self.lost]

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        gone = sorted(set(messages) & set(self.lost))
        if gone:
            raise AssertionError(f"messages for lost clients {gone}")
        deliver, swallow = {}, set()
        for cid, message in messages.items():
            drop = next((d for d in self.drops if d.fires(cid, message)), None)
            if drop is not None:
                self.lost[cid] = drop
                self.drops.remove(drop)
                swallow.add(cid)
                if not drop.deliver:
                    continue
            deliver[cid] = message
        replies = self.inner.exchange(deliver, rnd) if deliver else {}
        return {cid: reply for cid, reply in replies.items() if cid not in swallow}


def run_on_grid(method: str, fed, make_grid, *, rounds: int, options: dict,
                model: str = "decision_tree", period: int = 5, seed: int = 0):
    """Run ``method`` through the engine's round loop on ``make_grid(build, learners, meter)``.

    ``build(cid, learner=None)`` makes client ``cid``'s role as a deployment does (a fresh
    learner unless one is given). Returns (records, server, grid).
    """
    from fedlabels.learners import as_models
    from fedlabels.runs.loop import CommMeter, run_rounds
    from fedlabels.runs.session import build_session

    session = build_session(method, fed, as_models(model), rounds=rounds,
                            period=period, seed=seed, options=options)
    meter = CommMeter()
    grid = make_grid(session.fresh_client, session.learners, meter)
    server = session.server
    records, _ = run_rounds(server, grid, meter, rounds=rounds, period=period, eval_every=1,
                            iterative=session.iterative, all_cids=grid.client_ids)
    return records, server, grid
