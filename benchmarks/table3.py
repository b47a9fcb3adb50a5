"""Our Table 3 and Table 5: any model at every client (FedCT paper, Tables 3 and 5).

Table 3: FedCT vs centralized vs local-only for DT, RuleFit, XGBoost and RF on breast_cancer,
wine and the mlbench tables (letter, shuttle, dna, vehicle), m = 5 clients, iid, 3 seeds.
Table 5: mixed model teams on breast_cancer (paper split) vs homogeneous teams.

Every run is appended to ``OUT/runs.jsonl`` as soon as it finishes (re-running skips the
runs already there), and the markdown tables are rebuilt from that file::

    fedlabels fetch mlbench
    nice -n 10 python benchmarks/table3.py --out results/table3
    python benchmarks/table3.py --out results/table3 --report-only

Cheap runs come first and RuleFit on letter (26 one-vs-rest rule ensembles per fit) last, so
an interrupted benchmark still yields complete rows for the rest; each cell states how many
seeds it holds.
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

MODELS = {"DT": "dt", "RuleFit": "rulefit", "XGBoost": "xgboost", "RF": "rf"}
DATASETS = ["breast_cancer", "wine", "vehicle", "dna", "shuttle", "letter"]
# refit learners reach a fixed point of the consensus within a few rounds (the
# `consensus_changed` column shows it); the small bundled sets get a few more anyway
ROUNDS = {"breast_cancer": 5, "wine": 5, "vehicle": 3, "dna": 3, "shuttle": 3, "letter": 3}
BUNDLED = ("breast_cancer", "wine")
METHODS = ("fedct", "centralized", "local")
TEAMS = {
    "DT, RF, RuleFit, XGBoost, RF": "dt,rf,rulefit,xgboost,rf",
    "DT, MLP, RuleFit, XGBoost, RF": "dt,mlp,rulefit,xgboost,rf",
    "5 x XGBoost": "xgboost",
    "5 x DT": "dt",
    "5 x RF": "rf",
    "5 x RuleFit": "rulefit",
}
# MLP = the torch MLP (512-512, Adam 1e-3, b = 50 steps per round), the other members refit
TABLE5_ROUNDS = 5  # = ROUNDS["breast_cancer"]: homogeneous teams are Table 3's FedCT runs


def _key(rec: dict[str, Any]) -> tuple:
    return (rec["table"], rec["dataset"], rec["model"], rec["method"], rec["seed"])


def _load(path: Path) -> dict[tuple, dict[str, Any]]:
    if not path.exists():
        return {}
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {_key(r): r for r in recs}


def run_one(table: str, dataset: str, model: str, method: str, seed: int,
            rounds: int) -> dict[str, Any]:
    fed = fl.load_federation(dataset, clients=5, seed=seed)
    t0 = time.perf_counter()
    result = fl.run(method, fed, model=model, rounds=rounds if method == "fedct" else 1,
                    seed=seed, progress=False)
    last = result.rounds[-1]
    return {
        "table": table, "dataset": dataset, "model": model, "method": method, "seed": seed,
        "rounds": len(result.rounds), "mean_accuracy": result.final["mean_accuracy"],
        "client_accuracies": result.final["client_accuracies"],
        "consensus_accuracy": last.server.get("consensus_accuracy"),
        "consensus_changed_last": last.server.get("consensus_changed"),
        "n_public": len(fed.X_public), "n_private": int(sum(len(c) for c in fed.clients)),
        "n_test": len(fed.y_test), "n_classes": fed.n_classes,
        "wall_seconds": time.perf_counter() - t0,
    }


def jobs(seeds: list[int], datasets: list[str]) -> list[tuple]:
    """Run order: breast_cancer, Table 5, then one seed of everything at a time (so that an
    interrupted benchmark still covers every cell), RuleFit on letter last."""
    def block(ds: str, model: str, seed: int) -> list[tuple]:
        return [("3", ds, model, method, seed, ROUNDS.get(ds, 3)) for method in METHODS]

    first = [j for model in MODELS.values() for seed in seeds
             for j in block("breast_cancer", model, seed) if "breast_cancer" in datasets]
    t5 = [("5", "breast_cancer", team, "fedct", seed, TABLE5_ROUNDS)
          for team in TEAMS.values() if "," in team for seed in seeds]
    rest, late = [], []
    for seed in seeds:
        order = ["vehicle", "dna", "shuttle", "letter", "wine"]  # cheap first, wine last
        for ds in sorted((d for d in datasets if d != "breast_cancer"),
                         key=lambda d: order.index(d) if d in order else -1):
            for model in MODELS.values():
                (late if (ds, model) == ("letter", "rulefit") else rest).extend(
                    block(ds, model, seed))
    return first + t5 + rest + late


def _ms(values: list[float]) -> str:
    a = 100 * np.asarray(values)
    return f"{a.mean():.1f} ± {a.std():.1f}" if len(a) else "—"


def report(recs: dict[tuple, dict[str, Any]], seeds: list[int]) -> str:
    lines = ["## Table 3: FedCT vs centralized vs local-only (accuracy %, mean ± std over "
             "seeds; FedCT and local = mean over the 5 clients)", ""]
    lines.append("| dataset | model | FedCT | centralized | local-only | FedCT − local | "
                 "centralized − FedCT | seeds | FedCT consensus changed in last round |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for ds in DATASETS:
        for label, model in MODELS.items():
            cell = {m: [recs[k]["mean_accuracy"] for k in sorted(recs)
                        if k[:4] == ("3", ds, model, m) and k[4] in seeds] for m in METHODS}
            if not any(cell.values()):
                continue
            n = min(len(v) for v in cell.values())
            f, c, lo = (np.mean(cell[m]) if cell[m] else np.nan for m in METHODS)
            changed = [recs[k]["consensus_changed_last"] for k in recs
                       if k[:4] == ("3", ds, model, "fedct")]
            lines.append(f"| {ds} | {label} | {_ms(cell['fedct'])} | {_ms(cell['centralized'])}"
                         f" | {_ms(cell['local'])} | {100 * (f - lo):+.1f} | "
                         f"{100 * (c - f):+.1f} | {n} | "
                         f"{max(changed) if changed else float('nan'):.3f} |")
    lines += ["", "## Table 5: mixed model teams on breast_cancer (FedCT, "
              f"{TABLE5_ROUNDS} rounds, accuracy %)", "",
              "| team (clients 1..5) | FedCT mean over clients | per-model-type accuracy "
              "(seed mean) | seeds |", "|---|---|---|---|"]
    for label, team in TEAMS.items():
        table = "5" if "," in team else "3"  # a homogeneous team is a Table 3 FedCT run
        rs = [recs[k] for k in sorted(recs) if k[:4] == (table, "breast_cancer", team, "fedct")
              and k[4] in seeds]
        if not rs:
            continue
        specs = team.split(",") if "," in team else [team] * 5
        per = np.mean([r["client_accuracies"] for r in rs], axis=0)
        parts = ", ".join(f"{s} {100 * a:.1f}" for s, a in zip(specs, per, strict=True))
        lines.append(f"| {label} | {_ms([r['mean_accuracy'] for r in rs])} | {parts} | "
                     f"{len(rs)} |")
    sizes = {}
    for r in recs.values():
        sizes[r["dataset"]] = (r["n_public"], r["n_private"], r["n_test"], r["n_classes"],
                               r["rounds"] if r["method"] == "fedct" else None)
    lines += ["", "Sizes (|U| / private total over 5 clients / test, classes): " + "; ".join(
        f"{d} {s[0]} / {s[1]} / {s[2]}, {s[3]}" for d, s in sizes.items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/table3")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs.jsonl"
    recs = _load(runs)
    warnings.simplefilter("ignore")
    if not args.report_only:
        todo = [j for j in jobs(seeds, args.datasets.split(",")) if j[:5] not in recs]
        for i, (table, ds, model, method, seed, rounds) in enumerate(todo, 1):
            rec = run_one(table, ds, model, method, seed, rounds)
            recs[_key(rec)] = rec
            with runs.open("a") as fh:
                fh.write(json.dumps(rec) + "\n")
            print(f"[{i}/{len(todo)}] table {table} {ds} {model} {method} seed {seed}: "
                  f"{rec['mean_accuracy']:.4f} ({rec['wall_seconds']:.1f}s)", flush=True)
            (out / "tables.md").write_text(report(recs, seeds))
    text = report(recs, seeds)
    (out / "tables.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
