"""The simulator's clients training together on one accelerator (``batch_clients``).

:class:`TogetherGrid` delivers a round's messages to every client at once, each handler in
its own thread. A torch learner's ``train_steps`` then does not train: it hands its call to
a :class:`Rendezvous` and waits; so do its ``distill_steps``, its DP-SGD steps and its
``predict_proba``. When every client of the exchange is either waiting there or done, the
collected calls run as one vectorised step per group of compatible learners
(:func:`fedlabels.learners.batched.train_together`,
:func:`~fedlabels.learners.batched_distill.distill_together`,
:func:`~fedlabels.learners.batched_dpsgd.dpsgd_together`,
:func:`~fedlabels.learners.batched.predict_together`) and the handlers continue. Messages
are encoded, decoded and counted in the main thread in client order, so the bytes and the
replies are those of the sequential grid; the trained weights equal the sequential ones up
to floating-point rounding.

Used where it is safe: every client's learner is a torch classifier that can train batched
(:func:`fedlabels.learners.batched.batchable`) and no reproducible secret randomness is
installed (its one stream would be drawn from in thread order).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.user_frames import carry_caller
from fedlabels.engines.client_failure import client_failure
from fedlabels.learners.batch_jobs import DistillJob, DPSGDJob
from fedlabels.learners.batched import PredictJob, TrainJob, predict_together, train_together
from fedlabels.learners.batched_distill import distill_together
from fedlabels.learners.batched_dpsgd import dpsgd_together
from fedlabels.learners.resident_rows import ResidentRows

#: a client's call handed to the rendezvous
Job = TrainJob | DistillJob | DPSGDJob | PredictJob


class Rendezvous:
    """Collects the ``train_steps``, ``distill_steps``, DP-SGD and ``predict_proba`` calls of
    ``n`` client threads and runs them together."""

    def __init__(self, n: int, rows: ResidentRows | None = None,
                 graphs: bool = False, strict: bool = False) -> None:
        self.active = n
        self.rows = rows
        self.strict = strict  # batch_clients=on: a learner that cannot train batched fails
        self.graphs = graphs  # groups replay their training or distillation step as a graph
        self.graphed_calls = 0  # how many did
        # calls run in client order, not in the order the threads arrived (the same stacking
        # every round, so the rows cache hits): by the position of the client thread that
        # submits them (:meth:`enter`)
        self.positions: dict[int, int] = {}
        self.pending: list[tuple[Job, dict[str, Any]]] = []
        self.cond = threading.Condition()

    def enter(self, position: int) -> None:
        """The calling thread is the client at ``position``: every call it submits, for any
        of its learners (DP-FedCT's separate labeller too), runs in that place."""
        with self.cond:
            self.positions[threading.get_ident()] = position

    def submit(self, job: Job) -> None:
        """Wait until ``job`` has run with the others' calls (or raise their error); a
        :class:`PredictJob` then holds its probabilities in ``out``."""
        slot: dict[str, Any] = {}
        with self.cond:
            slot["at"] = self.positions.get(threading.get_ident(), 0)
            self.pending.append((job, slot))
            self._maybe_run()
            while "done" not in slot:
                self.cond.wait()
        if "error" in slot:
            raise slot["error"]

    def finished(self) -> None:
        """A client thread's handler returned (or failed): it will submit nothing more."""
        with self.cond:
            self.active -= 1
            self._maybe_run()

    def _maybe_run(self) -> None:
        if not self.pending or len(self.pending) < self.active:
            return
        batch, self.pending = self.pending, []
        batch.sort(key=lambda item: item[1]["at"])
        error: BaseException | None = None
        try:
            self.graphed_calls += train_together(
                [job for job, _ in batch if isinstance(job, TrainJob)], self.rows, self.graphs,
                self.strict)
            self.graphed_calls += distill_together(
                [job for job, _ in batch if isinstance(job, DistillJob)], self.graphs)
            dpsgd_together([job for job, _ in batch if isinstance(job, DPSGDJob)], self.rows)
            predict_together([job for job, _ in batch if isinstance(job, PredictJob)],
                             self.rows)
        except BaseException as exc:
            error = exc
        for _, slot in batch:
            if error is not None:
                slot["error"] = error
            slot["done"] = True
        self.cond.notify_all()


class TogetherGrid:
    """An in-process grid whose clients' torch learners train together (module docstring)."""

    def __init__(self, inner: Any, graphs: bool = False, strict: bool = False) -> None:
        self.inner = inner  # an InProcessGrid: its clients and meter
        self.graphs = graphs  # cuda_graphs=on (fedlabels.learners.step_graphs)
        # batch_clients=on: a network seen only once built (your own module) that cannot
        # train batched (batch normalisation, dropout) stops the run instead of training alone
        self.strict = strict
        self.graphed_calls = 0  # group calls (training, distillation) replayed as a graph
        # the run's arrays (U, private rows, the test set) stay on the device across rounds:
        # the run never writes them (fedlabels.learners.resident_rows)
        self.rows = ResidentRows()

    @property
    def client_ids(self) -> list[int]:
        return list(self.inner.client_ids)

    @property
    def clients(self) -> dict[int, Any]:
        return dict(self.inner.clients)

    @property
    def meter(self) -> Any:
        return self.inner.meter

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        cids = sorted(messages)
        decoded = {}
        for cid in cids:
            down = encode_message(messages[cid])
            self.inner.meter.add(rnd, cid, "down", messages[cid].category, len(down))
            decoded[cid] = decode_message(down)
        rendezvous = Rendezvous(len(cids), self.rows, self.graphs, self.strict)
        results: dict[int, Any] = {}

        def work(cid: int, position: int) -> None:
            rendezvous.enter(position)
            learner = self.inner.clients[cid].learner
            learner._rendezvous = rendezvous
            try:
                results[cid] = self.inner.clients[cid].handle(decoded[cid])
            except BaseException as exc:
                results[cid] = client_failure(exc, cid, rnd, decoded[cid].kind,
                                              self.inner.clients[cid])
            finally:
                learner.__dict__.pop("_rendezvous", None)
                rendezvous.finished()
                after_turn = getattr(self.inner, "after_turn", None)
                if callable(after_turn):  # weights resting off the device move out
                    after_turn(cid)

        threads = [threading.Thread(target=carry_caller(work), args=(cid, k), daemon=True)
                   for k, cid in enumerate(cids)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.graphed_calls += rendezvous.graphed_calls
        replies = {}
        for cid in cids:  # the first failure in client order, as the sequential grid raises
            reply = results[cid]
            if isinstance(reply, BaseException):
                raise reply
            up = encode_message(reply)
            self.inner.meter.replied(rnd, cid, reply, len(up))
            replies[cid] = decode_message(up)
        return replies
