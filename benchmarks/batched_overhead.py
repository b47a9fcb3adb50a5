"""Host overhead of one batched training call, this version against another, side by side.

100 clients of a tiny MLP (16-8-8-10, 64 rows, one step a call; ``--rows fedct``: each
client's own 64 private rows plus 64 of a shared U by index, as in a FedCT round): the
arithmetic is negligible, so a call's time is the host's per-call work (stacking, the
minibatch index, writing weights and Adam moments back), which on a GPU is launches and
Python (``--model`` and ``--features`` time another network, such as the paper's MLP,
where the arithmetic counts too). The two versions alternate call by call in one process (a
change of the machine's speed hits both), each with its own identical clients; the weights
must come out equal (within ``--max-gap``, for a version that computes otherwise).

    git show REV:src/fedlabels/learners/batched.py > /tmp/batched_rev.py
    python benchmarks/batched_overhead.py --baseline /tmp/batched_rev.py
    python benchmarks/batched_overhead.py --baseline src/fedlabels/learners/batched.py \\
        --clients 4 --calls 3                 # the current version against itself (a check)
    python benchmarks/batched_overhead.py --baseline /tmp/batched_rev.py --clients 5 \\
        --steps 50 --rows fedct --model 'mlp(hidden=512-512)' --features 784 --calls 10 \\
        --max-gap 1e-4                        # a paper-scale FedCT round's group call
    python benchmarks/batched_overhead.py --baseline autograd ...   # the step before 2026-11-28
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import batched, build_learner, parse_model_spec
from fedlabels.learners.batch_jobs import TrainJob
from fedlabels.learners.devices import client_devices
from fedlabels.learners.resident_rows import ResidentRows


def load_version(path: str) -> ModuleType:
    """Another version of ``fedlabels/learners/batched.py``, as a module of its own;
    ``autograd``: this version with the MLP's step through autograd and Adam's ``foreach``
    kernels on CUDA (:func:`autograd_version`)."""
    if path == AUTOGRAD:
        return autograd_version()
    spec = importlib.util.spec_from_file_location("batched_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: ``--baseline`` for this version's step as it was before 2026-11-28
AUTOGRAD = "autograd"


def autograd_version() -> ModuleType:
    """A copy of this version's ``batched`` whose MLP step goes through autograd and whose
    stacked Adam is unfused (``foreach`` on CUDA): the step as it was before its gradients
    were written by hand, to time against it on one machine."""
    module = load_version(batched.__file__)
    module.GRADIENTS_BY_HAND = False
    module.FUSED_ADAM_DEVICES = ()
    return module


def compare(baseline: ModuleType, clients: int = 100, calls: int = 40,
            rows_kind: str = "shared", steps: int = 1, model: str = "mlp(hidden=8-8)",
            features: int = 16, device: str = "cpu") -> dict[str, Any]:
    """Medians (ms per call) of both versions, interleaved, and the largest weight gap.
    ``rows_kind``: every client trains on one array (``shared``), or, as in a FedCT round,
    each on its own private rows plus 64 rows of a shared U by index (``fedct``); ``steps``
    a call (a FedCT round's b: the minibatch plan is drawn for all of them); ``model`` and
    ``features``: the clients' network and input width (the paper's MLP on Fashion-MNIST:
    ``mlp(hidden=512-512)``, 784, where the arithmetic counts too); ``device``: where the
    clients train (a call on CUDA is timed to its last kernel)."""
    torch.set_num_threads(1)
    (spec,) = parse_model_spec(model)
    rng = np.random.default_rng(0)
    X = rng.random((64 * clients, features), dtype=np.float32)
    y = rng.integers(0, 10, 64 * clients)
    U = rng.random((2000, features), dtype=np.float32)
    picked = [np.sort(rng.choice(len(U), 64, replace=False)) for _ in range(clients)]
    labels = [rng.integers(0, 10, 64) for _ in range(clients)]
    versions = {"baseline": baseline, "current": batched}
    models = {k: [build_learner(spec, n_classes=10, random_state=i) for i in range(clients)]
              for k in versions}
    for ln in (ln for group in models.values() for ln in group):
        ln.place(device)
    cuda = torch.device(device).type == "cuda"
    rows = {k: ResidentRows() for k in versions}

    def jobs(k: str) -> list[TrainJob]:
        if rows_kind == "shared":
            return [TrainJob(ln, X[:64], y[:64], steps, X[:64], y[:64]) for ln in models[k]]
        return [TrainJob(ln, X[64 * i : 64 * (i + 1)], y[64 * i : 64 * (i + 1)], steps, U,
                         labels[i], aux_index=picked[i]) for i, ln in enumerate(models[k])]

    def call(k: str) -> None:
        versions[k].train_together(jobs(k), rows[k])
        if cuda:
            torch.cuda.synchronize(device)

    for k in versions:  # build the networks, warm up
        call(k)
        call(k)
    times: dict[str, list[float]] = {k: [] for k in versions}
    for _ in range(calls):
        for k in versions:
            start = time.perf_counter()
            call(k)
            times[k].append(time.perf_counter() - start)
    gap = max(float(np.abs(a.get_weights() - b.get_weights()).max())
              for a, b in zip(models["baseline"], models["current"], strict=True))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"device": device, "clients": clients, "calls": calls, "rows": rows_kind,
            "steps": steps,
            "baseline_ms": round(med["baseline"], 2),
            "current_ms": round(med["current"], 2),
            "ratio": round(med["baseline"] / med["current"], 3),
            "paired_ratio": round(statistics.median(
                b / c for b, c in zip(times["baseline"], times["current"], strict=True)), 3),
            "max_weight_gap": gap}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, metavar="PATH",
                        help="another version's fedlabels/learners/batched.py, or "
                             f"'{AUTOGRAD}': this one with the MLP's step through autograd "
                             "and Adam unfused (as before 2026-11-28)")
    parser.add_argument("--device", default="cpu",
                        help="where the clients train (default cpu; cuda on a GPU)")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--rows", choices=("shared", "fedct"), default="shared",
                        help="one array for every client (shared), or each client's own "
                             "private rows plus U by index, as in a FedCT round (fedct)")
    parser.add_argument("--steps", type=int, default=1, help="steps a call (default 1)")
    parser.add_argument("--model", default="mlp(hidden=8-8)",
                        help="the clients' model spec (default mlp(hidden=8-8))")
    parser.add_argument("--features", type=int, default=16,
                        help="input width (default 16; Fashion-MNIST's is 784)")
    parser.add_argument("--max-gap", type=float, default=0.0, metavar="GAP",
                        help="largest weight difference of the two versions' clients that "
                             "passes (default 0: the same arithmetic, bit for bit; a "
                             "version that computes otherwise rounds otherwise)")
    args = parser.parse_args(argv)
    if args.baseline != AUTOGRAD and not Path(args.baseline).is_file():
        parser.error(f"--baseline {args.baseline}: no such file (or '{AUTOGRAD}')")
    for name in ("clients", "calls", "steps", "features"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if not args.max_gap >= 0:  # NaN too
        parser.error(f"--max-gap must be a number >= 0, got {args.max_gap}")
    try:  # a device this machine lacks, a model spec not one torch classifier: one line
        (device,) = client_devices(args.device, 1)
        specs = parse_model_spec(args.model)
        if len(specs) != 1 or not batched.batchable(
                build_learner(specs[0], n_classes=10, random_state=0)):
            raise FedLabelsError(f"--model {args.model!r}: give one torch classifier that "
                                 "trains together (mlp(...), cnn(...), module:...)")
    except FedLabelsError as exc:
        parser.error(str(exc))
    figures = compare(load_version(args.baseline), args.clients, args.calls, args.rows,
                      args.steps, args.model, args.features, device)
    print(figures)
    if not figures["max_weight_gap"] <= args.max_gap:
        print(f"the two versions' weights differ by {figures['max_weight_gap']:.3g}, more "
              f"than --max-gap {args.max_gap:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
