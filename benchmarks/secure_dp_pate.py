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
import warnings
from typing import Any

import fedlabels as fl
from secure_dp_fedavg import interleaved, print_table, write_rows

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

    runs = interleaved(run, MODES, args.reps)
    print(f"{args.dataset}, {args.clients} clients, dp-pate defaults at ε = {args.epsilon:g}, "
          f"δ = 1e-5, seed {args.seed}, {args.reps} runs per mode")
    rows = print_table(runs, "noise_sigma", "bytes up / client | bytes down / client",
                       "student accuracy")
    write_rows(args, rows)

if __name__ == "__main__":
    main()
