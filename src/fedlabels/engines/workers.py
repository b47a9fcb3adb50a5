"""Client roles in a pool of worker processes: the simulator on every core.

Each worker is forked from the simulator once its client roles are built (and restored
from a checkpoint), so it inherits its share of them and the federation's arrays without
any copying or pickling; its clients stay resident until the run ends. Per exchange only
messages cross, as the wire codec's bytes: the parent encodes, counts and sends them, the
worker decodes, handles and encodes the reply. A worker handles its clients in ascending
order, the workers run side by side, and the replies are collected in client order, so a
run gives the same result as with one process.

Secret randomness under a reproducible source (``--insecure-reproducible-noise``, tests
only) is one stream consumed in client order; there the clients take turns, the stream's
position travelling with each message, so the run still repeats the sequential one bit
for bit (at sequential speed). Under the OS CSPRNG each worker draws its own.

``workers=None`` (the default of ``fedlabels run`` and ``fl.run``) takes
``FEDLABELS_WORKERS`` from the environment, else one worker per core; never more workers
than clients.

The fork happens before any client has trained, with one torch thread per process by
default (:mod:`fedlabels.core.threads`); each worker gets ``threads`` torch threads, cut so
that workers × threads never exceeds the cores, and as many BLAS/OpenMP threads.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.errors import ClientError, FedLabelsError
from fedlabels.core.parent_death import die_with_parent
from fedlabels.core.randomness import current_source, is_reproducible
from fedlabels.core.threads import (
    CRYPTO_ENV_VAR,
    ENV_VAR,
    apply_torch_threads,
    available_cores,
    torch_threads,
)
from fedlabels.engines.client_failure import client_failure
from fedlabels.learners import is_iterative
from fedlabels.method.base import ClientRole
from fedlabels.runs.loop import CommMeter

#: the default number of workers where a run does not set it (unset: one per core)
ENV_WORKERS = "FEDLABELS_WORKERS"


def cuda_initialised() -> bool:
    """Whether this process has initialised CUDA (without importing torch to find out)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_initialized())


def in_process_only(devices: list[str], together: bool, wrapped: bool) -> str | None:
    """Why a run's clients must stay in one process, or ``None``: a forked worker cannot use
    CUDA, clients that train together are one batch, and a grid wrapper watches the roles."""
    if any(d != "cpu" for d in devices):
        return "its torch learners run on a GPU (a forked process cannot use CUDA)"
    if cuda_initialised():
        return ("this process has used CUDA (an earlier GPU run): a process forked from it "
                "cannot train (torch's autograd threads do not survive a fork); start a new "
                "process for parallel CPU runs")
    if together:
        return "its clients train together (batch_clients)"
    if wrapped:
        return "a grid wrapper watches its client roles"
    return None


def resolve_workers(workers: int | None, n_clients: int, one_process: str | None = None) -> int:
    """``workers`` checked and capped by the number of clients; ``None``: the environment's
    ``FEDLABELS_WORKERS``, else one per core. Where ``one_process`` gives a reason, 1, and
    an explicit count above 1 is an error saying why."""
    where = "workers"
    if one_process is not None:
        if workers is not None and workers != 1:
            raise FedLabelsError(f"workers={workers!r}: this run keeps its clients in one "
                                 f"process because {one_process}; use workers=1.")
        return 1
    if workers is None:
        raw = os.environ.get(ENV_WORKERS)
        if raw is None:
            return max(1, min(available_cores(), n_clients))
        where = ENV_WORKERS
        workers = int(raw) if raw.strip().isdigit() else raw  # type: ignore[assignment]
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise FedLabelsError(f"{where} must be an integer >= 1 (1: every client in this "
                             f"process), got {workers!r}.")
    return min(workers, max(1, n_clients))


