"""Per-round wall time: real Flower deployment on 127.0.0.1 vs the in-process simulator.

Runs the same configuration (same seed) both ways, checks that the results agree, and prints
the per-round seconds of each, the deployment's set-up time and the load average of the
machine before and after (timings on a shared machine depend on it).

    .venv/bin/python benchmarks/flower_deploy_timing.py --clients 3 --rounds 5 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from fedlabels.api import run_config
from fedlabels.deploy.launcher import deploy_local
from fedlabels.runs.config import RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="fedct")
    parser.add_argument("--dataset", default="breast_cancer")
    parser.add_argument("--model", default="dt")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="results/flower_deploy_timing.json")
    args = parser.parse_args()
    cfg = RunConfig(method=args.method, dataset=args.dataset, model=args.model,
                    clients=args.clients, rounds=args.rounds, seed=args.seed)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    simulated = run_config(cfg)
    sim_wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="fedlabels-timing-") as work:
        t0 = time.perf_counter()
        deployed = deploy_local(cfg, workdir=work, output=Path(work) / "result.json",
                                timeout=3600)
        dep_wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    same = (deployed.final == simulated.final and all(
        d.accuracies == s.accuracies for d, s in zip(deployed.rounds, simulated.rounds,
                                                     strict=True)))
    sim_rounds = [r.seconds for r in simulated.rounds]
    dep_rounds = [r.seconds for r in deployed.rounds]
    report = {
        "config": cfg.to_dict(),
        "same_result": same,
        "simulator": {"wall_seconds": sim_wall, "round_seconds": sim_rounds,
                      "mean_round_seconds": float(np.mean(sim_rounds))},
        "deployment": {"wall_seconds": dep_wall, "round_seconds": dep_rounds,
                       "mean_round_seconds": float(np.mean(dep_rounds)),
                       "setup_seconds": deployed.extra["deployment"]["setup_seconds"]},
        "load_average_before": load_before, "load_average_after": load_after,
        "cpu_count": os.cpu_count(),
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"same final accuracies and per-round accuracies: {same}")
    print(f"simulator : {np.mean(sim_rounds):8.3f} s/round  (wall {sim_wall:.1f} s)")
    print(f"deployment: {np.mean(dep_rounds):8.3f} s/round  (wall {dep_wall:.1f} s, set-up "
          f"{report['deployment']['setup_seconds']:.1f} s)  rounds: "
          + ", ".join(f"{s:.1f}" for s in dep_rounds))
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} "
          f"({os.cpu_count()} CPUs); written to {out}")


if __name__ == "__main__":
    main()
