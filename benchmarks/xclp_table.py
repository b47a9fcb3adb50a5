"""XCLP result tables: summarise a folder of run JSONs, or run the one-hot vs balanced grid.

    .venv/bin/python benchmarks/xclp_table.py results/xclp          # summarise (mean ± std)
    nice -n 5 .venv/bin/python benchmarks/xclp_table.py --run --scale full \
        --out results/xclp_balance                                  # run the grid, then summarise

``--run`` runs, for digits and fashion_mnist, seeds 0-2, 10 % labels: ``xclp`` and
``perclient-lp`` with ``balance=none`` and ``balance=class``, and ``fedavg-xclp``
(``propagation=cross``) with both recipes; digits with ``features=federation``, as
measured. Runs whose JSON exists are skipped, so an interrupted grid resumes.
``--scale small`` is a reduced grid for a loaded machine (fewer points, fewer rounds); the
docs' table is ``--scale full``. ``--only one-shot`` leaves out FedAvg+XCLP, ``--only
fedavg`` runs only FedAvg+XCLP. ``--preprocessing`` prints the feature-preprocessing table
(central LP on digits, seeds 0-2).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

FL = str(Path(sys.executable).with_name("fedlabels"))
SEEDS = (0, 1, 2)
#: per scale: Fashion-MNIST images per client, FedAvg+XCLP rounds, local steps, warm-up rounds
SCALES = {"full": (1000, 10, 50, 3), "small": (500, 6, 30, 2)}


def federation_flags(dataset: str, scale: str) -> list[str]:
    per_client = 250 if dataset == "digits" else SCALES[scale][0]
    test = ["--test", "300"] if dataset == "digits" else []
    return ["--clients", "5", "--private-per-client", str(per_client), "--unlabeled", "100",
            *test]


def fedavg_flags(scale: str) -> list[str]:
    _, rounds, period, warmup = SCALES[scale]
    return ["--rounds", str(rounds), "--period", str(period), "--lsh-bits", "256",
            "--opt", f"warmup_rounds={warmup}"]


ONE_SHOT_EXTRA = {"digits": [], "fashion_mnist": ["--opt", "test_points=400"]}
#: the graph features the docs' table was measured with (the default was then federation;
#: fashion_mnist is not z-scored, so raw and federation agree there)
FEATURES = {"digits": ["--opt", "features=federation"], "fashion_mnist": []}


def grid(scale: str, only: str) -> list[tuple[str, list[str]]]:
    """(run name, fedlabels run arguments) of every run of the table."""
    runs = []
    for dataset in ("digits", "fashion_mnist"):
        common = ["--dataset", dataset, *federation_flags(dataset, scale),
                  "--labeled-fraction", "0.1", *FEATURES[dataset], "--no-progress"]
        for seed in SEEDS:
            for balance in ("none", "class"):
                for method in ("xclp", "perclient-lp") if only != "fedavg" else ():
                    runs.append((f"{dataset}_{method}_{balance}_seed{seed}",
                                 ["--method", method, *common, "--rounds", "1",
                                  *ONE_SHOT_EXTRA[dataset], "--opt", f"balance={balance}",
                                  "--seed", str(seed)]))
                if only != "one-shot":
                    runs.append((f"{dataset}_fedavg-xclp_{balance}_seed{seed}",
                                 ["--method", "fedavg-xclp", *common,
                                  "--model", "mlp(hidden=256-128)", *fedavg_flags(scale),
                                  "--opt", "propagation=cross", "--opt", f"balance={balance}",
                                  "--seed", str(seed)]))
    return runs


def run_grid(scale: str, out: Path, only: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, args in grid(scale, only):
        path = out / f"{name}.json"
        if path.exists():
            continue
        print(" ".join(["fedlabels", "run", *args]), flush=True)
        subprocess.run([FL, "run", *args, "--output", str(path)], check=True,
                       stdout=subprocess.DEVNULL)


def summarise(folder: str) -> None:
    groups: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        name = path.stem.rsplit("_seed", 1)[0]
        groups[name].append(rec)
    print("| run | seeds | mean test accuracy | protocol bytes up + down | wall s |")
    print("|---|---|---|---|---|")
    for name, recs in groups.items():
        acc = [np.mean(r["rounds"][-1]["accuracies"]) for r in recs]
        comm = np.mean([r["communication"]["bytes_up_total"]
                        + r["communication"]["bytes_down_total"] for r in recs])
        wall = np.mean([r["wall_seconds"] for r in recs])
        print(f"| {name} | {len(recs)} | {np.mean(acc):.4f} ± {np.std(acc):.4f} "
              f"| {comm:,.0f} | {wall:.1f} |")


def preprocessing_table() -> None:
    """Central LP accuracy on digits (unlabelled points) by feature preprocessing: raw
    pixels, z-scored with the statistics of a 300-image public set U (what the federation's
    clients hold), two transforms a client can apply to z-scores, centred by U's mean, and
    L2-normalised raw (SimHash ignores row scale)."""
    from sklearn.datasets import load_digits

    from fedlabels.propagation import label_propagation

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float64)
    accs: dict[str, list[float]] = defaultdict(list)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(y))
        U, Xs, ys = X[order[:300]], X[order[300:]], y[order[300:]]
        std = U.std(axis=0)
        std[std == 0] = 1.0
        partial = np.full(len(ys), -1)
        keep = rng.permutation(len(ys))[:len(ys) // 10]
        partial[keep] = ys[keep]
        Z = (Xs - U.mean(axis=0)) / std
        variants = {"raw": Xs, "z-scored (U)": Z, "z-scored, clipped to [-1, 1]": np.clip(Z, -1, 1),
                    "z-scored, tanh": np.tanh(Z), "centred (U)": Xs - U.mean(axis=0),
                    "L2-normalised raw": Xs / np.linalg.norm(Xs, axis=1, keepdims=True)}
        for name, V in variants.items():
            labels, _, _ = label_propagation(V, partial, 10, k=10, alpha=0.99, n_bits=1024,
                                             seed=seed)
            accs[name].append(float(np.mean(labels[partial < 0] == ys[partial < 0])))
    print("| features | seeds | LP accuracy on the unlabelled points |")
    print("|---|---|---|")
    for name, values in accs.items():
        print(f"| {name} | {len(values)} | {np.mean(values):.4f} ± {np.std(values):.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=None)
    parser.add_argument("--run", action="store_true", help="run the balance grid first")
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--only", choices=("all", "one-shot", "fedavg"), default="all")
    parser.add_argument("--out", default=None, help="folder of the grid's JSONs")
    parser.add_argument("--preprocessing", action="store_true",
                        help="only the feature-preprocessing table (central LP on digits)")
    args = parser.parse_args()
    if args.preprocessing:
        preprocessing_table()
        return
    folder = args.out or args.folder or ("results/xclp_balance" if args.run
                                         else "results/xclp")
    if args.run:
        run_grid(args.scale, Path(folder), args.only)
    summarise(folder)


if __name__ == "__main__":
    main()
