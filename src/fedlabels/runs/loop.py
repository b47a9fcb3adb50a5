"""The one run loop: set-up, rounds, evaluation and the result, for every engine.

An engine supplies a :class:`~fedlabels.methods.Grid` (in-process clients, Flower
SuperNodes) and calls, in order:

1. :func:`plan_run` — the method, validated options, settings, per-client model specs and
   seeds, derived identically on every party from the run configuration;
2. :meth:`RunPlan.learners` and ``method.validate`` — fresh learners, then what the options
   alone could not check;
3. :func:`run_rounds` — ``server.run_round`` per round, the evaluation exchange when due,
   one :class:`~fedlabels.results.RoundRecord` per round;
4. :func:`build_result` — the :class:`~fedlabels.results.RunResult`.
"""

from __future__ import annotations

import json
import signal
import time
import warnings
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.core.errors import FedLabelsError, FedLabelsWarning, user_stacklevel
from fedlabels.core.json_list import ElementTexts, JSONList
from fedlabels.core.metrics import declined, evaluation_scores
from fedlabels.core.provenance import provenance
from fedlabels.core.randomness import is_reproducible
from fedlabels.core.threads import set_threads
from fedlabels.learners import expand_per_client, is_iterative
from fedlabels.method import Grid, Method, MethodContext, ServerRole, Settings
from fedlabels.method.base import make_learners
from fedlabels.method.options import MethodOptions
from fedlabels.method.threat import merge_privacy, recorded_outside
from fedlabels.methods import get_method
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.progress import RoundProgress

if TYPE_CHECKING:
    from fedlabels.comm import Message
    from fedlabels.runs.participation import RoundDraw

WIRE_FORMAT = "fedlabels FLM1: 8-byte preamble + JSON header + raw little-endian arrays"


