"""The in-process simulator: all roles in one process, every message really serialized.

Messages are encoded to bytes and decoded on the other side, exactly as they would travel,
and :class:`CommMeter` counts ``len()`` of those bytes per round, client, direction and
category. Runs are deterministic for a given seed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.data import Federation
from fedlabels.learners import expand_per_client, is_iterative
from fedlabels.protocols.base import (
    ClientRole,
    Method,
    MethodContext,
    Settings,
    make_learners,
)
from fedlabels.results import RoundRecord, RunResult


class CommMeter:
    """Bytes of serialized payloads, by (round, client, direction, category)."""

    def __init__(self) -> None:
        self.bytes: dict[tuple[int, int, str, str], int] = defaultdict(int)

    def add(self, rnd: int, cid: int, direction: str, category: str, n: int) -> None:
        self.bytes[(rnd, cid, direction, category)] += n

    def per_client(self, rnd: int, cids: list[int], direction: str,
                   category: str = "protocol") -> list[int]:
        return [self.bytes.get((rnd, c, direction, category), 0) for c in cids]

    def total(self, direction: str, category: str = "protocol") -> int:
        return sum(v for (_, _, d, g), v in self.bytes.items() if d == direction and g == category)


class InProcessGrid:
    """A :class:`~fedlabels.protocols.Grid` over client roles living in this process."""

    def __init__(self, clients: Mapping[int, ClientRole], meter: CommMeter) -> None:
        self.clients = dict(clients)
        self.meter = meter

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.clients)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        replies = {}
        for cid in sorted(messages):
            down = encode_message(messages[cid])
            self.meter.add(rnd, cid, "down", messages[cid].category, len(down))
            reply = self.clients[cid].handle(decode_message(down))
            up = encode_message(reply)
            self.meter.add(rnd, cid, "up", reply.category, len(up))
            replies[cid] = decode_message(up)
        return replies


WIRE_FORMAT = "fedlabels FLM1: 8-byte preamble + JSON header + raw little-endian arrays"


def communication_summary(meter: CommMeter, wire_format: str = WIRE_FORMAT) -> dict[str, Any]:
    """Run totals of a meter: protocol bytes per direction, evaluation and control apart."""
    return {
        "bytes_up_total": meter.total("up"),
        "bytes_down_total": meter.total("down"),
        "evaluation_bytes_total": meter.total("up", "evaluation")
        + meter.total("down", "evaluation"),
        "control_bytes_total": meter.total("up", "control") + meter.total("down", "control"),
        "wire_format": wire_format,
    }


def derive_seeds(seed: int, n: int) -> tuple[list[int], int]:
    """Independent per-client seeds and a server seed from one run seed."""
    children = np.random.SeedSequence([seed, 0x5EED]).spawn(n + 1)
    ints = [int(c.generate_state(1)[0] & 0x7FFFFFFF) for c in children]
    return ints[:n], ints[n]


def simulate(
    method: Method,
    federation: Federation,
    models: list[Any],
    *,
    rounds: int,
    period: int = 50,
    quorum: float | None = None,
    seed: int = 0,
    eval_every: int = 1,
    progress: bool | None = None,
    config: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> RunResult:
    """Run ``method`` on ``federation`` for ``rounds`` communication rounds.

    ``models`` holds one spec or estimator per client (or one for all). ``eval_every`` sets
    how often clients report test accuracy; the last round is always evaluated.
    ``options`` are method-specific settings (e.g. ``epsilon``), passed to the roles in
    ``Settings.extra``.
    ``progress=None`` shows a bar only on an interactive terminal.
    """
    started = time.perf_counter()
    datasets = method.client_datasets(federation.clients)
    n_roles = len(datasets)
    specs = expand_per_client(list(models), federation.n_clients)[:n_roles]
    client_seeds, server_seed = derive_seeds(seed, n_roles)
    settings = Settings(n_classes=federation.n_classes, period=period, quorum=quorum,
                        extra={"total_rounds": rounds, **(options or {}),
                               "n_features": federation.n_features})
    learners = make_learners(specs, client_seeds, federation.n_classes)
    method.validate(n_roles, settings, learners)
    ctx = MethodContext(settings, client_seeds, server_seed, truth_public=federation.y_public)
    X_public = federation.X_public if method.uses_public() else None
    clients = {cid: method.make_client(cid, datasets[cid], learners[cid], ctx, X_public,
                                       federation.X_test, federation.y_test)
               for cid in range(n_roles)}
    server = method.make_server(ctx, len(federation.X_public), learners,
                                [len(d) for d in datasets])
    meter = CommMeter()
    grid = InProcessGrid(clients, meter)
    cids = grid.client_ids
    iterative = any(is_iterative(ln) for ln in learners)

    records: list[RoundRecord] = []
    bar = tqdm(range(rounds), desc=f"{method.name} on {federation.name}", unit="round",
               disable=(not progress) if progress is not None else None, leave=False)
    interrupted = False
    try:
        for rnd in bar:
            _run_one_round(rnd, rounds, server, grid, meter, cids, eval_every, period, iterative,
                           records, on_round, bar)
    except KeyboardInterrupt:
        # keep what was measured so far; the caller writes it (marked as interrupted)
        if not any(r.accuracies is not None for r in records):
            raise
        interrupted = True
    finally:
        bar.close()
    communication = communication_summary(meter)
    result = RunResult(
        method=method.name,
        dataset=federation.name,
        seed=seed,
        config=dict(config or {}),
        federation=federation.summary(),
        models=[str(s) if not hasattr(s, "get_params") else type(s).__name__ for s in specs],
        rounds=records,
        communication=communication,
        wall_seconds=time.perf_counter() - started,
        extra={**server.result_extra(), **({"interrupted": True} if interrupted else {})},
    )
    result.client_models = [clients[c].learner for c in cids]
    result.feature_names = list(federation.feature_names)
    return result


def _run_one_round(rnd: int, rounds: int, server: Any, grid: InProcessGrid, meter: CommMeter,
                   cids: list[int], eval_every: int, period: int, iterative: bool,
                   records: list[RoundRecord], on_round: Callable[[RoundRecord], None] | None,
                   bar: Any) -> None:
    """One communication round, then (if due) an evaluation of every client."""
    t0 = time.perf_counter()
    server_metrics = server.run_round(rnd, grid)
    accuracies: list[float] | None = None
    if (rnd + 1) % max(1, eval_every) == 0 or rnd == rounds - 1:
        replies = grid.exchange({c: server.evaluation_message(c) for c in cids}, rnd)
        accuracies = [float(replies[c].config["accuracy"]) for c in cids]
    record = RoundRecord(
        round=rnd + 1,
        local_steps=(rnd + 1) * period if iterative else None,
        accuracies=accuracies,
        server=server_metrics,
        bytes_up=meter.per_client(rnd, cids, "up"),
        bytes_down=meter.per_client(rnd, cids, "down"),
        seconds=time.perf_counter() - t0,
    )
    records.append(record)
    if on_round is not None:
        on_round(record)
    if accuracies is not None:
        bar.set_postfix(acc=f"{np.mean(accuracies):.3f}")
