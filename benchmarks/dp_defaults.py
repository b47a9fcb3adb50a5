"""Measure candidate DP defaults at a total ε (docs/privacy.md, Defaults).

Each case is a method and explicit options (so the rows stay reproducible whatever the
defaults become); each runs with the dataset's default split, m = 5 (``--clients``), R = 20
rounds, on
seeds ``--seeds``, ``--repeats`` times per seed (the DP noise comes from the OS CSPRNG, so
repeats differ), and prints the mean ± std of the final mean client accuracy::

    nice -n 10 python benchmarks/dp_defaults.py --cases pate --datasets digits,breast_cancer \\
        --seeds 0,1,2 --repeats 4
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from typing import Any

import numpy as np

import fedlabels as fl

EPS = {"epsilon": 8.0}
MLP = "mlp(hidden=128)"
RECOMMENDED = {**EPS, "mechanism": "dpsgd", "site_model": "private", "quorum": 0.8}
#: case -> [(label, method, model or None, options)]; "U" in queries: all of U
CASES: dict[str, list[tuple[str, str, str | None, dict[str, Any]]]] = {
    "local": [("local dt", "local", "dt", {}), ("local mlp", "local", MLP, {}),
              ("fedct mlp", "fedct", MLP, {})],
    # dp-pate's defaults before cluster queries: dt teachers, one per client, random queries
    "pate": [(f"dp-pate Q={q} {s}", "dp-pate", "dt",
              {**EPS, "queries": q, "student_model": s, "query_selection": "random",
               "teachers_per_client": 1})
             for q in ("U", 10, 20, 50) for s in ("logreg", "dt")],
    "fredy": [(f"fredy Q={q} {s}", "fredy", None, {**EPS, "queries": q, "student_model": s})
              for q, s in (("U", "mlp"), (5, "logreg"))],
    # dp-pate's defaults with --epsilon (clusters, Q = 20, one teacher per 8 records, at
    # most 10 per client, logreg student) with dt teachers (the default model until
    # fb442a0) and logreg teachers (the default model now); then
    # explicit ablations: clusters alone, teachers per client alone, both
    "clusters": [("dp-pate default, dt teachers", "dp-pate", "dt", EPS),
                 ("dp-pate default, logreg teachers", "dp-pate", "logreg", EPS),
                 ("dp-pate default + unscaled, logreg teachers", "dp-pate", "logreg",
                  {**EPS, "cluster_space": "unscaled"}),
                 *[(f"dp-pate {sel} Q=20 k={k}, logreg teachers", "dp-pate", "logreg",
                    {**EPS, "queries": 20, "student_model": "logreg", "query_selection": sel,
                     "teachers_per_client": k})
                   for sel, k in (("clusters", 1), ("random", 10), ("clusters", 10))]],
    "fredy-clusters": [(f"fredy clusters Q={q}", "fredy", None,
                        {**EPS, "queries": q, "query_selection": "clusters",
                         "student_model": "logreg"}) for q in (2, 10)],
    # teacher_rounds=1: no weights exchanged, disjoint teachers, L1 sensitivity 2 (not 2n)
    "fredy-disjoint": [(f"fredy clusters Q={q} teacher_rounds=1", "fredy", None,
                        {**EPS, "queries": q, "query_selection": "clusters",
                         "student_model": "logreg", "teacher_rounds": 1})
                       for q in (10, 20)],
    "fedct": [("dp-fedct xor", "dp-fedct", "dt", {**EPS, "mechanism": "xor"}),
              ("dp-fedct xor quorum 0.8", "dp-fedct", "dt",
               {**EPS, "mechanism": "xor", "quorum": 0.8}),
              ("dp-fedct subsample-aggregate", "dp-fedct", "dt",
               {**EPS, "mechanism": "subsample-aggregate"}),
              ("dp-fedct dpsgd", "dp-fedct", MLP, {**EPS, "mechanism": "dpsgd"}),
              ("dp-fedct dpsgd private quorum 0.8", "dp-fedct", MLP, RECOMMENDED)],
}


def _options(options: dict[str, Any], fed: fl.Federation) -> dict[str, Any]:
    out = dict(options)
    if out.get("queries") == "U":
        out["queries"] = len(fed.X_public)
    if out.get("student_model") == "mlp":
        out["student_model"] = None  # the client's own model (fredy's default: the mlp)
    return out


def _cases(names: str, only: str | None) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    cases = [c for name in names.split(",") for c in CASES[name]]
    return [c for c in cases if only is None or only in c[0]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="local,pate,fedct", help=f"of {', '.join(CASES)}")
    ap.add_argument("--datasets", default="digits,breast_cancer")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--clients", type=int, default=5, help="m (the teachers of dp-pate)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per seed (fresh DP noise)")
    ap.add_argument("--only", help="run only the cases whose label contains this text")
    ap.add_argument("--out", help="JSON lines file to append every run to")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # one-shot methods warn that they use one round
    for dataset in args.datasets.split(","):
        for label, method, model, options in _cases(args.cases, args.only):
            accs = []
            for seed in map(int, args.seeds.split(",")):
                fed = fl.load_federation(dataset, clients=args.clients, seed=seed)
                for _ in range(args.repeats if method != "local" else 1):
                    t = time.perf_counter()
                    res = fl.run(method, fed, model=model, rounds=20, seed=seed,
                                 options=_options(options, fed), progress=False)
                    accs.append(res.final["mean_accuracy"])
                    if args.out:
                        with open(args.out, "a") as fh:
                            fh.write(json.dumps({"label": label, "dataset": dataset,
                                                 "seed": seed, "accuracy": accs[-1],
                                                 "seconds": time.perf_counter() - t})
                                     + "\n")
            print(f"{dataset:14s} {label:36s} {np.mean(accs):.3f} ± {np.std(accs):.3f} "
                  f"(min {np.min(accs):.3f}, n = {len(accs)})", flush=True)


if __name__ == "__main__":
    main()
