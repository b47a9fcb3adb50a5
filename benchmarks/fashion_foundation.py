"""FedCT vs FedAvg vs local-only (and centralized) on Fashion-MNIST, side by side.

The Foundation acceptance setup: m = 5 clients, 2,000 private examples each (iid), |U| =
10,000, the official 10,000 test images, the paper's MLP 784-512-512-10 (Adam, lr 1e-3,
batch 64 private + 64 pseudo-labelled), b = 50 local steps per round.

Usage::

    python benchmarks/fashion_foundation.py --rounds 200 --seed 0 --out results/fashion

Writes one JSON per method, ``summary.csv`` and ``summary.md`` (accuracy, communication and
wall time, with ratios against FedCT) and an accuracy plot. Needs ``fedlabels fetch
fashion_mnist`` once.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

import fedlabels as fl
from fedlabels.core.files import write_atomic
from fedlabels.reporting.plots import plot_accuracy


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub markdown table (floats to 4 decimals) without extra dependencies."""
    def cell(v: object) -> str:
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--per-client", type=int, default=2000)
    parser.add_argument("--unlabeled", type=int, default=10_000)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--methods", default="fedct,fedavg,local,centralized")
    parser.add_argument("--model", default="mlp(hidden=512-512)")
    parser.add_argument("--out", default="results/fashion")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's choice, 2 on a 2-core machine)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    out = Path(args.out)
    fed = fl.load_federation("fashion_mnist", clients=args.clients,
                             unlabeled=args.unlabeled, private_per_client=args.per_client,
                             seed=args.seed)
    print(f"fashion_mnist: {fed.summary()['client_sizes']} private, |U| = "
          f"{len(fed.X_public)}, test = {len(fed.y_test)}; torch threads = "
          f"{torch.get_num_threads()}", flush=True)
    rows, results = [], []
    for method in args.methods.split(","):
        t0 = time.perf_counter()
        res = fl.run(method, fed, model=args.model, rounds=args.rounds, period=args.period,
                     seed=args.seed, eval_every=args.eval_every, progress=True)
        res.save_json(out / f"{method}.json", overwrite=True)
        res.save_csv(out / f"{method}.csv", overwrite=True)
        results.append(res)
        row = res.summary_row()
        row["bytes_up_total"] = res.communication["bytes_up_total"]
        rows.append(row)
        print(f"{method}: mean acc {row['mean_acc']:.4f} (min {row['min_acc']:.4f}, max "
              f"{row['max_acc']:.4f}); up {row['bytes_up_per_client_round']:,.0f} B/client/"
              f"round; {time.perf_counter() - t0:.0f} s", flush=True)
    frame = pd.DataFrame(rows)
    base = frame.set_index("method")
    if "fedct" in base.index:
        ref = base.loc["fedct"]
        frame["acc_minus_fedct"] = frame["mean_acc"] - ref["mean_acc"]
        frame["upload_ratio_vs_fedct"] = frame["bytes_up_per_client_round"] / max(
            ref["bytes_up_per_client_round"], 1)
    write_atomic(out / "summary.csv", frame.to_csv(index=False))
    write_atomic(out / "summary.md", markdown_table(frame))
    plot_accuracy(results, out / "accuracy.png",
                  title=f"fashion_mnist, m = {args.clients}, seed {args.seed}",
                  overwrite=True)  # as its results and summaries above
    print(frame.to_string(index=False))


if __name__ == "__main__":
    main()
