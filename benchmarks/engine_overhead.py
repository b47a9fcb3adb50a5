"""Per-round overhead of Flower's simulation engine (Ray) against the simulator (not a test).

Runs the same configuration with ``engine="simulator"`` (``--workers 1``) and
``engine="flower-simulation"`` alternately, ``--repeats`` times each, in this one process,
checks that their records are equal, and prints and writes per run: the wall seconds, the
seconds per round (median over rounds 2..R: round 1 of the Ray engine includes its actors'
first imports), round 1 alone, and the load average before and after. Without
``$RAY_ADDRESS`` each Ray run starts (and stops) a Ray of its own with ``--ray-cpus`` CPUs;
with it, it uses that cluster.

Usage (FedCT with a decision tree on breast_cancer, m = 5, 20 rounds, seed 0)::

    nice -n 10 .venv/bin/python benchmarks/engine_overhead.py --repeats 2 \
        --output benchmarks/results/engine_overhead_2core_loaded.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import fedlabels as fl


def _records(result: fl.RunResult) -> list[Any]:
    return [(r.round, r.accuracies, r.bytes_up, r.bytes_down,
             {k: v for k, v in r.server.items() if k != "clients_alive"})
            for r in result.rounds]


def _one(engine: str, args: argparse.Namespace) -> tuple[dict[str, Any], fl.RunResult]:
    kw: dict[str, Any] = {"clients": args.clients, "model": args.model, "rounds": args.rounds,
                          "seed": args.seed, "progress": False, "engine": engine,
                          "workers": 1 if engine == "simulator" else args.ray_cpus}
    load = os.getloadavg()[0]
    started = time.perf_counter()
    result = fl.run(args.method, args.dataset, **kw)
    wall = time.perf_counter() - started
    seconds = [r.seconds for r in result.rounds]
    return {"engine": engine, "wall_s": round(wall, 3),
            "result_wall_s": round(result.wall_seconds, 3),
            "round1_s": round(seconds[0], 4),
            "per_round_s": round(statistics.median(seconds[1:]), 4),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", default="fedct")
    p.add_argument("--dataset", default="breast_cancer")
    p.add_argument("--model", default="dt")
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ray-cpus", type=int, default=None,
                   help="CPUs of the local Ray (default: one per core, at most one per client)")
    p.add_argument("--output", type=Path)
    args = p.parse_args()
    if os.environ.get("RAY_ADDRESS"):
        args.ray_cpus = None  # the cluster's own
    runs = []
    reference = None
    for i in range(args.repeats):
        order = ("simulator", "flower-simulation") if i % 2 == 0 else \
            ("flower-simulation", "simulator")
        for engine in order:
            row, result = _one(engine, args)
            if reference is None:
                reference = _records(result)
            elif _records(result) != reference:
                raise SystemExit(f"{engine}: the records differ from the first run's")
            runs.append(row)
            print(json.dumps(row), flush=True)
    med = {e: statistics.median(r["per_round_s"] for r in runs if r["engine"] == e)
           for e in ("simulator", "flower-simulation")}
    summary = {"config": {k: v for k, v in vars(args).items() if k != "output"},
               "ray_address": os.environ.get("RAY_ADDRESS") or "local",
               "cpus": os.cpu_count(), "runs": runs,
               "per_round_s": med,
               "overhead_per_round_s": round(med["flower-simulation"] - med["simulator"], 4),
               "ratio": round(med["flower-simulation"] / med["simulator"], 2)}
    print(json.dumps({k: summary[k] for k in ("per_round_s", "overhead_per_round_s",
                                               "ratio")}))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
