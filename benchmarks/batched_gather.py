"""A step of many clients trained together: minibatches gathered on the device against
built client by client, side by side in one process.

``device`` (today's ``fedlabels.learners.batched``): each group's rows are placed on the
device once per ``train_together`` call and every step is one index tensor and one gather.
``per-client`` (what it replaced, kept here to measure it): per step and client, the rows
indexed on the host, concatenated with the pseudo-labelled rows, copied to the device,
through the learner's ``_inputs``, padded, then stacked. Both give the same minibatches
(``tests/test_batched_minibatches.py``), so the same weights; the check asserts it.

Clients: 64 private rows each and 64 pseudo-labelled rows of one shared U (by
``aux_index``), Fashion-MNIST-shaped synthetic rows (784 features), batch size 64, as in
the device check's "100 clients per step" row.

    python benchmarks/batched_gather.py --device cpu --clients 100 --model mlp
    python benchmarks/batched_gather.py --device cuda --clients 100 --model mlp,cnn
    python benchmarks/batched_gather.py --dry-run                  # tiny, on the CPU

From another script (the device check): ``gather_comparison(100, "cuda")``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from device_check import timed  # benchmarks/ is on sys.path: run as a script or by device_check
from fedlabels.learners import batched, build_learner, parse_model_spec
from fedlabels.learners.batch_jobs import TrainJob

MODELS = {"mlp": "mlp(hidden=512-512)", "cnn": "cnn(arch=small)"}


class PerClientBatches:
    """The minibatches as they were built before: client by client, on the host."""

    def __init__(self, jobs: Sequence[TrainJob], device: torch.device,
                 resident: object = None, steps: object = None) -> None:
        # no rows kept, nothing planned: built client by client every step
        self.jobs, self.device = list(jobs), device
        self.data = []
        for job in jobs:
            ln, n_aux = job.learner, 0 if job.y_aux is None else len(job.y_aux)
            self.data.append((
                torch.from_numpy(np.ascontiguousarray(job.X, dtype=np.float32)),
                torch.from_numpy(np.asarray(job.y, dtype=np.int64)),
                ln._cursor(0, len(job.y)), ln._cursor(1, n_aux), n_aux,
                None if not n_aux else torch.from_numpy(
                    np.ascontiguousarray(job.X_aux, dtype=np.float32)),
                None if not n_aux else torch.from_numpy(np.asarray(job.y_aux, np.int64)),
                None if job.aux_index is None else torch.from_numpy(job.aux_index)))

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
        xs, ys, ws = [], [], []
        for job, (X, y, main, aux, n_aux, Xa, ya, rows) in zip(self.jobs, self.data,
                                                               strict=True):
            idx = torch.from_numpy(main.next())
            xb, yb = X[idx], y[idx]
            if n_aux:
                aidx = torch.from_numpy(aux.next())
                xa = Xa[aidx] if rows is None else Xa[rows[aidx]]
                xb, yb = torch.cat([xb, xa]), torch.cat([yb, ya[aidx]])
            xs.append(job.learner._inputs(xb.to(self.device), True))
            ys.append(yb)
            ws.append(torch.ones(len(yb)) / len(yb))
        width = max(len(y) for y in ys)
        lens = [len(y) for y in ys]
        x = torch.stack([torch.cat([x, x.new_zeros((width - len(x), *x.shape[1:]))])
                         for x in xs])
        y = torch.stack([torch.cat([y, y.new_zeros(width - len(y))]) for y in ys])
        w = torch.stack([torch.cat([w, w.new_zeros(width - len(w))]) for w in ws])
        return x, y.to(self.device), w.to(self.device), lens


def _jobs(n_clients: int, model: str, device: str, steps: int) -> list[TrainJob]:
    rng = np.random.default_rng(0)
    U = rng.random((2000, 784), dtype=np.float32)
    (spec,) = parse_model_spec(model)
    jobs = []
    for i in range(n_clients):
        ln = build_learner(spec, n_classes=10, random_state=i)
        ln.place(device)
        X = rng.random((64, 784), dtype=np.float32)
        index = np.sort(rng.choice(len(U), 64, replace=False))
        jobs.append(TrainJob(ln, X, rng.integers(0, 10, 64), steps, U,
                             rng.integers(0, 10, 64), aux_index=index))
    return jobs


@contextmanager
def _gathering(gather: str) -> Iterator[None]:
    """``train_together`` with its minibatches gathered on the device ("device", today's
    code) or built client by client ("per-client")."""
    saved = batched._Batches, batched.stacked_inputs
    if gather == "per-client":
        batched._Batches = PerClientBatches  # type: ignore[misc, assignment]
        batched.stacked_inputs = lambda learners, x, lens: x
    try:
        yield
    finally:
        batched._Batches, batched.stacked_inputs = saved  # type: ignore[misc]


def gather_comparison(n_clients: int, device: str, model: str = "mlp", steps: int = 5,
                      repeats: int = 5) -> dict[str, Any]:
    """Per-client against device gathering on ``device``, interleaved call by call (so a
    change of the machine's load hits both): milliseconds per step, median of ``repeats``
    calls of ``steps`` steps, of the whole batched step and of building its minibatches
    alone; raises if the two end with different weights."""
    spec = MODELS.get(model, model)
    kinds = ("per-client", "device")
    jobs = {g: _jobs(n_clients, spec, device, steps) for g in kinds}
    whole: dict[str, list[float]] = {g: [] for g in kinds}
    build: dict[str, list[float]] = {g: [] for g in kinds}
    for r in range(repeats + 1):  # the first call builds the networks and warms up
        for g in kinds:
            with _gathering(g):
                seconds = timed(lambda js=jobs[g]: batched.train_together(js), device)
                if r:
                    whole[g].append(1e3 * seconds / steps)
                    build[g].append(1e3 * timed(lambda js=jobs[g]: _build(js, device, steps),
                                                 device) / steps)
    for a, b in zip(*(jobs[g] for g in kinds), strict=True):
        if not np.array_equal(a.learner.get_weights(), b.learner.get_weights()):
            raise AssertionError("gathering on the device changed the clients' weights")
    med = {g: (statistics.median(whole[g]), statistics.median(build[g])) for g in kinds}
    return {"clients": n_clients, "device": device, "model": spec, "steps": steps,
            "repeats": repeats, "per_client_step_ms": round(med["per-client"][0], 2),
            "device_step_ms": round(med["device"][0], 2),
            "per_client_build_ms": round(med["per-client"][1], 2),
            "device_build_ms": round(med["device"][1], 2),
            "step_speedup": round(med["per-client"][0] / med["device"][0], 3),
            "build_speedup": round(med["per-client"][1] / med["device"][1], 3)}


def _build(jobs: list[TrainJob], device: str, steps: int) -> None:
    """The minibatches of one call, without training (the learners' cursors move on, the
    same way under both kinds of gathering)."""
    learners = [j.learner for j in jobs]
    batches = batched._Batches(jobs, torch.device(device))
    for _ in range(steps):
        x, _y, _w, lens = batches.next()
        batched.stacked_inputs(learners, x, lens)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--model", default="mlp", help="mlp, cnn or a model spec; commas")
    parser.add_argument("--steps", type=int, default=5, help="steps per train_together call")
    parser.add_argument("--repeats", type=int, default=5, help="calls timed (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, on the CPU")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.dry_run:
        args.device, args.clients, args.steps, args.repeats = "cpu", 3, 2, 1
    for model in args.model.split(","):
        print(gather_comparison(args.clients, args.device, model, args.steps, args.repeats),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
