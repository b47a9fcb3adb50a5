"""FedCT vs the label-sharing baselines (DD, FedMD, PATE, DP-PATE, FREDY) on Fashion-MNIST.

The FedCT paper's Table 1 setup, reduced to fit a shared 2-core CPU: m = 5 iid clients with
2,000 private examples each (10,000 in all, as in the paper), the official 10,000 test
images, the MLP 784-512-512-10 (Adam, lr 1e-3, batch 64), but |U| = 5,000 (paper 50,000) and
R·b = 30·50 = 1,500 local steps (paper 20,000). Every method gets the same local-step budget:

* FedCT, DD, FedMD: R rounds of b steps (FedMD: plus its transfer-learning and digest steps);
* PATE, DP-PATE: teachers take R·b steps, then the student R·b steps on the labelled queries;
* FREDY: R FedAvg rounds of b steps for the teachers, then the student R·b steps.

Usage::

    nice -n 10 python benchmarks/baselines_table1.py --seed 0 --out results/baselines

Writes one JSON per method and ``summary.md``. Needs ``fedlabels fetch fashion_mnist``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import fedlabels as fl
from fedlabels.core.files import write_atomic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--per-client", type=int, default=2000)
    parser.add_argument("--unlabeled", type=int, default=5000)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--model", default="mlp(hidden=512-512)")
    parser.add_argument("--sigma", type=float, default=2.0, help="DP-PATE GNMax sigma")
    parser.add_argument("--fredy-epsilon", type=float, default=1.0,
                        help="FREDY nominal epsilon per query (option epsilon_per_query)")
    parser.add_argument("--methods", default="fedct,dd,fedmd,pate,dp-pate,fredy",
                        help="comma-separated; 'local' (no communication) is also available")
    parser.add_argument("--out", default="results/baselines")
    args = parser.parse_args()
    torch.set_num_threads(1)

    steps = args.rounds * args.period
    options = {
        "fedct": {},
        "local": {},
        "dd": {"distill_weight": 1.0},
        "fedmd": {"public_labeled": args.unlabeled // 10, "public_subset": args.unlabeled,
                  "transfer_steps": 5 * args.period, "digest_steps": args.period},
        "pate": {"teacher_steps": steps},
        "dp-pate": {"teacher_steps": steps, "noise_sigma": args.sigma, "delta": 1e-5},
        "fredy": {"teacher_rounds": args.rounds, "epsilon_per_query": args.fredy_epsilon,
                  "delta": 1e-5},
    }
    fed = fl.load_federation("fashion_mnist", clients=args.clients,
                             private_per_client=args.per_client, unlabeled=args.unlabeled,
                             seed=args.seed)
    out = Path(args.out)
    rows = []
    for method in args.methods.split(","):
        t0 = time.perf_counter()
        result = fl.run(method, fed, model=args.model, rounds=args.rounds, period=args.period,
                        seed=args.seed, eval_every=args.eval_every, options=options[method],
                        progress=False)
        result.save_json(out / f"{method}.json", overwrite=True)
        privacy = result.extra.get("privacy", {})
        eps = privacy.get("epsilon")
        rows.append({"method": method, "acc": result.final["mean_accuracy"],
                     "min": result.final["min_accuracy"], "max": result.final["max_accuracy"],
                     "up_bytes_per_client_round": result.mean_bytes_up_per_client_round(),
                     "epsilon": eps, "delta": privacy.get("delta"),
                     "wall_s": time.perf_counter() - t0, "options": options[method]})
        print(json.dumps(rows[-1]), flush=True)
    lines = ["| method | ACC (mean over clients) | min | max | up bytes / client / round | "
             "ε | δ | wall s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = "—" if r["epsilon"] is None or r["epsilon"] == float("inf") else \
            f"{r['epsilon']:.4g}"
        lines.append(f"| {r['method']} | {r['acc']:.4f} | {r['min']:.4f} | {r['max']:.4f} | "
                     f"{r['up_bytes_per_client_round']:,.0f} | {eps} | {r['delta']} | "
                     f"{r['wall_s']:.0f} |")
    write_atomic(out / "summary.md", "\n".join(lines) + "\n")
    write_atomic(out / "summary.json", json.dumps(rows, indent=2, default=str) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
