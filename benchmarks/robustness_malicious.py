"""Honest clients' accuracy against K malicious clients: FedCT vs FedAvg, robust or not.

For each seed, K in --ks and attack: FedCT (plain majority, --robust reputation, --robust
trimmed) and FedAvg (mean, --aggregate median, --aggregate trimmed_mean; targeted does not
apply to it), on one dataset, with the final round evaluated.
Prints a markdown table of the honest clients' final mean accuracy (mean ± std over seeds)
and keeps every run in --out (JSON lines, appended as runs finish, so a stopped sweep keeps
what it has; rerunning skips the runs already there). docs/robustness.md was made with::

    python benchmarks/robustness_malicious.py --dataset breast_cancer --seeds 0 1 2 \\
        --rounds 10 --period 20 --out results/robust_malicious_breast_cancer.jsonl
    python benchmarks/robustness_malicious.py --dataset fashion_mnist --seeds 0 \\
        --unlabeled 500 --private 500 --rounds 5 --period 20 \\
        --out results/robust_malicious_fashion_mnist.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import fedlabels as fl

LABEL_ATTACKS = ("flip", "random", "constant", "targeted")
WEIGHT_ATTACKS = ("flip", "random", "constant")


def label(method: str, options: dict[str, Any]) -> str:
    return method + "".join(f" {k}={v}" for k, v in options.items())


def key(row: dict[str, Any]) -> str:
    return json.dumps([row["method"], row["options"], row["seed"], row["k"], row["attack"]],
                      sort_keys=True)


def one_run(fed: Any, method: str, options: dict[str, Any], model: str, k: int,
            attack: str | None, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    result = fl.run(method, fed, model=model, rounds=args.rounds, period=args.period,
                    seed=seed, options=options, malicious=k, poison=attack, progress=False,
                    eval_every=args.rounds)  # only the final accuracy is reported
    final = result.final or {}
    return {"method": method, "options": options, "model": model, "seed": seed, "k": k,
            "attack": attack, "malicious": (result.extra.get("malicious") or {}).get("clients"),
            "honest_mean_accuracy": final.get("honest_mean_accuracy",
                                              final.get("mean_accuracy")),
            "mean_accuracy": final.get("mean_accuracy"), "wall_seconds": result.wall_seconds}


def table(rows: list[dict[str, Any]], ks: list[int], order: list[str]) -> str:
    """Rows: method + option (in ``order``, then any others); columns: K = 0, then each
    (K, attack)."""
    cols = [(0, None)] + [(k, a) for k in ks if k for a in LABEL_ATTACKS]
    head = ["method"] + ["K=0" if k == 0 else f"K={k} {a}" for k, a in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    methods = list(dict.fromkeys(order + [label(r["method"], r["options"]) for r in rows]))
    for m in methods:
        cells = [m]
        for k, a in cols:
            acc = [r["honest_mean_accuracy"] for r in rows if label(r["method"], r["options"])
                   == m and r["k"] == k and r["attack"] == a]
            cells.append("—" if not acc else f"{np.mean(acc):.3f}" if len(acc) == 1 else
                         f"{np.mean(acc):.3f} ± {np.std(acc, ddof=1):.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="breast_cancer")
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--period", type=int, default=20)
    p.add_argument("--unlabeled", type=int)
    p.add_argument("--private", type=int)
    p.add_argument("--test", type=int)
    p.add_argument("--fedct-model", default="dt")
    p.add_argument("--fedavg-model", default="mlp(hidden=64)")
    p.add_argument("--fedct-robust", nargs="+", default=["none", "reputation", "trimmed"])
    p.add_argument("--fedavg-aggregate", nargs="+", default=["mean", "median", "trimmed_mean"])
    p.add_argument("--out", required=True, help="JSON lines of the runs (appended)")
    args = p.parse_args()
    fedct = [("fedct", {} if r == "none" else {"robust": r}) for r in args.fedct_robust]
    fedavg = [("fedavg", {} if a == "mean" else {"aggregate": a})
              for a in args.fedavg_aggregate]
    warnings.simplefilter("ignore")
    out = Path(args.out)
    rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    done = {key(r) for r in rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        fed = fl.load_federation(args.dataset, clients=args.clients, seed=seed,
                                 unlabeled=args.unlabeled, private=args.private,
                                 test=args.test)
        for methods, attacks, model in ((fedct, LABEL_ATTACKS, args.fedct_model),
                                        (fedavg, WEIGHT_ATTACKS, args.fedavg_model)):
            grid = [(0, None)] + [(k, a) for k in args.ks if k for a in attacks]
            for method, options in methods:
                for k, attack in grid:
                    todo = {"method": method, "options": options, "seed": seed, "k": k,
                            "attack": attack}
                    if key(todo) in done:
                        print(f"{key(todo)}: kept from {out}, not rerun (give --out NEW "
                              "to measure it again)", file=sys.stderr)
                        continue
                    row = one_run(fed, method, options, model, k, attack, args, seed)
                    rows.append(row)
                    with out.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
                    print(f"{label(method, options):32} seed {seed} K={k} {attack}: honest "
                          f"{row['honest_mean_accuracy']:.4f} ({row['wall_seconds']:.0f}s)",
                          flush=True)
    print(table(rows, args.ks, [label(m, o) for m, o in fedct + fedavg]))


if __name__ == "__main__":
    main()