class CommMeter:
    """Bytes of serialized payloads, by (round, client, direction, category), and which
    values the clients sent: ``sent`` holds (message kind, ``arrays``/``config``, key) of
    every reply (``None``: not known, as for a run resumed from an older checkpoint).

    Kept per round as an array of counts, indexed by the (client, direction, category) keys
    every round shares: a flat dict of (round, client, direction, category) tuples held a
    new 4-tuple, a dict slot and an int for every count, about 2 kB a round of 5 clients,
    the largest part of what a long run keeps per round."""

    def __init__(self) -> None:
        self._keys: dict[tuple[int, str, str], int] = {}  # (client, direction, category)
        self._order: list[tuple[int, str, str]] = []  # the keys by their index
        #: each round's counts by key index (-1: none counted)
        self._rounds: dict[int, array[int]] = {}
        self.sent: set[tuple[str, str, str]] | None = set()
        #: :meth:`entries_view`'s parts: the rounds in order, each round's entries as JSON,
        #: and the rounds counted since (to encode again)
        self._json_rounds: list[int] = []
        self._json = ElementTexts()
        self._stale: set[int] = set()

    def add(self, rnd: int, cid: int, direction: str, category: str, n: int) -> None:
        key = (cid, direction, category)
        i = self._keys.get(key)
        if i is None:
            i = self._keys[key] = len(self._order)
            self._order.append(key)
        counts = self._rounds.get(rnd)
        if counts is None:
            counts = self._rounds[rnd] = array("q")
        self._stale.add(rnd)
        if len(counts) <= i:
            counts.extend([-1] * (i + 1 - len(counts)))
        counts[i] = n if counts[i] < 0 else counts[i] + n

    def _counts(self, rnd: int) -> Iterator[tuple[tuple[int, str, str], int]]:
        return ((self._order[i], n) for i, n in enumerate(self._rounds[rnd]) if n >= 0)

    @property
    def bytes(self) -> dict[tuple[int, int, str, str], int]:
        """Every count by (round, client, direction, category), built on each call."""
        return {(rnd, *key): n for rnd in self._rounds for key, n in self._counts(rnd)}

    def entries(self) -> list[list[Any]]:
        """[round, client, direction, category, bytes] of every count, sorted (what a
        checkpoint stores)."""
        return [[rnd, *key, n] for rnd in sorted(self._rounds)
                for key, n in sorted(self._counts(rnd))]

    def entries_json(self) -> str:
        """``json.dumps(self.entries())`` (:meth:`entries_view`'s text)."""
        return self.entries_view().text

    def entries_view(self) -> JSONList:
        """``json.dumps(self.entries())`` as a :class:`~fedlabels.core.json_list.JSONList`,
        each round's part encoded once (and again where a count of it changed): a DP run
        checkpoints every round, and sorting and encoding every count again took O(T) a
        round (0.1 s at 8,000 rounds of 5 clients); a checkpoint's journal takes the new
        rounds' part from it without joining the rest."""
        rounds, texts = self._json_rounds, self._json
        for rnd in sorted(self._stale):
            text = json.dumps([[rnd, *key, n] for key, n in sorted(self._counts(rnd))])[1:-1]
            at = bisect_left(rounds, rnd)
            found = at < len(rounds) and rounds[at] == rnd
            if not found:
                rounds.insert(at, rnd)
            texts.put(at, text, replace=found)
        self._stale.clear()
        return texts.view()

    def per_client(self, rnd: int, cids: list[int], direction: str,
                   category: str = "protocol") -> list[int]:
        counts = self._rounds.get(rnd, array("q"))
        out = []
        for c in cids:
            i = self._keys.get((c, direction, category))
            out.append(counts[i] if i is not None and i < len(counts) and counts[i] >= 0
                       else 0)
        return out

    def total(self, direction: str, category: str = "protocol") -> int:
        wanted = [i for i, (_, d, g) in enumerate(self._order)
                  if d == direction and g == category]
        return sum(max(counts[i], 0) for counts in self._rounds.values()
                   for i in wanted if i < len(counts))

    def replied(self, rnd: int, cid: int, reply: Message, n: int) -> None:
        """Client ``cid``'s ``reply`` of ``n`` serialized bytes in round ``rnd``."""
        self.add(rnd, cid, "up", reply.category, n)
        if self.sent is not None:
            self.sent.update((reply.kind, "arrays", key) for key in reply.arrays)
            self.sent.update((reply.kind, "config", key) for key in reply.config)

    def summary(self, wire_format: str = WIRE_FORMAT) -> dict[str, Any]:
        """Run totals: protocol bytes per direction, evaluation and control apart."""
        return {
            "bytes_up_total": self.total("up"),
            "bytes_down_total": self.total("down"),
            "evaluation_bytes_total": self.total("up", "evaluation")
            + self.total("down", "evaluation"),
            "control_bytes_total": self.total("up", "control") + self.total("down", "control"),
            "wire_format": wire_format,
        }


def derive_seeds(seed: int, n: int) -> tuple[list[int], int]:
    """Independent per-client seeds and a server seed from one run seed."""
    children = np.random.SeedSequence([seed, 0x5EED]).spawn(n + 1)
    ints = [int(c.generate_state(1)[0] & 0x7FFFFFFF) for c in children]
    return ints[:n], ints[n]


def _any_torch(learners: list[Any]) -> bool:
    """Whether any learner is a torch model (one that is placed on a device, in a
    precision); scikit-learn models run on the CPU in fp32."""
    return any(callable(getattr(ln, "place", None)) for ln in learners)


