"""Partial participation, dropouts and stragglers: a Grid wrapper that decides, per round,
who is selected and whose reply reaches the server.

Round ``r`` (0-based) of a run with seed ``s`` draws from ``SeedSequence([s, r, TAG])``
alone (three spawned streams: selection, dropout, speed jitter), so the draw needs no RNG
state: a resumed run, or the same seed, gets the same participants. Per round:

* **selected**: each client independently with probability ``q`` (``participation`` a
  float in (0, 1]), or exactly ``k`` clients uniformly without replacement
  (``participation`` an int >= 1);
* **dropped**: each selected client with probability ``dropout``; it never gets the
  round's messages (it went offline), so its state does not change;
* **late**: with a ``deadline`` ``S``, a selected client whose simulated time exceeds ``S``.
  It gets the round's first message, does the work (its model moves) and its reply is
  discarded; it gets no further message that round.

Simulated time of client ``i`` in round ``r``: ``(n_i / mean_j n_j) * v_i * j_ir`` with
``v_i = exp(CLIENT_SPREAD * z_i)`` (a per-client slowness, fixed for the run, from
``SeedSequence([s, SPEED_TAG])``) and ``j_ir = exp(ROUND_SPREAD * z_ir)`` (jitter of round
``r``), ``z`` standard normal: work proportional to the client's private data size, and a
client of mean size and median speed takes 1 time unit, the unit of ``deadline``.

Evaluation messages (category ``evaluation``) always reach every client: measurement, not
protocol. A round in which no reply can arrive is skipped by the run loop
(:func:`~fedlabels.runs.loop.run_rounds`): no message is sent, the server keeps its
state and the record says ``server["skipped"] = 1``.

These draws are seeded from the run seed, which the result records: they are public, not
privacy noise, and no privacy amplification is claimed for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.base import Grid, Method, Settings

ROUND_TAG = 0x9A27_1C1  # round r's draws: SeedSequence([seed, r, ROUND_TAG])
SPEED_TAG = 0x5BEED_5  # per-client slowness: SeedSequence([seed, SPEED_TAG])
CLIENT_SPREAD = 0.5  # sigma of log slowness across clients
ROUND_SPREAD = 0.25  # sigma of log jitter of one client from round to round
NOT_PRIVACY = ("participation, dropouts and deadlines are drawn from the run seed (public): "
               "they are not privacy noise and no privacy amplification is claimed for them")
FLAGS = "--participation/--dropout/--deadline"


@dataclass(frozen=True)
class Participation:
    """Who takes part: ``fraction`` q or ``count`` k per round, ``dropout`` p, ``deadline``."""

    fraction: float | None = None
    count: int | None = None
    dropout: float = 0.0
    deadline: float | None = None

    @classmethod
    def parse(cls, participation: float | int | None = None, dropout: float | None = None,
              deadline: float | None = None) -> Participation | None:
        """Validated settings (None when none is given); bad values are one-line errors."""
        if participation is None and not dropout and deadline is None:
            return None
        fraction = count = None
        if isinstance(participation, bool) or not (
                participation is None or isinstance(participation, int | float)):
            raise FedLabelsError(f"participation must be a probability in (0, 1] such as 0.5, "
                                 f"or a whole number of clients such as 3; got "
                                 f"{participation!r}.")
        if isinstance(participation, int):
            if participation < 1:
                raise FedLabelsError(f"participation {participation}: give a probability in "
                                     "(0, 1] (e.g. 0.5) or a number of clients per round >= 1 "
                                     "(e.g. 3).")
            count = participation
        elif isinstance(participation, float):
            if not 0.0 < participation <= 1.0:
                raise FedLabelsError(
                    f"participation {participation!r}: a probability must lie in (0, 1]; "
                    "for a fixed number of clients per round give a whole number without "
                    "a decimal point (e.g. 3).")
            fraction = participation
        p = 0.0 if dropout is None else dropout
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p < 1.0:
            raise FedLabelsError(f"dropout must be a probability in [0, 1), got {dropout!r}.")
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(
                deadline, int | float) or not (math.isfinite(deadline) and deadline > 0)):
            raise FedLabelsError(f"deadline must be a positive number of simulated time units "
                                 f"(1 = a client of mean size and median speed), got "
                                 f"{deadline!r}.")
        return cls(fraction, count, float(p), None if deadline is None else float(deadline))

    def check_clients(self, n_clients: int) -> None:
        if self.count is not None and self.count > n_clients:
            raise FedLabelsError(f"participation {self.count}: only {n_clients} clients; "
                                 f"select at most {n_clients} per round.")

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "count" if self.count is not None else "probability",
                "clients_per_round": self.count,
                "probability": 1.0 if self.fraction is None and self.count is None
                else self.fraction,
                "dropout": self.dropout, "deadline": self.deadline,
                "speed_model": {"time": "(n_i / mean n) * exp(CLIENT_SPREAD * z_i) * "
                                        "exp(ROUND_SPREAD * z_ir)",
                                "client_spread": CLIENT_SPREAD, "round_spread": ROUND_SPREAD},
                "note": NOT_PRIVACY}


@dataclass(frozen=True)
class RoundDraw:
    """Round r's participants: selected, dropped and late (sorted client ids), and every
    client's simulated time."""

    selected: tuple[int, ...]
    dropped: tuple[int, ...]
    late: tuple[int, ...]
    times: np.ndarray

    @property
    def reachable(self) -> set[int]:
        """Selected clients that get the round's messages (not dropped)."""
        return set(self.selected) - set(self.dropped)

    @property
    def replying(self) -> list[int]:
        """Selected clients whose reply reaches the server in time."""
        return sorted(self.reachable - set(self.late))


