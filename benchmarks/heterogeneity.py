"""The FedCT paper's heterogeneity and scale experiments on Fashion-MNIST (issue 17, part A).

Experiments (``--experiments``, comma-separated):

- ``table2``: non-iid, m = 10, half of the private data Dirichlet(a1), half Dirichlet(a2)
  (``dirichlet:100,2``, ``dirichlet:100,0.01``, ``dirichlet:0.01,0.01``) for FedCT, FedCT with
  a qualified majority (quorum 0.9), FedAvg and DD (paper 000, Table 2).
- ``table4``: FedCT with U drawn from a shifted distribution, ``--unlabeled-shift S`` for S in
  ``--shifts`` (paper 000, Table 4; the paper's Dirichlet-skewed U is placed on our axis by its
  expected label total-variation distance, computed here).
- ``mscale``: m in ``--ms`` with the private training set fixed (``--private`` in total):
  FedCT, FedAvg and PATE (paper 001, Fig. 6 and Table 7).
- ``usize``: |U| in ``--us`` at m = 5, iid: FedCT (paper 001, Fig. 10), with FedAvg and
  local-only (which do not use U) as reference lines.
- ``table8``: m = 5, iid: local-only vs FedCT vs FedAvg (paper 001, Table 8).

The paper's scale: ``--model 'mlp(hidden=512-512)' --rounds 400 --period 50 --private 10000
--unlabeled 50000 --seeds 0,1,2``. Every finished run is appended to ``--runs``
(``benchmarks/results/heterogeneity_runs.json``), keyed by its whole configuration: a run
already there is skipped, so an interrupted sweep resumes and experiments share runs (Table
8's FedCT and FedAvg are the |U| ablation's points at the same |U|). The summaries (mean and
std over seeds) go to ``heterogeneity_<experiment>.csv`` in the folder of ``--runs`` (by
default ``benchmarks/results/``, so a check run with ``--runs`` elsewhere leaves the committed
summaries alone) and the plots to ``--plots``. Needs ``fedlabels fetch fashion_mnist`` once.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedlabels as fl
from fedlabels.core.files import write_atomic

RESULTS = Path(__file__).parent / "results"
TABLE2_PARTITIONS = ("dirichlet:100,2", "dirichlet:100,0.01", "dirichlet:0.01,0.01")
#: method label -> (method, options)
METHODS = {"fedct": ("fedct", {}), "fedct-qm0.9": ("fedct", {"quorum": 0.9}),
           "fedavg": ("fedavg", {}), "dd": ("dd", {}), "pate": ("pate", {}),
           "local": ("local", {})}


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every run the chosen experiments need (duplicates across experiments removed)."""
    base = {"partition": "iid", "shift": 0.0, "unlabeled": args.unlabeled,
            "private": args.private, "clients": 5}
    runs: list[dict[str, Any]] = []
    for exp in args.experiments.split(","):
        if exp == "table2":
            runs += [{**base, "exp": exp, "clients": 10, "partition": p, "label": m}
                     for p in args.partitions for m in ("fedct", "fedct-qm0.9", "fedavg", "dd")]
        elif exp == "table4":
            runs += [{**base, "exp": exp, "shift": s, "label": "fedct"} for s in args.shifts]
        elif exp == "mscale":
            runs += [{**base, "exp": exp, "clients": m, "label": label}
                     for m in args.ms for label in ("fedct", "fedavg", "pate")]
        elif exp == "usize":
            runs += [{**base, "exp": exp, "unlabeled": u, "label": "fedct"} for u in args.us]
            runs += [{**base, "exp": exp, "label": label} for label in ("fedavg", "local")]
        elif exp == "table8":
            runs += [{**base, "exp": exp, "label": label}
                     for label in ("local", "fedct", "fedavg")]
        else:
            raise SystemExit(f"unknown experiment {exp!r}; use table2, table4, mscale, usize, "
                             "table8")
    return [{**r, "seed": s} for s in args.seeds for r in runs]