def threads_per_worker(workers: int) -> int:
    """Torch threads each worker uses: the setting, cut to the worker's share of cores."""
    return max(1, min(torch_threads(), available_cores() // workers))


def assign(sizes: Mapping[int, int], workers: int) -> list[list[int]]:
    """Clients per worker: largest first onto the least loaded worker (by data size)."""
    load = [0] * workers
    shares: list[list[int]] = [[] for _ in range(workers)]
    for cid in sorted(sizes, key=lambda c: (-sizes[c], c)):
        w = min(range(workers), key=lambda i: (load[i], i))
        shares[w].append(cid)
        load[w] += max(1, sizes[cid])
    return [sorted(s) for s in shares]


def crypto_threads_per_worker(workers: int) -> int:
    """Big-integer threads each worker may use (``FEDLABELS_CRYPTO_THREADS`` unset): twice
    its share of the cores, so a worker left with more clients also takes up a core another
    worker has finished with, and never more than twice as many threads as cores in all."""
    cores = available_cores()
    return max(1, min(cores, 2 * cores // workers))


def _serve(conn: Connection, clients: dict[int, ClientRole], threads: int,
           crypto: int, inherited: list[Connection]) -> None:
    """A worker's loop: handle batches of encoded messages, report states, until told to stop
    or until the simulator is gone (its end of the pipe closed, or it died: on Linux the
    worker is killed with it, a SIGKILL of the simulator included)."""
    die_with_parent()
    for end in inherited:  # the simulator's pipe ends, copied by the fork: holding them
        end.close()  # open would keep this worker's own pipe from ever reporting EOF
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the simulator's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.environ[ENV_VAR] = str(threads)
    os.environ.setdefault(CRYPTO_ENV_VAR, str(crypto))
    from threadpoolctl import threadpool_limits  # scikit-learn's: BLAS and OpenMP pools

    threadpool_limits(threads)  # the worker's share of the cores, for numpy's BLAS too
    if "torch" in sys.modules:
        apply_torch_threads()
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the simulator is gone
            return
        command = request[0]
        if command == "stop":
            return
        if command == "handle":
            _, batch, position, rnd = request
            for cid, down in batch:
                start, cpu = time.time(), time.thread_time()
                try:
                    if position is not None:
                        current_source().setstate(position)  # type: ignore[union-attr]
                    up = encode_message(clients[cid].handle(decode_message(down)))
                    after = None if position is None else \
                        current_source().getstate()  # type: ignore[union-attr]
                    conn.send(("reply", cid, up, after,
                               (start, time.time(), time.thread_time() - cpu)))
                except BaseException as exc:  # raised again by the simulator
                    failure = client_failure(exc, cid, rnd, decode_message(down).kind,
                                             clients[cid])
                    if isinstance(failure, ClientError):  # its cause travels too, a bug's
                        if failure.internal:  # with the worker's traceback
                            exc.add_note("".join(traceback.format_exception(exc)).rstrip())
                        failure.original = failure.__cause__ = _portable(exc)
                    conn.send(("error", cid, _portable(failure), None,
                               (start, time.time(), time.thread_time() - cpu)))
                    break
            conn.send(("end",))
        else:
            try:
                report = _report(command, clients, request[1])
            except BaseException as exc:  # raised again by the simulator
                conn.send(("failed", _portable(exc)))
            else:
                _send_out_of_band(conn, command, report)


def _report(command: str, clients: dict[int, ClientRole], cids: list[int]) -> dict[int, Any]:
    """``states``: each client's state; ``final``: its state, its fitted model where the
    state does not hold it (a refit learner), its stand-in model, and its predictions and
    class probabilities on the test set (classification)."""
    if command == "states":
        return {cid: clients[cid].state_dict() for cid in cids}
    out = {}
    for cid in cids:
        role = clients[cid]
        role.model()  # a refit learner restored from a state fits here, not there
        learner = None if is_iterative(role.learner) else role.learner
        # the clinical metrics' predictions and probabilities
        tested = None if role.settings.task == "regression" else role.test_outputs()
        out[cid] = (role.state_dict(), learner, role._stand_in, tested)
    return out


def _send_out_of_band(conn: Connection, command: str, obj: Any) -> None:
    """Send ``obj`` with its arrays' memory written to the pipe as it is (pickle protocol
    5's out-of-band buffers): client states are most of a checkpoint's bytes (hundreds of
    MB for 100 clients of the paper's MLP), and pickling them in-band copied them twice
    more. A descriptor ``(command, pickle length, buffer sizes)``, then the pickle, then
    each buffer: :func:`_recv_out_of_band` reads them."""
    import pickle

    buffers: list[pickle.PickleBuffer] = []
    header = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    conn.send((command, len(header), [r.nbytes for r in raws]))
    conn.send_bytes(header)
    for raw in raws:
        conn.send_bytes(raw)


def _recv_out_of_band(conn: Connection, sizes: list[int]) -> Any:
    """The object :func:`_send_out_of_band` sent, after its descriptor: each buffer read
    straight into writable memory of its own, which the unpickled arrays then use."""
    import pickle

    import numpy as np

    header = conn.recv_bytes()
    buffers = []
    for size in sizes:
        buffer = np.empty(size, dtype=np.uint8)
        if size:
            conn.recv_bytes_into(buffer)
        else:
            conn.recv_bytes()
        buffers.append(buffer)
    return pickle.loads(header, buffers=buffers)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError that says what it was."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # any exception type may fail to pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")


class WorkerGrid:
    """A :class:`~fedlabels.method.base.Grid` whose clients live in worker processes.

    The pool starts at the first exchange (after the roles were built and restored);
    :meth:`states` gathers the workers' client states (for a checkpoint), :meth:`finish`
    copies states and fitted models into the simulator's roles and stops the pool.
    """

    #: keep :attr:`timeline` (benchmarks; off by default: it grows with every exchange)
    record_timeline = False

    def __init__(self, clients: Mapping[int, ClientRole], meter: CommMeter, workers: int,
                 sizes: Mapping[int, int]) -> None:
        self.clients = dict(clients)
        self.meter = meter
        self.workers = workers
        self.shares = [s for s in assign(sizes, workers) if s]
        self.home = {cid: w for w, share in enumerate(self.shares) for cid in share}
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        #: set by the simulator once the run was interrupted (a dead worker is then said to
        #: have been stopped by the same signal, not to have crashed)
        self.interrupted = False
        #: each client's final test predictions and class probabilities (from finish)
        self.test_outputs: dict[int, Any] = {}
        #: with :attr:`record_timeline`, the wall-clock times (``time.time()``) of each
        #: exchange: ``dispatch`` and ``collected`` in the simulator, ``handle`` (start,
        #: end, received; ``cpu``: the worker's CPU seconds on it) per message
        self.timeline: list[dict[str, Any]] = []

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.clients)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids (empty before the first exchange)."""
        return [p.pid for p in self.procs]

    def start(self) -> None:
        if self.procs:
            return
        if "fork" not in mp.get_all_start_methods():
            raise FedLabelsError("workers > 1 needs the fork start method (Linux); run with "
                                 "--workers 1 on this platform.")
        ctx = mp.get_context("fork")
        threads = threads_per_worker(len(self.shares))
        crypto = crypto_threads_per_worker(len(self.shares))
        for share in self.shares:
            parent, child = ctx.Pipe()
            mine = {cid: self.clients[cid] for cid in share}
            proc = ctx.Process(target=_serve, args=(child, mine, threads, crypto,
                                                    [*self.conns, parent]),
                               daemon=True,
                               name="fedlabels-worker-" + "-".join(map(str, share)))
            proc.start()
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        self.start()
        encoded: dict[int, bytes] = {}
        # a broadcast (one Message for every client) is encoded once and its bytes shared:
        # pickle sends a worker one copy of them for all its clients
        by_message: dict[int, bytes] = {}
        for cid in sorted(messages):
            msg = messages[cid]
            data = by_message.get(id(msg))
            if data is None:
                data = by_message[id(msg)] = encode_message(msg)
            encoded[cid] = data
            self.meter.add(rnd, cid, "down", msg.category, len(data))
        if is_reproducible():  # one stream, drawn in client order: clients take turns
            ups: dict[int, bytes] = {}
            for cid in sorted(encoded):
                ups.update(self._run({self.home[cid]: [(cid, encoded[cid])]}, rnd))
        else:
            batches: dict[int, list[tuple[int, bytes]]] = {}
            for cid in sorted(encoded):
                batches.setdefault(self.home[cid], []).append((cid, encoded[cid]))
            ups = self._run(batches, rnd)
        replies = {}
        for cid in sorted(ups):
            reply = decode_message(ups[cid])
            self.meter.replied(rnd, cid, reply, len(ups[cid]))
            replies[cid] = reply
        return replies

    def _run(self, batches: dict[int, list[tuple[int, bytes]]], rnd: int) -> dict[int, bytes]:
        """Send each worker its batch, then read the replies of all workers as they come.

        Reading one worker to its end before the next would stall the others: a reply
        larger than a pipe holds (model weights, ciphertexts) blocks its worker in ``send``
        until the simulator reads it, so that worker could not start its next client.
        """
        position = current_source().getstate() if is_reproducible() else None  # type: ignore[union-attr]
        self._mark({"event": "dispatch", "round": rnd, "time": time.time()})
        for w, batch in batches.items():
            self._send(w, ("handle", batch, position, rnd), batch[0][0], rnd)
        ups: dict[int, bytes] = {}
        errors: dict[int, BaseException] = {}
        open_ = {self.conns[w]: w for w in batches}
        while open_:
            for conn in wait(list(open_)):
                w = open_[conn]  # type: ignore[index]
                answer = self._recv(w, [c for c, _ in batches[w]
                                        if c not in ups and c not in errors], rnd)
                if answer[0] == "end":
                    del open_[conn]  # type: ignore[arg-type]
                    continue
                _, cid, payload, after, (start, end, cpu) = answer
                self._mark({"event": "handle", "round": rnd, "worker": w, "client": cid,
                            "start": start, "end": end, "cpu": cpu, "received": time.time()})
                if answer[0] == "error":
                    errors[cid] = payload
                else:
                    ups[cid] = payload
                    if after is not None:
                        current_source().setstate(after)  # type: ignore[union-attr]
        self._mark({"event": "collected", "round": rnd, "time": time.time()})
        if errors:  # as in one process: the first failing client's error
            raise errors[min(errors)]
        return ups

    def _mark(self, event: dict[str, Any]) -> None:
        if self.record_timeline:
            self.timeline.append(event)

    def _send(self, w: int, request: tuple[Any, ...], cid: int, rnd: int) -> None:
        try:
            self.conns[w].send(request)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._died(w, cid, rnd)

    def _recv(self, w: int, pending: list[int], rnd: int) -> Any:
        try:
            return self.conns[w].recv()
        except (EOFError, ConnectionResetError):
            self._died(w, pending[0] if pending else self.shares[w][0], rnd)

    def _died(self, w: int, cid: int, rnd: int) -> NoReturn:
        proc = self.procs[w]
        proc.join(timeout=5)
        code = proc.exitcode
        how = (f"killed by signal {-code}" if code is not None and code < 0
               else f"exit code {code}")
        self.close()
        if self.interrupted and code in (-signal.SIGTERM, -signal.SIGINT):
            # a signal to the whole process group (`timeout`, a service manager) interrupted
            # the run and stopped its workers as well: not a crash
            raise FedLabelsError(
                f"the run was interrupted by a signal that stopped its worker processes too "
                f"(client {cid}'s worker: {how}), so their last states are gone; the "
                "checkpoint of the last round written is kept: continue the run with "
                "`fedlabels resume RESULT.json`.")
        where = f"in round {rnd + 1}" if rnd >= 0 else "between rounds"
        raise FedLabelsError(
            f"client {cid}'s worker process (pid {proc.pid}, clients "
            f"{', '.join(map(str, self.shares[w]))}) died {where} ({how}); the run stopped. "
            "Continue it from its checkpoint with `fedlabels resume RESULT.json` (runs of "
            "`fedlabels run` keep one), or rerun it with --workers 1.")

    def _ask(self, command: str) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for w, share in enumerate(self.shares):
            self._send(w, (command, share), share[0], -1)
        for w, share in enumerate(self.shares):
            while (answer := self._recv(w, share, -1))[0] not in (command, "failed"):
                pass  # what an interrupted exchange left in the pipe
            if answer[0] == "failed":
                self.close()
                raise answer[1]
            try:
                out.update(_recv_out_of_band(self.conns[w], answer[2]))
            except (EOFError, ConnectionResetError):
                self._died(w, share[0], -1)
        return out

    def states(self) -> dict[int, Any] | None:
        """Every client's current state from the workers (for a checkpoint; the simulator's
        roles are not updated); ``None`` before they start: the roles hold the states."""
        return self._ask("states") if self.procs else None

    def finish(self) -> None:
        """Bring the clients' final states and models home, then stop the workers."""
        if not self.procs:
            return
        try:
            for cid, (state, learner, stand_in, tested) in self._ask("final").items():
                role = self.clients[cid]
                role.load_state_dict(state)
                if learner is not None:  # a refit learner, fitted in the worker
                    role.learner = learner
                    role._stale = False
                role._stand_in = stand_in
                if tested is not None:
                    self.test_outputs[cid] = tested
        finally:
            self.close()

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        for conn in self.conns:
            with contextlib.suppress(OSError):  # a worker already gone
                conn.send(("stop",))
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []
