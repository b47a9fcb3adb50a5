"""FedCT's tie rule: ties to the smallest class index (the paper's) vs ``ties=abstain``.

With m = 5 voters and many classes the plurality is often tied (two classes with two votes
each, or five different votes); the paper's rule then gives the smallest class index, a
label that is right for only 20-40 % of such examples. ``ties=abstain`` leaves them out of P
that round. This script measures both rules side by side on the same federations (m = 5,
iid, each dataset's default split, Table 3's rounds), paired by seed, and writes one JSON
line per run and a markdown summary::

    fedlabels fetch mlbench
    nice -n 10 python benchmarks/fedct_ties.py --models dt --seeds 0,1,2,3,4
    nice -n 10 python benchmarks/fedct_ties.py --models rf,xgboost --seeds 0,1,2
    nice -n 10 python benchmarks/fedct_ties.py --models 'mlp(hidden=128)' \\
        --datasets digits,letter --seeds 0,1,2 --rounds 20 --period 25
    python benchmarks/fedct_ties.py --summary

Re-running skips the runs already in the file. ± is the 95 % t-interval over the seeds.
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
from fedlabels.core.intervals import t_half_width

DATASETS = "digits,dna,letter,vehicle,wine,breast_cancer"
ROUNDS = {"breast_cancer": 5, "wine": 5}  # benchmarks/table3.py; the others 3
VARIANTS: dict[str, dict[str, Any]] = {"smallest": {}, "abstain": {"ties": "abstain"}}
OUT = Path(__file__).parent / "results" / "fedct_ties.jsonl"


def key(r: dict[str, Any]) -> tuple:
    return (r["dataset"], r["model"], r["seed"], r["variant"], r["rounds"], r["period"])


def run_one(dataset: str, model: str, seed: int, variant: str, rounds: int,
            period: int) -> dict[str, Any]:
    fed = fl.load_federation(dataset, clients=5, seed=seed)
    res = fl.run("fedct", fed, model=model, rounds=rounds, period=period, seed=seed,
                 progress=False, options=VARIANTS[variant])
    server, first = res.rounds[-1].server, res.rounds[0].server
    return {"dataset": dataset, "model": model, "seed": seed, "variant": variant,
            "rounds": rounds, "period": period, "accuracy": res.final["mean_accuracy"],
            "consensus_accuracy": server.get("consensus_accuracy"),
            # round 1's vote is cast by models trained on private data alone, the same in
            # both variants: its coverage under abstain is 1 - the tied fraction of U
            "round1_coverage": first.get("consensus_coverage"),
            "round1_consensus_accuracy": first.get("consensus_accuracy"),
            "bytes_down_per_client_round": res.communication["bytes_down_total"]
            / (5 * len(res.rounds))}


def tie_stats(records: list[dict[str, Any]], ds: str, model: str, seeds: list[int]) -> str:
    """Round 1: the tied fraction of U and how often the smallest-index label is right there
    (from the two variants' round-1 consensus accuracy and the abstain run's coverage)."""
    by = {(r["seed"], r["variant"]): r for r in records
          if (r["dataset"], r["model"]) == (ds, model) and "round1_coverage" in r}
    tied, right = [], []
    for s in seeds:
        a, b = by.get((s, "smallest")), by.get((s, "abstain"))
        if a is None or b is None or b["round1_coverage"] >= 1.0:
            continue
        cov = b["round1_coverage"]
        tied.append(1.0 - cov)
        right.append((a["round1_consensus_accuracy"]
                      - cov * b["round1_consensus_accuracy"]) / (1.0 - cov))
    if not tied:
        return "— | —"
    return f"{np.mean(tied):.3f} | {np.mean(right):.2f}"


def summary(records: list[dict[str, Any]]) -> str:
    lines = ["| dataset | model | seeds | smallest (paper) | `ties=abstain` | "
             "abstain − smallest (points, paired) | per seed | round 1: tied share of U | "
             "smallest-index label right on those |", "|---|---|---|---|---|---|---|---|---|"]
    cells: dict[tuple, dict[str, dict[int, float]]] = {}
    for r in records:
        cell = cells.setdefault((r["dataset"], r["model"], r["rounds"], r["period"]), {})
        cell.setdefault(r["variant"], {})[r["seed"]] = r["accuracy"]
    for (ds, model, _, _), cell in cells.items():
        seeds = sorted(set(cell.get("smallest", {})) & set(cell.get("abstain", {})))
        if not seeds:
            continue
        a = np.array([cell["smallest"][s] for s in seeds])
        b = np.array([cell["abstain"][s] for s in seeds])
        d = 100 * (b - a)
        half = t_half_width(d) if len(d) > 1 else float("nan")
        lines.append(f"| {ds} | {model} | {','.join(map(str, seeds))} | {a.mean():.4f} | "
                     f"{b.mean():.4f} | {d.mean():+.2f} ± {half:.2f} | "
                     f"{', '.join(f'{x:+.1f}' for x in d)} | "
                     f"{tie_stats(records, ds, model, seeds)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default=DATASETS)
    ap.add_argument("--models", default="dt", help="comma-separated model specs")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=None,
                    help="FedCT rounds (default: Table 3's, 5 on breast_cancer and wine, else 3)")
    ap.add_argument("--period", type=int, default=50, help="local steps per round (torch)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summary", action="store_true", help="print the file's table and exit")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    records = ([json.loads(x) for x in args.out.read_text().splitlines() if x.strip()]
               if args.out.exists() else [])
    if not args.summary:
        done = {key(r) for r in records}
        models = args.models.split(",") if "(" not in args.models else [args.models]
        for ds in args.datasets.split(","):
            rounds = args.rounds or ROUNDS.get(ds, 3)
            for model in models:
                for seed in (int(s) for s in args.seeds.split(",")):
                    for variant in VARIANTS:
                        k = (ds, model, seed, variant, rounds, args.period)
                        if k in done:
                            print(f"{k}: kept from {args.out}, not rerun (give --out NEW "
                                  "to measure it again)", file=sys.stderr)
                            continue
                        rec = run_one(ds, model, seed, variant, rounds, args.period)
                        records.append(rec)
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        with args.out.open("a") as fh:
                            fh.write(json.dumps(rec) + "\n")
                        print(f"{ds} {model} seed {seed} {variant}: {rec['accuracy']:.4f}",
                              flush=True)
    text = summary(records)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
