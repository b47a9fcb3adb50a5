"""DP-FedCT --mechanism subsample-aggregate vs FedCT and local training, over ε.

m clients of Fashion-MNIST (default m = 5, 2,000 private records each, the issue's setting),
|U| scaled to fit a shared 2-core machine. Every ε is the run's total per client at δ: σ of
the clients' GNMax is calibrated so that rounds × ``--queries`` labels per client meet it.
Reports the test accuracy of the clients' own models, the consensus label accuracy on the
labelled part of U (a diagnostic: the simulator knows U's labels), its coverage and σ.

Usage::

    nice -n 10 .venv/bin/python benchmarks/subsample_aggregate.py --seeds 0,1,2
    # the issue's full curve (more CPU):
    #   --unlabeled 10000 --rounds 20 --queries 250 --epsilons 1,2,4,8,16 --teachers 100

Writes ``benchmarks/results/subsample_aggregate.json`` (every run) and prints a markdown
table (mean ± std over seeds).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

import fedlabels as fl
from fedlabels.core.files import write_atomic


def one_run(method: str, fed: Any, args: argparse.Namespace, seed: int,
            options: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = fl.run(method, fed, model=args.model, rounds=args.rounds, period=args.period,
                    seed=seed, eval_every=args.rounds, progress=False, options=options)
    data = result.to_dict()
    server = data["rounds"][-1].get("server") or {}
    privacy = data.get("extra", {}).get("privacy") or data.get("privacy") or {}
    return {"method": method, "seed": seed, "options": options,
            "accuracy": data["final"]["mean_accuracy"],
            "consensus_accuracy": server.get("consensus_accuracy"),
            "consensus_coverage": server.get("consensus_coverage"),
            "epsilon": privacy.get("epsilon"), "sigma": privacy.get("noise_sigma"),
            "seconds": time.perf_counter() - t0}


def summary(runs: list[dict[str, Any]]) -> str:
    def ms(vals: list[Any]) -> str:
        v = [x for x in vals if x is not None]
        return "-" if not v else f"{np.mean(v):.3f} ± {np.std(v):.3f}"

    keys: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        eps = r["options"].get("epsilon")
        label = r["method"] + ("" if eps is None else f" ε={eps:g}")
        keys.setdefault(label, []).append(r)
    lines = ["| run | test accuracy | consensus accuracy | coverage of U | σ | seeds |",
             "|---|---|---|---|---|---|"]
    for label, rs in keys.items():
        sig = rs[0]["sigma"]
        lines.append(f"| {label} | {ms([r['accuracy'] for r in rs])} | "
                     f"{ms([r['consensus_accuracy'] for r in rs])} | "
                     f"{ms([r['consensus_coverage'] for r in rs])} | "
                     f"{'-' if sig is None else format(sig, '.1f')} | {len(rs)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--private-per-client", type=int, default=2000)
    parser.add_argument("--unlabeled", type=int, default=2000)
    parser.add_argument("--model", default="dt")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--queries", type=int, default=100, help="labels per client per round")
    parser.add_argument("--teachers", type=int, default=100)
    parser.add_argument("--quorum", type=float, default=None)
    parser.add_argument("--epsilons", default="1,8")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--baselines", default="fedct,local")
    parser.add_argument("--out", default="benchmarks/results/subsample_aggregate.json")
    args = parser.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    sa = {"mechanism": "subsample-aggregate", "teachers": args.teachers,
          "label_queries": args.queries, "delta": args.delta}
    if args.quorum is not None:
        sa["quorum"] = args.quorum
    for seed in (int(s) for s in args.seeds.split(",")):
        fed = fl.load_federation(args.dataset, clients=args.clients,
                                 unlabeled=args.unlabeled,
                                 private_per_client=args.private_per_client, seed=seed)
        plan = [(m, {}) for m in args.baselines.split(",") if m] + [
            ("dp-fedct", {**sa, "epsilon": float(e)}) for e in args.epsilons.split(",")]
        for method, options in plan:
            runs.append(one_run(method, fed, args, seed, options))
            print(json.dumps(runs[-1]), flush=True)
            write_atomic(args.out, json.dumps({"config": vars(args), "runs": runs},
                                              indent=1) + "\n")
    print(summary(runs))


if __name__ == "__main__":
    main()