@dataclass(frozen=True)
class RunPlan:
    """What every party derives identically from the run configuration."""

    method: Method
    settings: Settings
    specs: list[Any]  # one model spec (or estimator) per client role
    client_seeds: list[int]
    server_seed: int
    device: str = "cpu"  # auto | cpu | cuda | cuda:N, resolved where the learners train
    precision: str = "fp32"
    input_shape: tuple[int, ...] | None = None  # (C, H, W) of image rows, if known

    def learners(self) -> list[Any]:
        """A fresh learner per client role, seeded with its client seed, on its device."""
        learners = make_learners(self.specs, self.client_seeds, self.settings.n_classes,
                                 self.settings.task)
        set_threads(None)  # torch, if a learner loaded it, gets this process's thread count
        self._configure(learners, list(range(len(learners))))
        return learners

    def checked_learners(self) -> list[Any]:
        """:meth:`learners`, after the method's :meth:`~Method.check_models` of one fresh
        learner of each distinct model spec, so that a model it refuses is refused before
        the rest are built (200 trees for DS-FL)."""
        if self.method.checks_models():
            first: dict[str, int] = {}
            for cid, spec in enumerate(self.specs):
                first.setdefault(repr(spec), cid)
            self.method.check_models([self.learner(cid) for cid in first.values()])
        return self.learners()

    def learner(self, cid: int) -> Any:
        learner = make_learners([self.specs[cid]], [self.client_seeds[cid]],
                                self.settings.n_classes, self.settings.task)[0]
        set_threads(None)
        self._configure([learner], [cid])
        return learner

    def devices(self) -> list[str]:
        """Each client role's device (:func:`fedlabels.learners.devices.client_devices`)."""
        if self.device == "cpu":  # no torch import for scikit-learn runs
            return ["cpu"] * len(self.specs)
        from fedlabels.learners.devices import client_devices

        return client_devices(self.device, len(self.specs))

    def _configure(self, learners: list[Any], cids: list[int]) -> None:
        """The image shape for networks that take images, then each learner's device."""
        for learner in learners:
            take = getattr(learner, "use_dataset_shape", None)
            if callable(take) and self.input_shape is not None:
                take(self.input_shape)
        if _any_torch(learners):
            from fedlabels.learners.devices import place_learners

            devices = self.devices()
            place_learners(learners, [devices[c] for c in cids], self.precision)
        elif self.precision != "fp32" and learners:
            applies = "applies to torch models (mlp, cnn, your own module, minilm)"
            if len(cids) == len(self.specs):  # the whole run: refuse what it would not use
                raise FedLabelsError(
                    f"precision {self.precision} {applies}; this run has none: drop "
                    "--precision (precision= in Python) or use a torch model.")
            warnings.warn(FedLabelsWarning(  # one site of a deployment: others may be torch
                f"precision {self.precision} {applies}; client {cids[0]}'s model is not "
                "one, so it computes as in fp32."), stacklevel=user_stacklevel())

    def device_record(self) -> dict[str, Any]:
        """The result's ``device`` entry: devices used, their names, precision (a run with
        no torch model never gets past :meth:`learners` with one other than fp32)."""
        from fedlabels.learners.devices import summary

        return summary(self.devices(), self.precision, self.device)

    def context(self, truth_public: np.ndarray | None = None) -> MethodContext:
        return MethodContext(self.settings, list(self.client_seeds), self.server_seed,
                             truth_public=truth_public)


def plan_run(method: Method | str, *, n_roles: int, n_classes: int, n_features: int,
             rounds: int, period: int, seed: int, models: list[Any],
             options: Mapping[str, Any] | MethodOptions | None = None,
             task: str = "classification",
             target_range: tuple[float, float] | None = None, device: str = "cpu",
             precision: str = "fp32",
             input_shape: tuple[int, ...] | None = None) -> RunPlan:
    """Seeds, validated options and settings of a run with ``n_roles`` client roles.

    ``models`` holds one spec or estimator for all clients, or one per client (a method
    with fewer roles than clients, like ``centralized``, uses the first ones). A
    regression ``task`` (with the federation's ``target_range``) needs a method that
    supports it. ``device``, ``precision`` and the rows' image ``input_shape`` go to the torch
    learners (:meth:`RunPlan.learners`).
    """
    impl = get_method(method) if isinstance(method, str) else method
    if task == "regression" and not impl.capabilities.supports_regression:
        from fedlabels.methods import METHODS

        able = ", ".join(sorted(n for n, m in METHODS.items()
                                if m.capabilities.supports_regression))
        raise FedLabelsError(f"method {impl.name!r} does not support a regression task; use "
                             f"one of {able} (docs/robustness.md, Regression, says why).")
    parsed = impl.parse_options(options)
    models = list(models)
    specs = (models if len(models) >= n_roles else expand_per_client(models, n_roles))[:n_roles]
    client_seeds, server_seed = derive_seeds(seed, n_roles)
    settings = Settings(n_classes=n_classes, n_features=n_features, n_clients=n_roles,
                        rounds=rounds, period=period, options=parsed, task=task,
                        target_range=target_range)
    return RunPlan(impl, settings, specs, client_seeds, server_seed, device, precision,
                   None if input_shape is None else tuple(int(s) for s in input_shape))


