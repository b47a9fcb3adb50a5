"""``fedlabels demo``: the main job on the bundled breast-cancer data (no download).

m = 5 clients, the FedCT paper's split (|U| = 370, 85 private, 114 test), iid:
FedCT with decision trees, FedAvg with a torch MLP, and local-only and centralized with both
model types, so each collaborative method has its two references beside it.
"""

from __future__ import annotations

from pathlib import Path

from fedlabels.api import load_federation, run
from fedlabels.results import RunResult, format_table, write_atomic

DEMO_RUNS = [
    # (method, model, rounds, period)
    ("fedct", "decision_tree", 20, 1),
    ("local", "decision_tree", 1, 1),
    ("centralized", "decision_tree", 1, 1),
    ("fedavg", "mlp(hidden=64-64)", 30, 10),
    ("local", "mlp(hidden=64-64)", 30, 10),
    ("centralized", "mlp(hidden=64-64)", 30, 10),
]


def run_demo(output_dir: Path, seed: int = 0, progress: bool = True) -> list[RunResult]:
    """Run the demo, print the table, write JSON/CSV/PNG results under ``output_dir``."""
    from fedlabels.plots import plot_accuracy

    federation = load_federation("breast_cancer", n_clients=5, seed=seed)
    print(f"breast_cancer: m = 5 clients x {federation.summary()['client_sizes']} private, "
          f"|U| = {len(federation.X_public)}, test = {len(federation.y_test)}, seed {seed}")
    results = []
    for method, model, rounds, period in DEMO_RUNS:
        res = run(method, federation, model=model, rounds=rounds, period=period, seed=seed,
                  progress=progress)
        tag = f"{method}_{model.split('(')[0]}"
        res.save_json(output_dir / f"{tag}.json")
        res.save_csv(output_dir / f"{tag}.csv")
        results.append(res)
    rows = [{**r.summary_row(), "method": f"{r.method}/{r.models[0].split('(')[0]}"}
            for r in results]
    table = format_table(rows)
    print(table)
    write_atomic(output_dir / "summary.txt", table + "\n")
    import pandas as pd

    write_atomic(output_dir / "summary.csv", pd.DataFrame(rows).to_csv(index=False))
    plot_accuracy([results[0], results[3]], output_dir / "accuracy.png",
                  title="breast_cancer, m = 5: FedCT (trees) vs FedAvg (MLP)")
    print(f"\nresults written to {output_dir}/ (JSON and CSV per run, summary.csv, "
          "accuracy.png)")
    return results
