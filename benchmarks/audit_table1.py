"""Our Table 1: accuracy (ACC) and membership-inference vulnerability (VUL) on Fashion-MNIST.

m = 5 iid clients, a reduced configuration that fits a shared 2-core machine (see
docs/audit.md): 500 private images per client, |U| = 20,000 (+ the attacker's query set for
query-based threat models), the official test split divided into non-members, attacker data,
population points and the evaluation set, the torch MLP 784-256-256-10, 20 rounds of b = 50
local steps. Every method is audited under its own threat model
(:mod:`fedlabels.audit.threats`) with every attack; VUL is the strongest attack's mean AUC
over the 5 clients at the worst recorded round.

Usage::

    nice -n 10 python benchmarks/audit_table1.py --out results/audit_table1 --seed 0
    python benchmarks/audit_table1.py --methods fedct,fedavg,local --seed 1

Writes one JSON (with ``privacy``) and one ROC plot per method, and ``table1.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import fedlabels as fl
from fedlabels.audit import audit_federation, auditable_methods
from fedlabels.audit.report import plot_roc
from fedlabels.errors import FedLabelsError
from fedlabels.learners import parse_model_spec
from fedlabels.protocols import METHODS
from fedlabels.results import write_atomic

# privacy budgets of the DP methods (each needs one); the table states them
METHOD_OPTIONS: dict[str, dict[str, float]] = {
    "dp-fedct": {"epsilon_per_round": 1.0},  # pure ε per round (k-ary randomized response)
    "dp-fedavg": {"epsilon": 8.0},  # total ε budget of the run, δ = 1e-5
    "dp-pate": {"epsilon": 8.0},  # total ε budget of GNMax over all queries
    "fredy": {"epsilon_per_query": 0.2},  # nominal ε per query of the Laplace noisy max
}


def table(rows: list[dict]) -> str:
    head = ("| method | threat model | ACC | VUL (strongest attack) | TPR @ 1 % FPR | "
            "worst view | audit time (s) |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['threat']} | {r['acc']:.3f} | {r['vul']:.3f}"
                     f"{' (' + r['attack'] + ')' if r['attack'] else ' (by construction)'} | "
                     f"{r['tpr1']:.3f} | {r['view'] or '-'} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="all",
                        help="comma-separated, or 'all' = every registered method with a "
                             "threat model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=500)
    parser.add_argument("--unlabeled", type=int, default=20_000)
    parser.add_argument("--model", default="mlp(hidden=256-256)")
    parser.add_argument("--members", type=int, default=250)
    parser.add_argument("--population", type=int, default=500)
    parser.add_argument("--refs", type=int, default=4)
    parser.add_argument("--views", type=int, default=3)
    parser.add_argument("--out", default="results/audit_table1")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = ([m for m in METHODS if m in auditable_methods()] if args.methods == "all"
             else [m.strip() for m in args.methods.split(",")])
    out = Path(args.out)
    rows = []
    for name in names:
        fed = fl.load_federation("fashion_mnist", n_clients=5, n_unlabeled=args.unlabeled,
                                 private_per_client=args.per_client, seed=args.seed)
        t0 = time.perf_counter()
        options = METHOD_OPTIONS.get(name, {})
        try:
            result, _ = audit_federation(
                name, fed, parse_model_spec(args.model), rounds=args.rounds,
                period=args.period, seed=args.seed, eval_every=args.rounds,
                n_members=args.members, n_population=args.population, n_refs=args.refs,
                views=args.views, options=options,
                config={"benchmark": "audit_table1", **vars(args)}, progress=False)
        except FedLabelsError as exc:  # a method that cannot run this setup: say so, go on
            print(json.dumps({"method": name, "error": str(exc)}), flush=True)
            continue
        seconds = time.perf_counter() - t0
        path = out / f"{name}_seed{args.seed}.json"
        result.save_json(path)
        p = result.extra["privacy"]
        plot_roc(p, path.with_suffix(".roc.png"), title=f"{name} on fashion_mnist")
        label = name + "".join(f" ({k}={v})" for k, v in options.items())
        rows.append({"method": label, "threat": p["threat_model"]["key"],
                     "acc": result.final["mean_accuracy"], "vul": p["vul"],
                     "attack": p.get("strongest_attack"), "tpr1": p["tpr_at_1pct_fpr"],
                     "view": p.get("worst_view"), "seconds": seconds})
        print(json.dumps(rows[-1]), flush=True)
        write_atomic(out / f"table1_seed{args.seed}.md", table(rows))


if __name__ == "__main__":
    main()
