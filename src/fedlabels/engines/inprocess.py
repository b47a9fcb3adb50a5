"""The in-process simulator: all roles in one process, every message really serialized.

Messages are encoded to bytes and decoded on the other side, exactly as they would travel,
and :class:`CommMeter` counts ``len()`` of those bytes per round, client, direction and
category. Splits, initialisation and minibatch order are deterministic for a given seed;
secret randomness (DP noise, masks, keys) comes from OS entropy
(:mod:`fedlabels.randomness`) unless ``insecure_reproducible_noise`` is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.data import Federation
from fedlabels.engines.runner import (
    CommMeter,
    build_result,
    plan_run,
    rounds_to_run,
    run_rounds,
    uses_iterative,
)
from fedlabels.learners import expand_per_client
from fedlabels.progress import RoundProgress
from fedlabels.protocols.base import ClientRole, Method
from fedlabels.protocols.options import MethodOptions
from fedlabels.randomness import reproducible
from fedlabels.results import RoundRecord, RunResult


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


def simulate(
    method: Method,
    federation: Federation,
    models: list[Any],
    *,
    rounds: int,
    period: int = 50,
    seed: int = 0,
    eval_every: int = 1,
    progress: bool | None = None,
    config: dict[str, Any] | None = None,
    options: Mapping[str, Any] | MethodOptions | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
    insecure_reproducible_noise: bool = False,
) -> RunResult:
    """Run ``method`` on ``federation`` for ``rounds`` communication rounds.

    ``models`` holds one spec or estimator per client (or one for all). ``eval_every`` sets
    how often clients report test accuracy; the last round is always evaluated.
    ``options`` are the method's options (a mapping, validated against the method's
    declaration, or an already validated ``MethodOptions``).
    ``progress``: see :mod:`fedlabels.progress` (``None``: a bar on a terminal, else quiet).
    ``insecure_reproducible_noise`` runs inside :func:`fedlabels.randomness.reproducible`
    (``seed``): every party's noise, masks and keys repeat from the seed, so the result
    protects nothing and says ``privacy.guarantee = "none"`` (so does any run made while a
    reproducible source is installed). Tests and debugging only.
    """
    started = time.perf_counter()
    with reproducible(seed) if insecure_reproducible_noise else nullcontext():
        options = method.parse_options(options)  # before any model is built
        datasets = method.client_datasets(federation.clients)
        plan = plan_run(method, n_roles=len(datasets), n_classes=federation.n_classes,
                        n_features=federation.n_features, rounds=rounds, period=period, seed=seed,
                        models=expand_per_client(list(models), federation.n_clients),
                        options=options)
        learners = plan.learners()
        method.validate(len(datasets), plan.settings, learners)
        rounds, rounds_note = rounds_to_run(plan, learners)  # a one-shot method stops early
        ctx = plan.context(truth_public=federation.y_public)
        X_public = federation.X_public if method.uses_public else None
        clients = {cid: method.make_client(cid, datasets[cid], learners[cid], ctx, X_public,
                                           federation.X_test, federation.y_test)
                   for cid in range(len(datasets))}
        server = method.make_server(ctx, len(federation.X_public), learners,
                                    [len(d) for d in datasets])
        meter = CommMeter()
        grid = InProcessGrid(clients, meter)
        cids = grid.client_ids
        with RoundProgress(rounds, f"{method.name} on {federation.name}", progress) as shown:
            records, interrupted = run_rounds(
                server, grid, meter, rounds=rounds, period=period, eval_every=eval_every,
                iterative=uses_iterative(learners), all_cids=cids, on_round=on_round,
                progress=shown, catch_interrupt=True)
        extra: dict[str, Any] = {"interrupted": True} if interrupted else {}
        if rounds_note is not None:
            extra["rounds_run"] = rounds_note
        result = build_result(plan, server, records, meter, dataset=federation.name, seed=seed,
                              config=dict(config or {}), federation=federation.summary(),
                              started=started, extra=extra or None,
                              noise_from_flag=insecure_reproducible_noise)
        if records:  # stopped before the first round completed: no trained models to keep
            result.client_models = [clients[c].model() for c in cids]
        result.feature_names = list(federation.feature_names)
        result.preprocessing = federation.preprocessing
        return result
