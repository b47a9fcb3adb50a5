"""DP-FedCT at a total ε against local training and record-level DP-FedAvg (docs/beyond_paper.md).

Every case is a method with explicit options (so rows stay reproducible whatever the defaults
become). One JSON line per run is appended to ``--out`` (a run already there with the same
case, dataset, partition, seed and repeat is skipped), and ``--summary`` prints each case's
mean ± a 95 % t-interval over the runs in the file. The DP noise comes from the OS CSPRNG,
so ``--repeats`` gives fresh noise on the same seed::

    nice -n 10 python benchmarks/dp_fedct_goal4.py --dataset digits --seeds 0,1,2 \\
        --cases local,recommended,filtered
    nice -n 10 python benchmarks/dp_fedct_goal4.py --dataset fashion_mnist --seeds 0,1,2 \\
        --cases local,dp-fedavg,recommended,filtered
    python benchmarks/dp_fedct_goal4.py --dataset digits --summary

digits (and breast_cancer, any other dataset): the dataset's default split (digits: m = 5,
|U| = 1,000, 87-88 private records per client),
R = 20 rounds of b = 50 steps. fashion_mnist: the issue's setting (docs/privacy.md §7d): m = 5,
2,000 private records per client, |U| = 2,000 (``--unlabeled``), PCA-64 of U, R = 20, b = 50.
The ``dp-fedavg-lr*`` cases give DP-FedAvg's MLP the learning rate the ``lr*`` cases give
DP-FedCT's DP-SGD labeller (``labeller_lr``), so that both DP methods are tuned alike.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import fedlabels as fl

MLP = "mlp(hidden=128)"
DP = {"epsilon": 8.0, "example_rate": 0.25, "example_clip": 1.0}
#: today's recommended DP-FedCT configuration (docs/privacy.md, Defaults)
RECOMMENDED = {**DP, "mechanism": "dpsgd", "site_model": "private", "quorum": 0.8}
FILTERED = {**RECOMMENDED, "pseudo_filter": "agree"}
#: case -> (method, options)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "local": ("local", {}),
    # the ceiling: local training on the private data plus U with its *true* labels (no
    # label-sharing method can teach a site more about U than that)
    "oracle-u": ("local", {}),
    "fedct": ("fedct", {}),
    "fedavg": ("fedavg", {}),
    "dp-fedavg": ("dp-fedavg", {**DP, "level": "record"}),
    "recommended": ("dp-fedct", RECOMMENDED),
    "weight0.5": ("dp-fedct", {**RECOMMENDED, "pseudo_weight": 0.5}),
    "warmup5": ("dp-fedct", {**RECOMMENDED, "pseudo_warmup": 5}),
    "finetune": ("dp-fedct", {**RECOMMENDED, "finetune_steps": 100}),
    "filtered": ("dp-fedct", FILTERED),
    "self0.95": ("dp-fedct", {**RECOMMENDED, "own_confidence": 0.95}),
    "quorum0.6": ("dp-fedct", {**RECOMMENDED, "quorum": 0.6}),
    "quorum0.4": ("dp-fedct", {**RECOMMENDED, "quorum": 0.4}),
    "filtered+self0.95": ("dp-fedct", {**FILTERED, "own_confidence": 0.95}),
    "filtered+self0.9": ("dp-fedct", {**FILTERED, "own_confidence": 0.9}),
    "filtered+self0.99": ("dp-fedct", {**FILTERED, "own_confidence": 0.99}),
    "filtered+self0.8": ("dp-fedct", {**FILTERED, "own_confidence": 0.8}),
    "filtered+self0.95+quorum0.6": ("dp-fedct", {**FILTERED, "own_confidence": 0.95,
                                                 "quorum": 0.6}),
    "filtered+quorum0.6": ("dp-fedct", {**FILTERED, "quorum": 0.6}),
    "self0.95-only": ("dp-fedct", {**RECOMMENDED, "quorum": 1.0, "pseudo_filter": "agree",
                                   "own_confidence": 0.95}),
    # the DP-SGD labeller's learning rate tuned for ε = 8 (docs/beyond_paper.md, DP)
    "lr3": ("dp-fedct", {**RECOMMENDED, "labeller_lr": 0.003}),
    # DP-FedAvg given the same tuning: its model's learning rate (MODELS)
    "dp-fedavg-lr3": ("dp-fedavg", {**DP, "level": "record"}),
    "dp-fedavg-lr10": ("dp-fedavg", {**DP, "level": "record"}),
    "lr10": ("dp-fedct", {**RECOMMENDED, "labeller_lr": 0.01}),
    "quorum0.4+lr10": ("dp-fedct", {**RECOMMENDED, "quorum": 0.4, "labeller_lr": 0.01}),
    "lr10+weight2": ("dp-fedct", {**RECOMMENDED, "labeller_lr": 0.01, "pseudo_weight": 2.0}),
    "lr10+self0.95": ("dp-fedct", {**RECOMMENDED, "labeller_lr": 0.01, "own_confidence": 0.95}),
    "lr10+warmup5": ("dp-fedct", {**RECOMMENDED, "labeller_lr": 0.01, "pseudo_warmup": 5}),
    # site_model=dp: the DP-SGD model learns from the consensus too and is the site's model
    "dpmodel+quorum0.8+lr10": ("dp-fedct", {**DP, "mechanism": "dpsgd", "quorum": 0.8}),
    "lr30": ("dp-fedct", {**RECOMMENDED, "labeller_lr": 0.03}),
    "quorum0.6+lr10": ("dp-fedct", {**RECOMMENDED, "quorum": 0.6, "labeller_lr": 0.01}),
    "filtered+self0.95+lr10": ("dp-fedct", {**FILTERED, "own_confidence": 0.95,
                                            "labeller_lr": 0.01}),
    "dp-fedavg-lr30": ("dp-fedavg", {**DP, "level": "record"}),
}
#: cases whose model is not MLP (DP-FedAvg at a learning rate tuned for DP-SGD)
MODELS = {"dp-fedavg-lr3": "mlp(hidden=128,lr=0.003)",
          "dp-fedavg-lr10": "mlp(hidden=128,lr=0.01)",
          "dp-fedavg-lr30": "mlp(hidden=128,lr=0.03)",
          "dpmodel+quorum0.8+lr10": "mlp(hidden=128,lr=0.01)"}


def federation(dataset: str, seed: int, partition: str, unlabeled: int = 2000) -> Any:
    if dataset != "fashion_mnist":  # digits, breast_cancer: the dataset's default split
        return fl.load_federation(dataset, clients=5, seed=seed, partition=partition)
    return fl.load_federation(dataset, clients=5, seed=seed, unlabeled=unlabeled,
                              private_per_client=2000, partition=partition, public_pca=64)


def with_true_labels_on_u(fed: Any) -> Any:
    """Every client's private data plus all of U with U's hidden labels (the ceiling)."""
    import dataclasses

    from fedlabels.data.federation import ClientData

    return dataclasses.replace(fed, clients=[
        ClientData(X=np.vstack([c.X, fed.X_public]), y=np.concatenate([c.y, fed.y_public]))
        for c in fed.clients])


def run_case(case: str, fed: Any, seed: int) -> dict[str, Any]:
    method, options = CASES[case]
    if case == "oracle-u":
        fed = with_true_labels_on_u(fed)
    t = time.perf_counter()
    res = fl.run(method, fed, model=MODELS.get(case, MLP), rounds=20, period=50,
                 eval_every=20, seed=seed, options=options, progress=False)
    privacy = res.extra.get("privacy", {})
    last = res.rounds[-1].server or {}
    return {"accuracy": res.final["mean_accuracy"], "epsilon": privacy.get("epsilon"),
            "consensus_accuracy": last.get("consensus_accuracy"),
            "consensus_coverage": last.get("consensus_coverage"),
            "method": method, "options": options, "seconds": time.perf_counter() - t}


def summary(rows: list[dict[str, Any]]) -> None:
    from scipy import stats

    def group(r: dict[str, Any]) -> tuple[str, str, str, str]:
        unlabeled = (str(r.get("unlabeled", 2000)) if r["dataset"] == "fashion_mnist"
                     else "default")  # other datasets: their default split
        return r["dataset"], r["partition"], unlabeled, r["case"]

    for key in sorted({group(r) for r in rows}):
        acc = np.array([r["accuracy"] for r in rows if group(r) == key])
        half = (stats.t.ppf(0.975, len(acc) - 1) * acc.std(ddof=1) / np.sqrt(len(acc))
                if len(acc) > 1 else float("nan"))
        dataset, partition, unlabeled, case = key
        print(f"{dataset:14s} {partition:14s} |U|={unlabeled:<7s} {case:30s} {acc.mean():.3f} "
              f"± {half:.3f} (n = {len(acc)}: {', '.join(f'{a:.3f}' for a in acc)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--partition", default="iid")
    ap.add_argument("--cases", default="local,recommended")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--unlabeled", type=int, default=2000,
                    help="fashion_mnist: |U| (PCA-64 is fitted on it); digits keeps its split")
    ap.add_argument("--repeats", type=int, default=1, help="runs per seed (fresh DP noise)")
    ap.add_argument("--out", default=None,
                    help="JSON lines; default benchmarks/results/dp_fedct_goal4_<dataset>.jsonl")
    ap.add_argument("--summary", action="store_true", help="print the file's table and exit")
    args = ap.parse_args()
    out = Path(args.out or f"benchmarks/results/dp_fedct_goal4_{args.dataset}.jsonl")
    rows = ([json.loads(line) for line in out.read_text().splitlines() if line.strip()]
            if out.exists() else [])
    if args.summary:
        summary(rows)
        return
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)  # a shared machine: one core per benchmark
    for seed in map(int, args.seeds.split(",")):
        fed = federation(args.dataset, seed, args.partition, args.unlabeled)
        for case in args.cases.split(","):
            if case not in CASES:
                raise SystemExit(f"unknown case {case!r}; valid: {', '.join(CASES)}")
            noisy = CASES[case][0] not in ("local", "fedct", "fedavg")  # DP noise: repeats
            for repeat in range(args.repeats if noisy else 1):
                key = {"case": case, "dataset": args.dataset, "partition": args.partition,
                       "seed": seed, "repeat": repeat,
                       **({"unlabeled": args.unlabeled} if args.dataset == "fashion_mnist"
                          else {})}
                if any(all(r.get(k, 2000 if k == "unlabeled" else None) == v
                           for k, v in key.items()) for r in rows):
                    continue
                row = {**key, **run_case(case, fed, seed)}
                rows.append(row)
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"{args.dataset} {args.partition} seed {seed} {case:30s} "
                      f"{row['accuracy']:.4f} ({row['seconds']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
