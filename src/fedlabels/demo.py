"""``fedlabels demo``: the main job on the bundled breast-cancer data (no download).

m = 5 clients, the FedCT paper's split (|U| = 370, 85 private, 114 test), iid:
FedCT with decision trees, FedAvg with a torch MLP, and local-only and centralized with both
model types, so each collaborative method has its two references beside it.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

from fedlabels.api import run
from fedlabels.core.errors import RunCaveatWarning
from fedlabels.core.files import check_outputs, models_path, rounds_path, write_atomic, writing
from fedlabels.data import load_federation
from fedlabels.results import RunResult, format_table, table_warnings
from fedlabels.results.models_file import save_models
from fedlabels.runs.progress import info

DEMO_RUNS = [
    # (method, model, rounds, period)
    ("fedct", "decision_tree", 20, 1),
    ("local", "decision_tree", 1, 1),
    ("centralized", "decision_tree", 1, 1),
    ("fedavg", "mlp(hidden=64-64)", 30, 10),
    ("local", "mlp(hidden=64-64)", 30, 10),
    ("centralized", "mlp(hidden=64-64)", 30, 10),
]


def demo_outputs(output_dir: Path) -> dict[str, Path]:
    """Every file the demo writes: per run ``TAG.json``, ``TAG.rounds.csv`` and the clients'
    models ``TAG.models.npz`` (for ``fedlabels predict`` and ``inspect``), then
    ``summary.txt``, ``summary.csv`` and ``accuracy.png``."""
    files: dict[str, Path] = {}
    for method, model, _, _ in DEMO_RUNS:
        tag = f"{method}_{model.split('(')[0]}"
        files[f"{tag} result"] = output_dir / f"{tag}.json"
        files[f"{tag} rounds table"] = rounds_path(output_dir / f"{tag}.json")
        files[f"{tag} models file"] = models_path(output_dir / f"{tag}.json")
    for name in ("summary.txt", "summary.csv", "accuracy.png"):
        files[name] = output_dir / name
    return files


def run_demo(output_dir: Path, seed: int = 0, progress: bool = True,
             overwrite: bool = False) -> list[RunResult]:
    """Run the demo, print the table, write JSON/CSV/PNG results under ``output_dir``.

    Existing files there are replaced only with ``overwrite``; every path is checked before
    the first run starts.
    """
    from fedlabels.reporting.plots import plot_accuracy

    files = demo_outputs(output_dir)
    check_outputs(files, overwrite=overwrite)
    federation = load_federation("breast_cancer", clients=5, seed=seed)
    info(f"breast_cancer: m = 5 clients x {federation.summary()['client_sizes']} private, "
         f"|U| = {len(federation.X_public)}, test = {len(federation.y_test)}, seed {seed}")
    results = []
    for method, model, rounds, period in DEMO_RUNS:
        with warnings.catch_warnings():  # the demo prints its runs' caveats below
            warnings.simplefilter("ignore", RunCaveatWarning)
            res = run(method, federation, model=model, rounds=rounds, period=period,
                      seed=seed, progress=progress)
        tag = f"{method}_{model.split('(')[0]}"
        with writing(str(files[f"{tag} result"])):
            res.save_json(files[f"{tag} result"], overwrite=True)
            res.save_csv(files[f"{tag} rounds table"], overwrite=True)
            save_models(res, files[f"{tag} result"])
        results.append(res)
        if res.extra.get("interrupted"):  # Ctrl-C stopped this run: stop the demo too (the
            # next runs went on, for a minute or more, and the demo then exited 0)
            done = res.rounds[-1].round if res.rounds else 0
            print(f"fedlabels: the demo was interrupted in {tag} after round {done} of "
                  f"{rounds}; the runs so far are in {output_dir}/, and no summary was "
                  "written (run the demo again with --overwrite)", file=sys.stderr)
            raise KeyboardInterrupt
    rows = [{**r.summary_row(), "method": f"{r.method}/{r.models[0].split('(')[0]}"}
            for r in results]
    table = format_table(rows)
    print(table)
    warned = demo_warnings(rows, len(federation.y_test))
    for line in warned:
        print(line, file=sys.stderr)
    import pandas as pd

    with writing(str(output_dir)):
        write_atomic(files["summary.txt"], "\n".join([table, *warned]) + "\n")
        write_atomic(files["summary.csv"], pd.DataFrame(
            [{**r, "warnings": "; ".join(r["warnings"])} for r in rows]).to_csv(index=False))
        plot_accuracy(results, files["accuracy.png"],
                      title=f"breast_cancer, m = 5, seed {seed}: FedCT (trees) and FedAvg "
                            "(MLP)\nagainst local-only and centralized training",
                      overwrite=True)  # checked with the others before the first run
    info(f"\nresults written to {output_dir}/ (per run TAG.json, TAG.rounds.csv and "
         "TAG.models.npz, summary.txt, summary.csv, accuracy.png)")
    return results


def demo_warnings(rows: list[dict[str, Any]], n_test: int | None = None) -> list[str]:
    """Each run's caveats, and a federated run below its model's local-only reference
    (beyond noise or not, on a test set of ``n_test`` records)."""
    from fedlabels.results.caveats import below_reference

    out = table_warnings(rows)
    local = {r["method"].split("/", 1)[1]: r["mean_acc"] for r in rows
             if r["method"].startswith("local/")}
    for r in rows:
        method, model = r["method"].split("/", 1)
        line = None if method in ("local", "centralized") else below_reference(
            r["mean_acc"], local.get(model), f"local/{model}", n_test=n_test)
        if line:
            out.append(f"fedlabels: warning: {r['method']} on {r['dataset']}: {line}")
    return out
