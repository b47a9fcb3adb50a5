"""The in-process simulator: all roles in one process, every message really serialized.

The roles come from the session builder (:func:`fedlabels.runs.session.build_session`), as
every engine's do; this module adds the grid, the workers, checkpoints and the result.

Messages are encoded to bytes and decoded on the other side, exactly as they would travel,
and :class:`CommMeter` counts ``len()`` of those bytes per round, client, direction and
category. Splits, initialisation and minibatch order are deterministic for a given seed;
secret randomness (DP noise, masks, keys) comes from OS entropy
(:mod:`fedlabels.core.randomness`) unless ``insecure_reproducible_noise`` is set.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.randomness import reproducible
from fedlabels.data import Federation
from fedlabels.engines.client_failure import client_failure
from fedlabels.engines.client_ledgers import reconcile_client_ledgers
from fedlabels.engines.workers import WorkerGrid, in_process_only, resolve_workers
from fedlabels.method.adversary import attack_record
from fedlabels.method.base import ClientRole, Grid, Method
from fedlabels.method.options import MethodOptions
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.checked_grid import CheckedGrid
from fedlabels.runs.checkpoint import (
    Keeper,
    checkpoint_path,
    load_checkpoint,
    run_identity,
)
from fedlabels.runs.loop import (
    CommMeter,
    RunPlan,
    build_result,
    run_rounds,
    uses_iterative,
)
from fedlabels.runs.lost import check_survivors
from fedlabels.runs.participation import Participation, ParticipationGrid
from fedlabels.runs.progress import RoundProgress, StepsShown, info
from fedlabels.runs.run_lock import checkpoint_lock
from fedlabels.runs.session import build_session


class InProcessGrid:
    """A :class:`~fedlabels.methods.Grid` over client roles living in this process;
    ``placement`` (:class:`fedlabels.learners.offload.Placement`) moves a client's weights
    off its device after its turn where they rest there."""

    def __init__(self, clients: Mapping[int, ClientRole], meter: CommMeter,
                 placement: Any = None) -> None:
        self.clients = dict(clients)
        self.meter = meter
        self.placement = placement

    def after_turn(self, cid: int) -> None:
        """Client ``cid`` is done with this exchange (see ``placement``)."""
        if self.placement is not None:
            self.placement.after_turn(cid, getattr(self.clients[cid], "learner", None))

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.clients)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        replies = {}
        for cid in sorted(messages):
            down = encode_message(messages[cid])
            self.meter.add(rnd, cid, "down", messages[cid].category, len(down))
            try:
                reply = self.clients[cid].handle(decode_message(down))
            except BaseException as exc:
                failure = client_failure(exc, cid, rnd, messages[cid].kind, self.clients[cid])
                if failure is exc:
                    raise
                raise failure from exc
            finally:
                self.after_turn(cid)
            up = encode_message(reply)
            self.meter.replied(rnd, cid, reply, len(up))
            replies[cid] = decode_message(up)
        return replies


def _identity_summary(federation: Federation) -> dict[str, Any]:
    """The federation's summary as a checkpoint's identity holds it: without
    ``loaded_with``, a record of the table settings, and ``data_sha256``, of the data before
    the split (the summary's sizes and the federation's fingerprint cover the data), so a
    checkpoint of an earlier version still resumes."""
    summary = federation.summary()
    summary.pop("loaded_with", None)
    summary.pop("data_sha256", None)
    return summary


def releases_privacy(server: Any) -> bool:
    """Whether the run's rounds are DP releases (its server keeps a privacy ledger). Such a
    run checkpoints every round before anything of it is shown (the round's progress line,
    an interrupted run's result), not paced in the background: a paced run interrupted after
    round 21 resumed from round 1's checkpoint and released rounds 2 to 21 again with fresh
    noise, its result counting one release of each where two were made (and the first
    ones' results had been written)."""
    from fedlabels.privacy.ledger import Ledger

    return isinstance(getattr(server, "ledger", None), Ledger)


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
    malicious: int = 0,
    attack: str | None = None,
    participation: float | int | None = None,
    dropout: float | None = None,
    deadline: float | None = None,
    checkpoint: str | Path | None = None,
    resume: str | Path | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    batch_clients: str = "auto",
    cuda_graphs: str = "off",
    offload: str = "auto",
    wrap_grid: Callable[[Any], Grid] | None = None,
    workers: int | None = 1,
) -> RunResult:
    """Run ``method`` on ``federation`` for ``rounds`` communication rounds.

    ``models`` holds one spec or estimator per client (or one for all). ``eval_every`` sets
    how often clients report test accuracy; the last round is always evaluated.
    ``options`` are the method's options (a mapping, validated against the method's
    declaration, or an already validated ``MethodOptions``).
    ``progress``: see :mod:`fedlabels.runs.progress` (``None``: a bar on a terminal, else quiet).
    ``insecure_reproducible_noise`` runs inside :func:`fedlabels.core.randomness.reproducible`
    (``seed``): every party's noise, masks and keys repeat from the seed, so the result
    protects nothing and says ``privacy.guarantee = "none"`` (so does any run made while a
    reproducible source is installed). Tests and debugging only.
    ``malicious`` clients (below half, drawn from ``seed``) send what ``attack`` makes of
    their replies (:mod:`fedlabels.method.adversary`); the result's ``malicious`` entry
    names them.
    ``participation`` (a probability q in (0, 1] per client and round, or an int: exactly that
    many clients per round), ``dropout`` and ``deadline``: see
    :mod:`fedlabels.runs.participation`; the result's ``participation`` entry records them.
    ``checkpoint`` (``X.checkpoint.npz``; its history goes to the journal
    ``X.checkpoint.journal`` beside it) is written at the end of rounds
    (:mod:`fedlabels.runs.checkpoint`), in the background while the next rounds train,
    paced to take at most about 5 % of the run (every round where rounds take seconds)
    and always after the last round;
    ``resume`` continues the run of that checkpoint (the same federation, models and
    settings; ``rounds`` may extend it) and, unless ``checkpoint`` says otherwise, keeps
    writing it.
    ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) and ``precision`` (``fp32``,
    ``bf16``) place the torch learners (:mod:`fedlabels.learners.devices`); the result's
    ``device`` entry records where they ran. ``batch_clients`` (``on``, ``off``, ``auto``:
    on CUDA) trains the clients' torch learners together
    (:mod:`fedlabels.engines.together`); the ``device`` entry says whether it did.
    ``cuda_graphs`` (``off``, ``on``: needs them trained together on CUDA) replays their
    training and distillation steps as CUDA graphs where it can
    (:mod:`fedlabels.learners.step_graphs`); the ``device`` entry's ``cuda_graphs`` counts
    the group calls that did.
    ``offload`` (``never``, ``always``, ``auto``: while they do not fit) moves clients'
    weights off their GPU between turns (:mod:`fedlabels.learners.offload`); the ``device``
    entry's ``offload`` says which clients rested off it.
    ``wrap_grid`` gives the grid the rounds use in place of the in-process one it is passed
    (a wrapper that observes or checks the traffic: :func:`fedlabels.testing.check_method`;
    it is passed a ``TogetherGrid`` when the clients train together).
    ``workers`` > 1 runs the client roles in that many processes
    (:mod:`fedlabels.engines.workers`; at most one per client), ``None`` one per core (the
    CPU only: one process where torch learners run on a GPU, train together or a wrapped
    grid watches them); the result is the same as with 1.
    """
    started = time.perf_counter()
    if resume is not None and checkpoint is None:
        checkpoint = checkpoint_path(resume)
    with nullcontext() if checkpoint is None else checkpoint_lock(checkpoint):
        # one process at a time runs (and writes) a checkpointed run
        saved = None if resume is None else load_checkpoint(resume)
        with reproducible(seed) if insecure_reproducible_noise else nullcontext():
            policy = Participation.parse(participation, dropout, deadline)
            session = build_session(method, federation, models, rounds=rounds, period=period,
                                    seed=seed, options=options, device=device,
                                    precision=precision, participation=policy,
                                    malicious=malicious, attack=attack, resuming=saved)
            plan, learners, clients, server = (session.plan, session.learners, session.clients,
                                               session.server)
            datasets, rounds = session.roles.datasets, session.rounds
            rounds_note = session.rounds_note
            bad, attack_used = session.malicious, session.attack
            meter = CommMeter()
            together = use_together(batch_clients, plan, learners)
            graphs = use_graphs(cuda_graphs, together, plan.devices(), plan.device)
            placement = placement_for(offload, plan, clients)
            one_process = in_process_only(plan.devices(), together, wrap_grid is not None)
            if one_process is None and placement is not None:
                one_process = "its clients' weights move off their device between turns (offload)"
            n_workers = resolve_workers(workers, len(clients), one_process)
            pool = None if n_workers == 1 else WorkerGrid(
                clients, meter, n_workers, {cid: len(d) for cid, d in enumerate(datasets)})
            in_process: Any = (InProcessGrid(clients, meter, placement) if pool is None
                               else pool)
            if together:
                from fedlabels.engines.together import TogetherGrid

                in_process = TogetherGrid(in_process, graphs=graphs,
                                          strict=batch_clients == "on")
            checked = CheckedGrid(in_process if wrap_grid is None else wrap_grid(in_process),
                                  server)  # a malformed reply loses its client, as on Flower
            grid: Grid = checked
            draw = None
            if policy is not None:
                grid = selecting = ParticipationGrid(grid, policy, seed, [len(d) for d in datasets])
                draw = selecting.draw
            cids = grid.client_ids
            kept = checkpoint is not None or saved is not None
            keeper = Keeper(None if checkpoint is None else Path(checkpoint), run_identity(
                plan, seed=seed, eval_every=eval_every, federation=_identity_summary(federation),
                insecure_reproducible_noise=insecure_reproducible_noise, malicious=malicious,
                attack=attack, participation=participation, dropout=dropout, deadline=deadline,
                data=federation.fingerprint() if kept else None),
                dict(config or {}), plan.settings.rounds, server, clients, meter, started,
                client_states=None if pool is None else pool.states,
                background=not releases_privacy(server))
            done = keeper.fresh() if saved is None else _restored(keeper, saved, resume,
                                                                  plan.settings.rounds)
            checked.lost = {int(c): v for c, v in keeper.engine.get("lost", {}).items()}
            checked.on_lost = partial(_lost, plan, learners, checked, keeper)
            try:
                with RoundProgress(rounds, f"{method.name} on {federation.name}",
                                   progress) as shown:
                    records, interrupted = run_rounds(
                        server, StepsShown(grid, shown), meter, rounds=rounds, period=period,
                        eval_every=eval_every,
                        iterative=uses_iterative(learners), all_cids=cids,
                        on_round=keeper.hook(on_round), progress=shown, records=done,
                        catch_interrupt=True, draw=draw)
                if interrupted:  # a Ctrl-C mid-round: the roles are past the last round's end
                    if pool is not None:
                        pool.interrupted = True
                    keeper.barrier()  # (a hook that stopped the run had its round written)
                else:
                    keeper.finish()  # the last round's checkpoint on disk (or its error raised)
                if pool is not None:
                    pool.finish()  # the clients' final states and models, back in this process
            finally:
                keeper.settle()  # failing: let a write end, quietly (after barrier: nothing)
                if pool is not None:
                    pool.close()
            extra: dict[str, Any] = {"interrupted": True} if interrupted else {}
            extra["device"] = {**plan.device_record(), "batched_clients": together,
                               "cuda_graphs": {"asked": cuda_graphs, "graphed_calls":
                                               in_process.graphed_calls if together else 0},
                               "offload": {"asked": offload, "offloaded_clients": []}
                               if placement is None else placement.record()}
            if rounds_note is not None:
                extra["rounds_run"] = rounds_note
            if policy is not None:
                extra["participation"] = policy.to_dict()
            if attack_used is not None:
                extra["malicious"] = attack_record(method, bad, attack_used)
            if checked.lost:
                extra["lost"] = {str(c): dict(v) for c, v in sorted(checked.lost.items())}
            result = build_result(plan, server, records, meter, dataset=federation.name, seed=seed,
                                  config=dict(config or {}), federation=federation.summary(),
                                  started=started, extra=extra or None,
                                  noise_from_flag=insecure_reproducible_noise)
            reconcile_client_ledgers(result.extra["privacy"], clients)
            keeper.stamp(result)
            result.extra.setdefault("provenance", {})["workers"] = n_workers
            tail = time.perf_counter()  # the final test predictions count as the run's time,
            # with workers (made in finish) as in one process (made here)
            if records and not method.capabilities.trains_models:
                result.extra["clinical"] = no_models_clinical(plan, federation,
                                                              grid.client_ids)
            elif records:  # stopped before the first round completed: no trained models to keep
                result.client_models = [clients[c].model() for c in cids]
                if federation.task != "regression":
                    result.extra["clinical"] = final_clinical(  # the clients evaluated
                        clients, grid.client_ids, federation, records[-1].accuracies,
                        None if pool is None else pool.test_outputs,
                        None if pool is not None or placement is None else getattr(
                            in_process, "inner", in_process))
                else:
                    result.extra["clinical"] = {"baseline": regression_baseline(federation)}
            result.wall_seconds += time.perf_counter() - tail
            from fedlabels.data.pixel_names import names_copy

            result.feature_names = names_copy(federation.feature_names)
            result.preprocessing = federation.preprocessing
            return result


def _lost(plan: RunPlan, learners: list[Any], checked: CheckedGrid, keeper: Keeper,
          failed: dict[int, str], rnd: int) -> None:
    """Clients lost in round ``rnd`` (``failed``: client -> why): kept for the checkpoint,
    then the run goes on if the method takes the rest (a line says so), else stops
    (:func:`fedlabels.runs.lost.check_survivors`), as a Flower deployment does."""
    keeper.engine = {**keeper.engine,
                     "lost": {str(c): dict(v) for c, v in checked.lost.items()}}
    info(f"fedlabels: {check_survivors(plan, learners, checked.client_ids, failed, rnd)}")


def _restored(keeper: Keeper, saved: Any, resume: str | Path | None,
              rounds: int) -> list[RoundRecord]:
    """The records of checkpoint ``saved`` (read from ``resume``), its states loaded into
    the roles; a state that cannot be loaded (a damaged or hand-made file) is refused in one
    line naming the file."""
    from fedlabels.core.errors import FedLabelsError

    try:
        return keeper.restore(saved, rounds)
    except FedLabelsError as exc:
        raise FedLabelsError(f"cannot resume from {checkpoint_path(resume or '')}: "
                             f"{exc}") from None


def final_clinical(clients: dict[int, Any], cids: list[int], federation: Federation,
                   last_accuracies: list[float] | None,
                   test_outputs: Mapping[int, Any] | None = None,
                   grid: Any = None) -> dict[str, Any]:
    """Clinical metrics of each client's final model on the test set (see
    :mod:`fedlabels.core.clinical`). Where the last round's evaluation scored something else
    (a student, transductive labels), the entry says so instead of contradicting it, and
    keeps the majority-class baseline of the test set that evaluation scored.
    ``test_outputs``: each client's test predictions and class probabilities where they
    were computed already (by the worker that held the client). ``grid``'s ``after_turn``
    (an :class:`InProcessGrid` whose clients rest off their device) follows each client's
    predictions."""
    from fedlabels.core.clinical import clinical_summary

    outputs = []
    for c in cids:
        if test_outputs is not None and c in test_outputs:
            outputs.append(test_outputs[c])
            continue
        outputs.append(clients[c].test_outputs())
        if grid is not None:
            grid.after_turn(c)
    summary = clinical_summary(outputs, federation.y_test, federation.n_classes,
                               training_class_counts(federation),
                               [str(n) for n in federation.class_names])
    accuracies = summary["metrics"]["accuracy"]["clients"]
    if last_accuracies is not None and not np.allclose(accuracies, last_accuracies):
        return {"unavailable": "this method's evaluation scores something other than each "
                               "client's model on the test set",
                "baseline": summary["baseline"]}
    return summary


def no_models_clinical(plan: RunPlan, federation: Federation,
                       cids: list[int]) -> dict[str, Any]:
    """The result's ``clinical`` of a method that trains no model (XCLP), on every engine:
    why none, and the majority-class baseline of the shares its clients ``cids`` were
    scored on (:func:`shares_baseline_of`)."""
    return {"unavailable": plan.method.no_models_note(),
            **shares_baseline_of(plan.method, plan, federation, cids)}


def shares_baseline_of(method: Any, plan: RunPlan, federation: Federation,
                       cids: list[int]) -> dict[str, Any]:
    """``{"baseline": ...}`` of a classification run whose clients are each scored on their
    own share of the test set (:meth:`Method.test_rows`; XCLP): each client's majority-class
    baseline on its share (:func:`fedlabels.core.clinical.shares_baseline`); ``{}`` where
    they are scored on all of it, for regression, or where a share is empty."""
    from fedlabels.core.clinical import shares_baseline

    n_test = len(federation.y_test)
    shares = [method.test_rows(plan.settings, n_test, c) for c in cids]
    if federation.task == "regression" or not shares or any(
            s is None or not len(s) for s in shares):
        return {}
    return {"baseline": shares_baseline(training_class_counts(federation), federation.y_test,
                                        shares)}


def training_class_counts(federation: Federation) -> list[int]:
    """Each class's count over every client's private training labels (the majority-class
    baseline's class is the commonest of them)."""
    return np.sum([np.bincount(c.y, minlength=federation.n_classes)
                   for c in federation.clients], axis=0).tolist()


def regression_baseline(federation: Federation) -> dict[str, Any]:
    """The result's ``clinical.baseline`` of a regression run: the constant predictor of
    the pooled private training targets' mean, scored on the test set
    (:func:`fedlabels.core.metrics.mean_baseline`), as the majority-class baseline takes
    the pooled private training labels."""
    from fedlabels.core.metrics import mean_baseline

    return mean_baseline(np.concatenate([c.y for c in federation.clients]), federation.y_test,
                         federation.target_range or (0.0, 1.0))


def placement_for(offload: str, plan: Any, clients: Mapping[int, Any]) -> Any:
    """The :class:`~fedlabels.learners.offload.Placement` of a run's clients, or ``None``
    where none moves (``never``; ``auto`` on the CPU). ``always`` needs torch learners."""
    from fedlabels.learners.offload import check_offload

    devices = plan.devices()
    if check_offload(offload) == "never" or (
            offload == "auto" and not any(d.startswith("cuda") for d in devices)):
        return None
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.learners.offload import Placement, offloadable

    learners = {cid: getattr(role, "learner", None) for cid, role in clients.items()}
    if offload == "always" and not all(offloadable(ln) for ln in learners.values()):
        raise FedLabelsError("offload=always needs every client's learner to be a torch "
                             "model whose weights can move (mlp, cnn, your own module); use "
                             "offload=auto or never.")
    return Placement(offload, {cid: devices[cid] for cid in clients})


def use_graphs(cuda_graphs: str, together: bool, devices: list[str],
               asked: str = "cuda") -> bool:
    """Whether the clients trained together replay their step as a CUDA graph: ``on``
    needs them trained together on CUDA (a one-line error otherwise, naming which of the
    two is missing; ``asked``: the device setting), ``off`` never."""
    from fedlabels.core.errors import FedLabelsError

    if cuda_graphs not in ("off", "on"):
        raise FedLabelsError(f"cuda_graphs must be on or off, got {cuda_graphs!r}.")
    if cuda_graphs == "off":
        return False
    if not all(d.startswith("cuda") for d in devices):
        why = " (device=auto found no CUDA GPU here)" if asked == "auto" else ""
        raise FedLabelsError(
            f"cuda_graphs=on replays the step of clients trained together on CUDA, and "
            f"this run's clients do not train on CUDA{why}; use cuda_graphs=off.")
    if not together:
        raise FedLabelsError(
            "cuda_graphs=on replays the step of clients trained together on CUDA, and this "
            "run's clients do not train together (batch_clients, models: docs/neural.md); "
            "use cuda_graphs=off.")
    return True


def use_together(batch_clients: str, plan: Any, learners: list[Any]) -> bool:
    """Whether the clients train together: ``on`` (refused if a learner cannot), ``off``,
    or ``auto`` (every learner can, all on CUDA, and no reproducible randomness)."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.core.randomness import is_reproducible

    if batch_clients == "off" or len(learners) < 2:
        return False
    # only a torch classifier trains batched, and one exists only once its module (which
    # loads torch) is loaded: a run of trees does not load torch (~1.5 s) to find that out
    able = "fedlabels.learners.torch_mlp" in sys.modules and not is_reproducible()
    if able:
        from fedlabels.learners.batched import batchable

        able = all(batchable(ln) for ln in learners)
    if batch_clients == "on":
        if is_reproducible():
            raise FedLabelsError(
                "batch_clients=on trains the clients in threads that would draw from the one "
                "reproducible noise stream (insecure_reproducible_noise) in thread order; "
                "use batch_clients=auto or off.")
        if not able:
            from fedlabels.learners.batched import NOT_BATCHABLE

            raise FedLabelsError(NOT_BATCHABLE)
        return True
    return able and all(d.startswith("cuda") for d in plan.devices())
