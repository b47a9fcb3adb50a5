"""DP-FedAvg with distributed noise under secure aggregation next to the server-noised
discrete mode (docs/privacy.md §5, "Distributed noise under secure aggregation"), at one ε.

For each mode, one simulator run (same data, model, seed, rounds): σ (calibrated to ε by
that mode's accountant), the ε spent, the bytes a client sends and receives per round (the
protocol messages as serialized by the comm meter, evaluation excluded), the final test
accuracy (mean over clients) of each run and the median CPU seconds of a run (this process
and its worker processes, ``os.times``; after one warm-up run of each mode, the modes
interleaved). The noise is secret (OS entropy), so the accuracies vary from run to run;
the byte counts and σ do not.

    nice -n 10 python benchmarks/secure_dp_fedavg.py --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import warnings
from collections.abc import Callable
from typing import Any

import fedlabels as fl

MODES: dict[str, dict[str, Any]] = {
    "discrete, server adds the noise": {"noise": "discrete"},
    "secure aggregation, min_group = all": {"noise": "discrete", "aggregation": "secure"},
    "secure aggregation, min_group = 3": {"noise": "discrete", "aggregation": "secure",
                                          "min_group": 3},
}


def protocol_bytes(result: dict[str, Any], key: str) -> float:
    """Mean bytes per client per round of the protocol messages (a round's ``bytes_up`` /
    ``bytes_down`` count protocol messages only; evaluation is apart)."""
    rounds = result["rounds"]
    return sum(sum(r[key]) for r in rounds) / (len(rounds[0][key]) * len(rounds))


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (a run's
    worker processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def interleaved(run: Callable[[dict[str, Any]], Any], modes: dict[str, dict[str, Any]],
                reps: int, warm_up: Callable[[dict[str, Any]], Any] | None = None
                ) -> dict[str, list[tuple[dict[str, Any], float]]]:
    """Each mode's results (as dicts) and CPU seconds, ``reps`` runs each, the modes taking
    turns, after one warm-up run of each (imports, torch, the accountants' caches)."""
    for options in modes.values():
        (warm_up or run)(options)
    runs: dict[str, list[tuple[dict[str, Any], float]]] = {name: [] for name in modes}
    for _ in range(reps):
        for name, options in modes.items():
            start = cpu_seconds()
            result = run(options)
            runs[name].append((result.to_dict(), cpu_seconds() - start))
    return runs


def print_table(runs: dict[str, list[tuple[dict[str, Any], float]]], sigma_key: str,
                bytes_heads: str, accuracy_head: str) -> list[dict[str, Any]]:
    """The modes as a markdown table (σ from ``privacy[sigma_key]``); the rows it printed."""
    print(f"| mode | σ | ε spent | {bytes_heads} | ring bits | {accuracy_head}, each run "
          "| CPU s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name, done in runs.items():
        d = done[0][0]
        p = d["privacy"]
        row = {"mode": name, "sigma": p[sigma_key], "epsilon": p["epsilon"],
               "bytes_up": protocol_bytes(d, "bytes_up"),
               "bytes_down": protocol_bytes(d, "bytes_down"),
               "ring_bits": p.get("ring_bits"),
               "accuracy": [r["final"]["mean_accuracy"] for r, _ in done],
               "cpu_s": statistics.median(c for _, c in done)}
        rows.append(row)
        accs = ", ".join(f"{a:.3f}" for a in row["accuracy"])
        print(f"| {name} | {row['sigma']:.4g} | {row['epsilon']:.4g} | {row['bytes_up']:,.0f} "
              f"| {row['bytes_down']:,.0f} | {row['ring_bits'] or '—'} | {accs} | "
              f"{row['cpu_s']:.2f} |")
    return rows


def write_rows(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The arguments and rows to ``--json``, where given."""
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3, help="runs of each mode, interleaved")
    parser.add_argument("--model", default="mlp(hidden=32)")
    parser.add_argument("--dataset", default="breast_cancer")
    parser.add_argument("--json", default=None, help="write the rows here too")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    fed = fl.load_federation(args.dataset, clients=args.clients, seed=args.seed)

    def run(options: dict[str, Any], rounds: int = args.rounds) -> Any:
        return fl.run("dp-fedavg", fed, model=args.model, rounds=rounds, seed=args.seed,
                      options={**options, "epsilon": args.epsilon})

    runs = interleaved(run, MODES, args.reps, warm_up=lambda options: run(options, 1))
    print(f"{args.dataset}, {args.clients} clients, {args.model}, {args.rounds} rounds, "
          f"ε = {args.epsilon:g}, δ = 1e-5, seed {args.seed}, {args.reps} runs per mode")
    rows = print_table(runs, "noise_multiplier", "bytes up / client / round | bytes down / "
                       "client / round", "final accuracy")
    write_rows(args, rows)

if __name__ == "__main__":
    main()