def run_key(run: dict[str, Any], args: argparse.Namespace) -> str:
    """The configuration of a run, independent of the experiment that asked for it."""
    cfg = {k: run[k] for k in ("label", "clients", "partition", "shift", "unlabeled",
                               "private", "seed")}
    cfg.update(model=args.model, rounds=args.rounds, period=args.period,
               eval_every=args.eval_every)
    if run["label"] in ("fedavg", "local"):
        cfg.pop("shift")  # methods that never see U: one run serves every U
        cfg.pop("unlabeled")
    return json.dumps(cfg, sort_keys=True)


def execute(run: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    method, options = METHODS[run["label"]]
    fed = fl.load_federation("fashion_mnist", clients=run["clients"],
                             unlabeled=run["unlabeled"], private=run["private"],
                             partition=run["partition"], seed=run["seed"],
                             unlabeled_shift=run["shift"])
    wall, cpu = time.perf_counter(), time.process_time()
    res = fl.run(method, fed, model=args.model, rounds=args.rounds, period=args.period,
                 seed=run["seed"], eval_every=args.eval_every, options=options, progress=False,
                 threads=args.threads)
    final = res.final or {}
    shift = fed.info["unlabeled_shift"]
    last = (res.rounds[-1].server or {}) if res.rounds else {}
    return {"mean_acc": final.get("mean_accuracy"), "std_acc": final.get("std_accuracy"),
            "min_acc": final.get("min_accuracy"), "max_acc": final.get("max_accuracy"),
            "up_bytes_per_client_round": res.mean_bytes_up_per_client_round(),
            "consensus_acc": last.get("consensus_accuracy"),
            "consensus_coverage": last.get("consensus_coverage"),
            "label_tv": shift.get("label_tv"), "feature_smd": shift.get("feature_smd"),
            "client_sizes": fed.summary()["client_sizes"],
            "wall_s": round(time.perf_counter() - wall, 2),
            "cpu_s": round(time.process_time() - cpu, 2)}


def summarise(runs: list[dict[str, Any]], done: dict[str, dict[str, Any]],
              args: argparse.Namespace) -> dict[str, pd.DataFrame]:
    """Per experiment: mean, std and count over seeds of each configuration."""
    rows = [{**r, **done[run_key(r, args)]} for r in runs if run_key(r, args) in done]
    if not rows:
        return {}
    frame = pd.DataFrame(rows).drop(columns=["client_sizes"])
    for col in ("consensus_acc", "consensus_coverage", "label_tv", "feature_smd"):
        if col not in frame:  # runs recorded before a measure was added
            frame[col] = np.nan
    group = ["exp", "label", "clients", "partition", "shift", "unlabeled", "private"]
    agg = frame.groupby(group, sort=False).agg(
        acc_mean=("mean_acc", "mean"), acc_std_over_seeds=("mean_acc", "std"),
        seeds=("seed", "count"), client_min=("min_acc", "mean"),
        client_max=("max_acc", "mean"), label_tv=("label_tv", "mean"),
        feature_smd=("feature_smd", "mean"), consensus_acc=("consensus_acc", "mean"),
        coverage=("consensus_coverage", "mean"),
        up_bytes=("up_bytes_per_client_round", "mean"), cpu_s=("cpu_s", "sum")
    ).round(4).reset_index()
    return {exp: part.drop(columns=["exp"]) for exp, part in agg.groupby("exp", sort=False)}


def paper_dirichlet_tv(alpha: float, n_classes: int = 10, draws: int = 20_000) -> float:
    """Expected TV between a Dirichlet(alpha)-drawn U label distribution and the uniform one
    (where the paper's Table 4 rows sit on our label-shift axis; Monte Carlo, seed 0)."""
    p = np.random.default_rng(0).dirichlet(np.full(n_classes, alpha), size=draws)
    return float(0.5 * np.abs(p - 1 / n_classes).sum(axis=1).mean())


def plot(tables: dict[str, pd.DataFrame], out: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = ", ".join(map(str, args.seeds))
    scale = (f"{args.model}, R = {args.rounds}, b = {args.period}, "
             f"seed{'s' if len(args.seeds) > 1 else ''} {seeds}")
    for exp, x, xlabel, logx, what in (
            ("mscale", "clients", "clients m (private set fixed)", True,
             "accuracy against the number of clients"),
            ("usize", "unlabeled", "|U|", True, "accuracy against the size of U"),
            ("table4", "label_tv", "label TV(U, private)", False,
             "accuracy against U's label shift")):
        if exp not in tables:
            continue
        t = tables[exp]
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for label, part in t.groupby("label", sort=False):
            if exp == "usize" and label != "fedct":
                ax.axhline(part["acc_mean"].iloc[0], ls="--", lw=1,
                           color="C1" if label == "fedavg" else "C2", label=label)
                continue
            part = part.sort_values(x)
            ax.errorbar(part[x], part["acc_mean"], yerr=part["acc_std_over_seeds"].fillna(0),
                        marker="o", capsize=3, label=label)
        ax.set_xscale("log" if logx else "linear")
        ax.set_xlabel(xlabel)
        bars = "bars: ± std over seeds" if len(args.seeds) > 1 else "one seed: no bars"
        ax.set_ylabel(f"mean client test accuracy\n({bars})")
        ax.set_title(f"Fashion-MNIST ({exp}): {what}\n{scale}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
        fig.savefig(out / f"heterogeneity_{exp}.png", dpi=120, bbox_inches="tight")
        plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", default="table2,mscale,table8,usize,table4")
    parser.add_argument("--seeds", type=_ints, default=[0])
    parser.add_argument("--model", default="mlp(hidden=512-512)")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=0,
                        help="evaluate every k rounds (default 0: the last round only)")
    parser.add_argument("--private", type=int, default=10_000,
                        help="private training examples in total, over all clients")
    parser.add_argument("--unlabeled", type=int, default=50_000, help="|U| (paper: 50,000)")
    parser.add_argument("--ms", type=_ints, default=[5, 10, 20, 40, 80, 100])
    parser.add_argument("--us", type=_ints, default=[100, 1000, 10_000, 50_000])
    parser.add_argument("--partitions", type=lambda t: t.split(";"),
                        default=list(TABLE2_PARTITIONS),
                        help="Table 2's columns, ';'-separated (default: the paper's three)")
    parser.add_argument("--shifts", type=lambda t: [float(v) for v in t.split(",")],
                        default=[0.0, 0.33, 0.66, 1.0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--runs", type=Path, default=RESULTS / "heterogeneity_runs.json")
    parser.add_argument("--plots", type=Path, default=Path("docs"))
    parser.add_argument("--dry-run", action="store_true", help="list the runs still to do")
    args = parser.parse_args()
    if args.eval_every <= 0:
        args.eval_every = args.rounds

    runs = plan(args)
    done: dict[str, dict[str, Any]] = (json.loads(args.runs.read_text())
                                       if args.runs.exists() else {})
    todo = list(dict.fromkeys(run_key(r, args) for r in runs if run_key(r, args) not in done))
    print(f"{len(runs)} runs planned, {len(todo)} to do", flush=True)
    by_key = {run_key(r, args): r for r in runs}
    for i, key in enumerate(todo):
        if args.dry_run:
            print(key)
            continue
        done[key] = execute(by_key[key], args)
        args.runs.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.runs, json.dumps(done, indent=1))
        r = done[key]
        print(f"[{i + 1}/{len(todo)}] {key}: acc {r['mean_acc']:.4f}, {r['cpu_s']:.0f} CPU s",
              flush=True)
    tables = summarise(runs, done, args)
    summaries = args.runs.parent  # beside --runs: a check run elsewhere keeps the committed ones
    if "table4" in tables:
        ref = pd.DataFrame({"label": ["paper: Dirichlet U"] * 2, "alpha": [1.0, 0.5],
                            "label_tv": [paper_dirichlet_tv(1.0), paper_dirichlet_tv(0.5)]})
        write_atomic(summaries / "heterogeneity_table4_paper_tv.csv", ref.to_csv(index=False))
    for exp, table in tables.items():
        write_atomic(summaries / f"heterogeneity_{exp}.csv", table.to_csv(index=False))
        print(f"\n{exp}\n{table.to_string(index=False)}")
    args.plots.mkdir(parents=True, exist_ok=True)
    plot(tables, args.plots, args)


if __name__ == "__main__":
    main()
