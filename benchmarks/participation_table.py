"""FedCT and FedAvg under partial participation, dropouts and a deadline (docs/robustness.md).

Settings (each against the same federation and run seed): every client every round
(``--participation 1.0``), ``--participation 0.5``, ``--participation 0.2``,
``--dropout 0.2`` and ``--deadline 1.5``. Datasets and models:

* ``breast_cancer``: its default split (m = 5, |U| = 370, 85 private, 114 test); FedCT with
  decision trees (the paper's), FedAvg with ``mlp(hidden=64)``;
* ``fashion_mnist``: m = 5 clients x 500 private examples, |U| = 1,000, the 10,000 test
  images; both methods with ``mlp(hidden=128)``.

Usage::

    python benchmarks/participation_table.py --seeds 0,1,2 --out results/participation

Writes ``summary.csv`` (one row per run) and ``summary.md`` (mean ± std over the seeds of
the final mean client accuracy, and the mean fraction of clients whose reply arrived per
round). Needs ``fedlabels fetch fashion_mnist`` once.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import fedlabels as fl
from fedlabels.core.files import write_atomic

SETTINGS: dict[str, dict[str, Any]] = {
    "participation 1.0": {"participation": 1.0},
    "participation 0.5": {"participation": 0.5},
    "participation 0.2": {"participation": 0.2},
    "dropout 0.2": {"dropout": 0.2},
    "deadline 1.5": {"deadline": 1.5},
}
DATASETS: dict[str, dict[str, Any]] = {
    "breast_cancer": {"federation": {}, "rounds": 20, "period": 20,
                      "models": {"fedct": "decision_tree", "fedavg": "mlp(hidden=64)"}},
    "fashion_mnist": {"federation": {"private_per_client": 500, "unlabeled": 1000},
                      "rounds": 20, "period": 50,
                      "models": {"fedct": "mlp(hidden=128)", "fedavg": "mlp(hidden=128)"}},
}


def replied_fraction(result: Any, n_clients: int) -> float:
    """Mean over rounds of the fraction of clients whose reply reached the server."""
    return float(np.mean([len(r.replied if r.replied is not None else range(n_clients))
                          / n_clients for r in result.rounds]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--methods", default="fedct,fedavg")
    parser.add_argument("--out", default="results/participation")
    args = parser.parse_args()
    rows = []
    for name in args.datasets.split(","):
        spec = DATASETS[name]
        for seed in (int(s) for s in args.seeds.split(",")):
            fed = fl.load_federation(name, clients=5, seed=seed, **spec["federation"])
            for method in args.methods.split(","):
                for label, kwargs in SETTINGS.items():
                    result = fl.run(method, fed, model=spec["models"][method],
                                    rounds=spec["rounds"], period=spec["period"], seed=seed,
                                    eval_every=spec["rounds"], progress=False, **kwargs)
                    rows.append({"dataset": name, "method": method, "setting": label,
                                 "seed": seed, "accuracy": result.final["mean_accuracy"],
                                 "replied": replied_fraction(result, fed.n_clients),
                                 "skipped_rounds": sum(bool(r.server.get("skipped"))
                                                       for r in result.rounds)})
                    print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    out = Path(args.out)
    write_atomic(out / "summary.csv", frame.to_csv(index=False))
    write_atomic(out / "summary.md", markdown(frame))
    print(markdown(frame))


def markdown(frame: pd.DataFrame) -> str:
    """Setting by (dataset, method): accuracy mean ± std over seeds, replies per round."""
    cols = [(d, m) for d in frame.dataset.unique() for m in frame.method.unique()]
    head = "| setting | " + " | ".join(f"{d} {m}" for d, m in cols) + " | replied (mean) |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    for setting in SETTINGS:
        cells = []
        for d, m in cols:
            acc = frame[(frame.dataset == d) & (frame.method == m)
                        & (frame.setting == setting)].accuracy
            cells.append(f"{acc.mean():.3f} ± {acc.std(ddof=1):.3f}" if len(acc) > 1
                         else f"{acc.mean():.3f}" if len(acc) else "")
        replied = frame[frame.setting == setting].replied.mean()
        lines.append(f"| {setting} | " + " | ".join(cells) + f" | {replied:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
