"""Regression (issue 16): FedCT (median / trimmed-mean consensus) against FedAvg, local-only
and centralized training, RMSE and R² (mean ± std over seeds) on regression tables.

Every run uses the dataset's default split (``fedlabels datasets``), 5 clients, iid. The
refit model (``--tree``, default a 50-tree random forest) runs ``--tree-rounds`` rounds;
the torch MLP (FedAvg's model, also run with the other methods) ``--mlp-rounds`` rounds of
``--period`` local steps. FedCT shares 8-bit predictions (``--bits``). mlbench tables need
``fedlabels fetch mlbench`` once. Runs are appended to ``OUT/runs.csv`` as they finish
(delete it to start afresh); ``--table-only`` prints the tables of what it holds.

Usage::

    nice -n 5 python benchmarks/regression_table.py --seeds 0 1 2 --out results/regression
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

import fedlabels as fl
from fedlabels.api import run

DATASETS = ("diabetes", "BostonHousing", "Ozone", "Servo")


def configurations(args: argparse.Namespace) -> list[tuple[str, str, str, dict[str, object]]]:
    """(row label, method, model, options) of every compared setting."""
    fedct = {"median": {"target_consensus": "median", "bits": args.bits},
             "trimmed-mean": {"target_consensus": "trimmed-mean", "bits": args.bits}}
    rows: list[tuple[str, str, str, dict[str, object]]] = []
    for model in (args.tree, args.mlp):
        rows += [(f"FedCT median · {model}", "fedct", model, fedct["median"]),
                 (f"FedCT trimmed mean · {model}", "fedct", model, fedct["trimmed-mean"]),
                 (f"local · {model}", "local", model, {}),
                 (f"centralized · {model}", "centralized", model, {})]
    rows.append((f"FedAvg · {args.mlp}", "fedavg", args.mlp, {}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--tree", default="rf(n_estimators=50)")
    parser.add_argument("--mlp", default="mlp(hidden=64-64)")
    parser.add_argument("--tree-rounds", type=int, default=10)
    parser.add_argument("--mlp-rounds", type=int, default=20)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--bits", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("results/regression"))
    parser.add_argument("--table-only", action="store_true",
                        help="print the tables of OUT/runs.csv (runs of earlier calls)")
    args = parser.parse_args()
    csv = args.out / "runs.csv"
    if args.table_only:
        frame = pd.read_csv(csv)
        print(markdown(frame, [d for d in args.datasets if d in set(frame.dataset)]))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for dataset in args.datasets:
        for seed in args.seeds:
            fed = fl.load_federation(dataset, clients=5, seed=seed)
            for label, method, model, options in configurations(args):
                rounds = args.mlp_rounds if model == args.mlp else args.tree_rounds
                res = run(method, fed, model=model, rounds=rounds, period=args.period,
                          seed=seed, options=options, progress=False)
                records.append({"dataset": dataset, "configuration": label, "seed": seed,
                                "rmse": res.final["mean_rmse"], "r2": res.final["mean_r2"],
                                "bytes_up_per_client_round":
                                    res.mean_bytes_up_per_client_round()})
                print(f"{dataset:<14} seed {seed} {label:<40} RMSE {records[-1]['rmse']:.3f} "
                      f"R² {records[-1]['r2']:.3f}", flush=True)
                # appended run by run: an interrupted benchmark keeps what it measured
                pd.DataFrame(records[-1:]).to_csv(csv, mode="a", index=False,
                                                  header=not csv.exists())
    print()
    print(markdown(pd.read_csv(csv), args.datasets))


def markdown(frame: pd.DataFrame, datasets: list[str]) -> str:
    """One table per dataset: RMSE and R², mean ± sample std over seeds."""
    out = []
    for dataset in datasets:
        sub = frame[frame.dataset == dataset]
        out += [f"**{dataset}** ({sub.seed.nunique()} seeds)", "",
                "| configuration | RMSE | R² | up B/client/round |", "|---|---|---|---|"]
        for label, g in sub.groupby("configuration", sort=False):
            rmse, r2 = g.rmse.to_numpy(), g.r2.to_numpy()
            out.append(f"| {label} | {rmse.mean():.3f} ± {sd(rmse):.3f} | "
                       f"{r2.mean():.3f} ± {sd(r2):.3f} | "
                       f"{g.bytes_up_per_client_round.mean():,.0f} |")
        out.append("")
    return "\n".join(out)


def sd(values: np.ndarray) -> float:
    """Sample standard deviation (0 for one value)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


if __name__ == "__main__":
    main()
