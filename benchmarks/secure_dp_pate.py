"""DP-PATE with the teachers' noise under secure aggregation next to the server's GNMax
(docs/privacy.md §5b), at one ε, with the defaults ``--epsilon`` gives (20 cluster queries,
logreg teachers, up to 10 per client, a logreg student).

For each mode, simulator runs (same data, seed): σ (calibrated to ε by that mode's
accountant), the ε spent, the bytes a client sends and receives in the vote round (the
protocol messages as serialized by the comm meter, evaluation excluded), the student's
final test accuracy of each run and the median CPU seconds of a run (``os.times``; after
one warm-up run of each mode, the modes interleaved). The noise is secret (OS entropy), so
the accuracies vary from run to run; the byte counts and σ do not.

    nice -n 10 python benchmarks/secure_dp_pate.py --seed 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from typing import Any

import fedlabels as fl
from secure_dp_fedavg import cpu_seconds, protocol_bytes

MODES: dict[str, dict[str, Any]] = {
    "GNMax, server adds the noise": {},
    "secure aggregation, min_group = all": {"aggregation": "secure"},
    "secure aggregation, min_group = 3": {"aggregation": "secure", "min_group": 3},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3, help="runs of each mode, interleaved")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--json", default=None, help="write the rows here too")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    fed = fl.load_federation(args.dataset, clients=args.clients, seed=args.seed)

    def run(options: dict[str, Any]) -> Any:
        return fl.run("dp-pate", fed, rounds=1, seed=args.seed,
                      options={**options, "epsilon": args.epsilon})

    for options in MODES.values():  # warm-up: imports, the accountants' caches
        run(options)
    runs: dict[str, list[tuple[dict[str, Any], float]]] = {name: [] for name in MODES}
    for _ in range(args.reps):
        for name, options in MODES.items():
            start = cpu_seconds()
            result = run(options)
            runs[name].append((result.to_dict(), cpu_seconds() - start))
    print(f"{args.dataset}, {args.clients} clients, dp-pate defaults at ε = {args.epsilon:g}, "
          f"δ = 1e-5, seed {args.seed}, {args.reps} runs per mode")
    print("| mode | σ | ε spent | bytes up / client | bytes down / client | ring bits "
          "| student accuracy, each run | CPU s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name, done in runs.items():
        d = done[0][0]
        p = d["privacy"]
        row = {"mode": name, "sigma": p["noise_sigma"],
               "epsilon": p["epsilon"], "bytes_up": protocol_bytes(d, "bytes_up"),
               "bytes_down": protocol_bytes(d, "bytes_down"), "ring_bits": p.get("ring_bits"),
               "accuracy": [r["final"]["mean_accuracy"] for r, _ in done],
               "cpu_s": statistics.median(c for _, c in done)}
        rows.append(row)
        accs = ", ".join(f"{a:.3f}" for a in row["accuracy"])
        print(f"| {name} | {row['sigma']:.4g} | {row['epsilon']:.4g} | {row['bytes_up']:,.0f} "
              f"| {row['bytes_down']:,.0f} | {row['ring_bits'] or '—'} | {accs} | "
              f"{row['cpu_s']:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
