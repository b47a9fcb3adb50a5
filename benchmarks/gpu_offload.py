"""One FedCT round of many clients on one device, weights resident against moved out.

Times the second round of a FedCT run (the first builds the networks) with ``offload=never``
(every client's weights and Adam moments stay on the device) and ``offload=always`` (each
client's state moves in for its turn and out afterwards, through pinned host memory), on
the same device in the same process, and reports each mode's peak GPU memory. Both runs
give the same result (the moves are exact copies); the check asserts it.

    python benchmarks/gpu_offload.py --device cuda --clients 100        # on the GPU machine
    python benchmarks/gpu_offload.py --device cuda --clients 100 --batch-clients on
    python benchmarks/gpu_offload.py --dry-run                           # tiny, on the CPU

From another script (the device check): ``offload_comparison(100, "cuda")`` returns the
figures as a dict. Data: synthetic 28x28 images of Fashion-MNIST's shape (the arithmetic is
the same; nothing to carry).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import torch

import fedlabels as fl


def federation(n_clients: int, per_client: int, unlabeled: int, seed: int = 0) -> Any:
    """Synthetic Fashion-MNIST-shaped data: ``n_clients`` clients of ``per_client`` rows."""
    rng = np.random.default_rng(seed)
    n = unlabeled + n_clients * per_client + 500
    y = rng.integers(0, 10, n)
    X = (rng.random((n, 784), dtype=np.float32) * 0.5 + y[:, None] / 20).astype(np.float32)
    return fl.make_federation(X, y, clients=n_clients, unlabeled=unlabeled,
                              private=n_clients * per_client, test=500, scale="none",
                              seed=seed, name="fashion-shaped")


def round_seconds(fed: Any, device: str, offload: str, model: str, period: int,
                  batch_clients: str) -> dict[str, Any]:
    """Seconds of the second round, the run's peak GPU memory (above what was allocated
    before it: an earlier run's tensors, freed only by a collection, would count otherwise)
    and its final weights."""
    import gc

    cuda = device.startswith("cuda")
    base = 0
    if cuda:
        gc.collect()  # the previous run's networks, held in reference cycles
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = int(torch.cuda.memory_allocated(device))
    stamps: list[float] = []

    def stamp(_record: Any) -> None:
        if cuda:
            torch.cuda.synchronize(device)
        stamps.append(time.perf_counter())

    result = fl.run("fedct", fed, model=model, rounds=2, period=period, seed=0,
                    progress=False, threads=1, workers=1, device=device, eval_every=2,
                    offload=offload, batch_clients=batch_clients, on_round=stamp)
    return {"seconds": stamps[1] - stamps[0],
            "peak_gpu_bytes": int(torch.cuda.max_memory_allocated(device)) - base if cuda
            else None,
            "offloaded_clients": len(result.extra["device"]["offload"]["offloaded_clients"]),
            "weights": [m.get_weights() for m in result.client_models]}


def offload_comparison(n_clients: int, device: str, *, model: str = "mlp(hidden=512-512)",
                       per_client: int = 500, unlabeled: int = 10_000, period: int = 50,
                       batch_clients: str = "off") -> dict[str, Any]:
    """One FedCT round of ``n_clients`` on ``device`` with ``offload`` never and always:
    seconds, peak GPU memory, their ratio; raises if the two runs' weights differ."""
    fed = federation(n_clients, per_client, unlabeled)
    runs = {mode: round_seconds(fed, device, mode, model, period, batch_clients)
            for mode in ("never", "always")}
    for a, b in zip(runs["never"]["weights"], runs["always"]["weights"], strict=True):
        if not np.array_equal(a, b):
            raise AssertionError("offload=always changed the clients' weights")
    return {"clients": n_clients, "device": device, "model": model, "period": period,
            "unlabeled": unlabeled, "per_client": per_client, "batch_clients": batch_clients,
            **{f"{mode}_{key}": run[key] for mode, run in runs.items()
               for key in ("seconds", "peak_gpu_bytes", "offloaded_clients")},
            "always_over_never": runs["always"]["seconds"] / runs["never"]["seconds"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--model", default="mlp(hidden=512-512)")
    parser.add_argument("--per-client", type=int, default=500)
    parser.add_argument("--unlabeled", type=int, default=10_000)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--batch-clients", default="off", choices=("off", "on"))
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny, on the CPU (4 clients, a small MLP)")
    args = parser.parse_args(argv)
    if args.dry_run:
        figures = offload_comparison(4, "cpu", model="mlp(hidden=16)", per_client=40,
                                     unlabeled=200, period=3,
                                     batch_clients=args.batch_clients)
    else:
        figures = offload_comparison(args.clients, args.device, model=args.model,
                                     per_client=args.per_client, unlabeled=args.unlabeled,
                                     period=args.period, batch_clients=args.batch_clients)
    for key, value in figures.items():
        print(f"{key:28} {value:.4g}" if isinstance(value, float) else f"{key:28} {value}")
    if args.dry_run:
        print("DRY RUN: CPU timings of a tiny run, not a measurement")
    return 0


if __name__ == "__main__":
    sys.exit(main())
