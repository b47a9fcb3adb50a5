"""Clients together against one by one, for each kind of batched step, on one device.

For ``train`` (FedCT's step: 64 private + 64 pseudo-labelled rows), ``distill`` (DD's step:
64 soft-labelled + 64 private rows) and ``dpsgd`` (DP-FedAvg's step: a Poisson sample of 64
expected of 200 rows, sigma = 1, C = 1, each client's own generator), the seconds per step of
``--clients`` clients with one MLP (``benchmarks/device_check.py``'s
``batched_step_seconds``: the best of 3 calls of ``--steps`` steps, after a warm-up call),
one by one and together, and the ratio; for ``noise``, one DP-SGD step's noise for those
clients drawn by one host thread against ``--noise-threads`` (as a batched DP-SGD step on a
GPU draws it). One torch thread. Writes a JSON record (machine load included).

Usage::

    python benchmarks/batched_kinds.py --device cpu --clients 100 \
        --output benchmarks/results/batched_kinds_cpu.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from device_check import PAPER, batched_step_seconds  # noqa: E402
from fedlabels.core.threads import available_cores  # noqa: E402

KINDS = ("train", "distill", "dpsgd", "noise")


def noise_seconds(clients: int, hidden: str, threads: int) -> float:
    """Seconds to draw one DP-SGD step's noise for ``clients`` MLPs (one normal per
    parameter, each client from its own generator) with ``threads`` host threads (as
    ``fedlabels.learners.batched_dpsgd`` draws it), best of 3."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    widths = [784, *(int(h) for h in hidden.split("-")), 10]
    size = sum(a * b + b for a, b in itertools.pairwise(widths))
    noise = np.zeros((clients, size), dtype=np.float32)  # touched: no first-write faults
    gens = [np.random.default_rng([2, c]) for c in range(clients)]

    def draw(c: int) -> None:
        gens[c].standard_normal(out=noise[c], dtype=np.float32)

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(3):
            start = time.perf_counter()
            if threads > 1:
                list(pool.map(draw, range(clients)))
            else:
                for c in range(clients):
                    draw(c)
            best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--hidden", default="512-512", help="the MLP's hidden layers")
    parser.add_argument("--steps", type=int, default=2, help="steps per timed call")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"some of {', '.join(KINDS)}")
    parser.add_argument("--noise-threads", type=int, default=available_cores(),
                        help="host threads for the noise row (default: the usable cores)")
    parser.add_argument("--output", help="write the record here (JSON)")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    if args.clients < 2 or args.steps < 1 or args.noise_threads < 1:
        parser.error("--clients must be >= 2, --steps and --noise-threads >= 1")
    if args.output and Path(args.output).exists():
        parser.error(f"{args.output} exists; choose another --output (nothing overwritten)")
    torch.set_num_threads(1)
    scale = replace(PAPER, hidden=args.hidden, n_batched=args.clients)
    rows = []
    for kind in kinds:
        if kind == "noise":  # one step's noise: one host thread against --noise-threads
            alone = noise_seconds(args.clients, args.hidden, 1)
            together = noise_seconds(args.clients, args.hidden, args.noise_threads)
        else:
            alone = batched_step_seconds(scale, args.device, False, args.steps, kind)
            together = batched_step_seconds(scale, args.device, True, args.steps, kind)
        rows.append({"kind": kind, "one_by_one_s": alone, "together_s": together,
                     "ratio": alone / together})
        print(f"{kind:<8} one by one {alone:8.4f} s/step  together {together:8.4f} s/step  "
              f"ratio {alone / together:5.2f}x", flush=True)
    record = {"device": args.device, "clients": args.clients, "hidden": args.hidden,
              "noise_threads": args.noise_threads,
              "steps_per_call": args.steps, "torch_threads": 1, "torch": torch.__version__,
              "cpu_count": os.cpu_count(), "load_1min": os.getloadavg()[0],
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rows": rows}
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        with open(args.output, "x", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