def slowness(seed: int, n_clients: int) -> np.ndarray:
    """Per-client slowness ``v_i`` (lognormal, median 1), fixed for the run."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, SPEED_TAG]))
    return np.exp(CLIENT_SPREAD * rng.standard_normal(n_clients))


def simulated_times(seed: int, rnd: int, sizes: list[int]) -> np.ndarray:
    """Every client's simulated time in round ``rnd`` (see the module docstring)."""
    n = np.asarray(sizes, dtype=np.float64)
    jitter_stream = _streams(seed, rnd)[2]
    jitter = np.exp(ROUND_SPREAD * np.random.default_rng(jitter_stream).standard_normal(len(n)))
    return n / n.mean() * slowness(seed, len(n)) * jitter


def _streams(seed: int, rnd: int) -> list[np.random.SeedSequence]:
    return np.random.SeedSequence([seed, rnd, ROUND_TAG]).spawn(3)


def draw_round(policy: Participation, seed: int, rnd: int, sizes: list[int]) -> RoundDraw:
    """Round ``rnd``'s draw: a pure function of (seed, rnd) and the client sizes."""
    m = len(sizes)
    select, drop, _ = _streams(seed, rnd)
    if policy.count is not None:
        chosen = np.sort(np.random.default_rng(select).choice(m, policy.count, replace=False))
    else:
        q = 1.0 if policy.fraction is None else policy.fraction
        chosen = np.flatnonzero(np.random.default_rng(select).random(m) < q)
    selected = [int(c) for c in chosen]
    fails = np.random.default_rng(drop).random(m) < policy.dropout
    dropped = [c for c in selected if fails[c]]
    times = simulated_times(seed, rnd, sizes)
    late = [] if policy.deadline is None else [
        c for c in selected if not fails[c] and times[c] > policy.deadline]
    return RoundDraw(tuple(selected), tuple(dropped), tuple(late), times)


def check_method(method: Method, settings: Settings, policy: Participation) -> None:
    """A one-line error, before training, if ``method`` cannot take missing clients."""
    name = method.name
    if not method.capabilities.tolerates_lost_clients:
        raise FedLabelsError(f"{name} cannot run with {FLAGS}: it needs every client in "
                             "every round; run it without these options.")
    n = method.capabilities.communication_rounds
    if n is not None:
        when = "round 1" if n == 1 else f"its first {n} rounds"
        raise FedLabelsError(f"{name} cannot run with {FLAGS}: it is one shot, exchanging all "
                             f"its messages in {when}, so a client missing then would never "
                             "take part; run it with every client.")
    own = method.capabilities.own_client_sampling
    if own is not None and (policy.fraction is not None or policy.count is not None):
        raise FedLabelsError(f"{name} samples its clients itself (option {own}); use that "
                             f"instead of --participation (--dropout and --deadline apply).")
    reason = method.participation_refusal(settings)
    if reason is not None:
        raise FedLabelsError(f"{name} cannot run with {FLAGS}: {reason}")


class ParticipationGrid:
    """``inner`` with round r's protocol messages reaching only its reachable selected
    clients, and the replies of late ones discarded (see the module docstring)."""

    def __init__(self, inner: Grid, policy: Participation, seed: int,
                 sizes: list[int]) -> None:
        policy.check_clients(len(sizes))
        self.inner = inner
        self.policy = policy
        self.seed = seed
        self.sizes = list(sizes)
        self._draw: tuple[int, RoundDraw] | None = None
        self._spent: set[int] = set()  # late clients that already got this round's message

    @property
    def client_ids(self) -> list[int]:
        return self.inner.client_ids

    def draw(self, rnd: int) -> RoundDraw:
        """Round ``rnd``'s draw (recomputed from the seed; the last one is kept)."""
        if self._draw is None or self._draw[0] != rnd:
            self._draw = (rnd, draw_round(self.policy, self.seed, rnd, self.sizes))
            self._spent = set()
        return self._draw[1]

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        draw = self.draw(rnd)
        reachable = draw.reachable - self._spent
        deliver = {c: m for c, m in messages.items()
                   if m.category == "evaluation" or c in reachable}
        replies = self.inner.exchange(deliver, rnd) if deliver else {}
        late = {c for c in replies if c in draw.late and deliver[c].category != "evaluation"}
        self._spent |= late
        return {c: r for c, r in replies.items() if c not in late}