def rounds_to_run(plan: RunPlan, learners: list[Any]) -> tuple[int, dict[str, Any] | None]:
    """The rounds a run takes, and the result's ``rounds_run`` note when that is fewer than
    requested: a one-shot method stops once further rounds would change nothing, so the
    per-round figures are not spread over rounds that did nothing."""
    requested = plan.settings.rounds
    used = plan.method.rounds_used(plan.settings, learners)
    if used is None or used >= requested:
        return requested, None
    name = plan.method.name
    note = {"requested": requested, "run": used,
            "reason": f"{name} exchanges all its messages in round {used} and later rounds "
                      "would change nothing, so the run stopped after it"}
    warnings.warn(f"{name} uses {used} round(s); runs {used} of the {requested} requested",
                  FedLabelsWarning, stacklevel=user_stacklevel())
    return used, note


RoundHook = Callable[[RoundRecord], None]


def evaluation_due(rnd: int, rounds: int, eval_every: int) -> bool:
    """Whether round ``rnd`` (0-based) of ``rounds`` ends with an evaluation."""
    return (rnd + 1) % max(1, eval_every) == 0 or rnd == rounds - 1


def run_rounds(server: ServerRole, grid: Grid, meter: CommMeter, *, rounds: int,
               period: int, eval_every: int, iterative: bool, all_cids: list[int],
               on_round: RoundHook | None = None, progress: RoundProgress | None = None,
               records: list[RoundRecord] | None = None,
               catch_interrupt: bool = False,
               draw: Callable[[int], RoundDraw] | None = None
               ) -> tuple[list[RoundRecord], bool]:
    """Rounds ``len(records)`` .. ``rounds - 1``; returns (records, interrupted).

    Each round: ``server.run_round``, then, every ``eval_every`` rounds and at the last, an
    evaluation exchange with the clients the grid still has. ``bytes_up``/``bytes_down`` are
    per client of ``all_cids`` (0 for clients that took no part). With ``catch_interrupt``
    a Ctrl-C (or SIGTERM under :func:`terminate_as_interrupt`) ends the loop and returns the
    rounds completed so far (possibly none, or none evaluated) with ``interrupted=True``.
    With ``draw`` (who takes part in a round: a
    :class:`~fedlabels.runs.participation.ParticipationGrid`'s ``draw``) each record names
    the round's participants, and a round in which no reply can arrive is skipped; a client
    lost before the round (:mod:`fedlabels.runs.lost`) is not a participant, one lost in it
    did not reply.
    """
    records = [] if records is None else records
    interrupted = False
    try:
        for rnd in range(len(records), rounds):
            t0 = time.perf_counter()
            drawn = draw(rnd) if draw is not None else None
            alive = set(grid.client_ids) if drawn is not None else set()  # none lost yet
            if drawn is not None and not drawn.replying:
                server_metrics: Mapping[str, float] = {"skipped": 1.0}  # nothing can arrive
            else:
                server_metrics = server.run_round(rnd, grid)
            accuracies: list[float] | None = None
            scores: dict[str, list[float]] = {}
            if evaluation_due(rnd, rounds, eval_every):
                replies = grid.exchange({c: server.evaluation_message(c)
                                         for c in grid.client_ids}, rnd)
                scores = evaluation_scores(replies)  # accuracy, or RMSE and R²
                accuracies = scores.pop("accuracy", None if scores else [])
                refused = sum(declined(r) for r in replies.values())
                if refused:  # Flower sites whose node config says evaluate=false
                    server_metrics = {**server_metrics, "evaluation_declined": float(refused)}
                    if refused == len(replies):  # no score at all: not evaluated
                        accuracies = None
            record = RoundRecord(
                round=rnd + 1,
                local_steps=(rnd + 1) * period if iterative else None,
                accuracies=accuracies,
                rmse=scores.get("rmse"),
                r2=scores.get("r2"),
                server=dict(server_metrics),
                bytes_up=meter.per_client(rnd, all_cids, "up"),
                bytes_down=meter.per_client(rnd, all_cids, "down"),
                seconds=time.perf_counter() - t0,
                participants=None if drawn is None else [c for c in drawn.selected
                                                         if c in alive],
                replied=None if drawn is None else [c for c in drawn.replying
                                                    if c in alive and c in grid.client_ids],
            )
            records.append(record)
            if on_round is not None:
                on_round(record)
            if progress is not None:
                progress.update(record)
    except KeyboardInterrupt:
        if not catch_interrupt:
            raise
        interrupted = True
    return records, interrupted


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the block runs, so a terminated run takes
    the Ctrl-C path (completed rounds kept, processes stopped); the old handler is restored.
    Outside the main thread signals cannot be handled and nothing changes."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: the caller handles signals
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def model_names(specs: list[Any]) -> list[str]:
    """Each client's model as a result records it: a spec as written, your own network
    by its factory (``module:mynets:make_net(...)``), another estimator by its class."""
    return [s.spec_text() if callable(getattr(s, "spec_text", None)) else
            type(s).__name__ if hasattr(s, "get_params") else str(s) for s in specs]


def reproducible_noise_privacy(from_flag: bool) -> dict[str, str]:
    """The result's ``privacy`` stamp of a run whose secret randomness was reproducible."""
    why = ("the DP noise (and every other secret draw) was reproducible from the run seed "
           "(--insecure-reproducible-noise): anyone who knows the seed, which is in the "
           "result, can remove it" if from_flag else
           "the DP noise (and every other secret draw) came from a reproducible source "
           "(fedlabels.core.randomness.reproducible), not from OS entropy: anyone who knows its "
           "seed can remove it")
    return {"guarantee": "none", "reason": why}


def build_result(plan: RunPlan, server: ServerRole, records: list[RoundRecord],
                 meter: CommMeter, *, dataset: str, seed: int, config: dict[str, Any],
                 federation: dict[str, Any], started: float,
                 wire_format: str = WIRE_FORMAT,
                 extra: dict[str, Any] | None = None,
                 noise_from_flag: bool = False) -> RunResult:
    """The result of a run: records, communication, the method's extras and its options.

    ``extra["privacy"]`` always holds the guarantee (``formal`` / ``conditional`` / ``none``),
    the party it is stated against and the neighbouring relation: declared by the method's
    threat model, refined by the server's ``result_extra()`` (then by ``extra``); its
    ``outside_guarantee`` names the uncovered values the clients sent in this run (all
    declared ones where the meter does not know what was sent). ``extra["threat_model"]``
    is the method's declaration as this run instantiated it (:meth:`ThreatModel.as_run`).
    ``extra["provenance"]`` versions, command line, start and end
    (:mod:`fedlabels.core.provenance`).
    A run made while secret randomness was reproducible is stamped ``guarantee: none``
    (``noise_from_flag``: because of ``--insecure-reproducible-noise``).
    """
    method = plan.method
    server_extra = server.result_extra()
    declared = method.threat_model.privacy(meter.sent)
    if declared["guarantee"] != "none":  # the result also keeps raw-data statistics
        declared = merge_privacy(declared, {"outside_guarantee": recorded_outside(federation)})
    privacy = merge_privacy(declared, server_extra.get("privacy"), (extra or {}).get("privacy"),
                            reproducible_noise_privacy(noise_from_flag) if is_reproducible()
                            else None)
    return RunResult(
        method=method.name,
        dataset=dataset,
        seed=seed,
        config={**config, "options": plan.settings.options.to_dict()},
        federation=federation,
        models=model_names(plan.specs) if method.capabilities.trains_models else [],
        rounds=list(records),
        communication=meter.summary(wire_format),
        wall_seconds=time.perf_counter() - started,
        extra={"threat_model": method.threat_model.as_run(privacy, meter.sent),
               "device": plan.device_record(),
               **({} if method.capabilities.trains_models else
                  {"no_models": method.no_models_note()}),
               **server_extra,
               **(extra or {}), "privacy": privacy,
               "provenance": provenance(started)},
    )


def uses_iterative(learners: list[Any]) -> bool:
    return any(is_iterative(ln) for ln in learners)
