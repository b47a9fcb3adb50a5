"""DP-PATE's accuracy with GNMax's σ calibrated by the exact Gaussian composition against the
RDP calibration it replaced, at the same formal ε (docs/privacy.md, Defaults).

dp-pate's ``--epsilon`` defaults (20 cluster queries, logreg teachers, one per 8 private
records and at most 10 per client, a logreg student), written out as options so both arms
differ only in σ: ``noise_sigma`` is ``calibrate_gnmax_sigma(ε, 20, δ)`` (what ``--epsilon``
gives today; the script checks it against an ``--epsilon`` run) or the same with
``accountant="rdp"`` (the calibration before). For each ε and seed the two arms take turns,
``--repeats`` times (the noise is secret, OS entropy); printed per arm: σ, the ε spent (both
are within ε), the share of released labels equal to the noiseless vote's argmax and the
student's test accuracy, mean ± std over seeds × repeats, and the paired difference
now − before::

    nice -n 10 python benchmarks/gnmax_calibration.py --epsilons 0.5,1,2 --seeds 0,1,2,3,4 \\
        --repeats 4
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

import fedlabels as fl
from fedlabels.privacy.vote_accounting import calibrate_gnmax_sigma

DELTA = 1e-5
QUERIES = 20
DEFAULTS = {"queries": QUERIES, "query_selection": "clusters", "student_model": "logreg",
            "delta": DELTA}


def teachers(fed: fl.Federation) -> int:
    """dp-pate's default under ``--epsilon``: one teacher per 8 records, at most 10; one
    option sets every client's, so the clients must agree on it."""
    counts = {max(1, min(10, len(c.y) // 8)) for c in fed.clients}
    if len(counts) != 1:
        raise SystemExit(f"the clients' default teacher counts differ ({sorted(counts)}); "
                         "choose a federation where they agree")
    return counts.pop()


def one_run(fed: fl.Federation, seed: int, sigma: float, k: int) -> dict[str, float]:
    result = fl.run("dp-pate", fed, model="logreg", rounds=1, seed=seed, progress=False,
                    options={**DEFAULTS, "noise_sigma": sigma, "teachers_per_client": k})
    server = result.rounds[0].server
    return {"student": float(result.final["mean_accuracy"]),
            "labels": float(server["labels_equal_plain_argmax"]),
            "epsilon": float(result.extra["privacy"]["epsilon"])}


def check_default_sigma(fed: fl.Federation, seed: int, epsilon: float, sigma: float) -> None:
    """The new arm's σ is what ``--epsilon`` gives (same queries, same teachers)."""
    result = fl.run("dp-pate", fed, rounds=1, seed=seed, progress=False,
                    options={"epsilon": epsilon})
    got = result.extra["privacy"]["noise_sigma"]
    if got != sigma:
        raise SystemExit(f"--epsilon {epsilon} gave σ {got}, expected {sigma}")


def paired(got: dict[str, list[dict[str, float]]], key: str) -> str:
    """Mean ± standard error of now − before over the runs taken in turn."""
    now, before = (np.array([r[key] for r in runs]) for runs in got.values())
    diff = now - before
    return f"{diff.mean():+.3f} ± {diff.std(ddof=1) / np.sqrt(len(diff)):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--json", default=None, help="write the rows here too")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    print(f"{args.dataset}, {args.clients} clients, dp-pate --epsilon defaults (Q = {QUERIES} "
          f"clusters), δ = {DELTA:g}, seeds {args.seeds}, {args.repeats} repeats")
    print("| ε | calibration | σ | ε spent | labels = noiseless argmax | student accuracy |")
    print("|---|---|---|---|---|---|")
    for eps in (float(e) for e in args.epsilons.split(",")):
        sigmas = {"exact Gaussian (now)": calibrate_gnmax_sigma(eps, QUERIES, DELTA),
                  "RDP (before)": calibrate_gnmax_sigma(eps, QUERIES, DELTA, accountant="rdp")}
        got: dict[str, list[dict[str, float]]] = {arm: [] for arm in sigmas}
        for seed in seeds:
            fed = fl.load_federation(args.dataset, clients=args.clients, seed=seed)
            check_default_sigma(fed, seed, eps, sigmas["exact Gaussian (now)"])
            k = teachers(fed)
            for _ in range(args.repeats):
                for arm, sigma in sigmas.items():  # the arms take turns
                    got[arm].append(one_run(fed, seed, sigma, k))
        for arm, sigma in sigmas.items():
            s = np.array([r["student"] for r in got[arm]])
            lab = np.array([r["labels"] for r in got[arm]])
            spent = max(r["epsilon"] for r in got[arm])
            print(f"| {eps:g} | {arm} | {sigma:.3f} | {spent:.3f} | {lab.mean():.3f} ± "
                  f"{lab.std(ddof=1):.3f} | {s.mean():.3f} ± {s.std(ddof=1):.3f} |")
            rows.append({"epsilon": eps, "calibration": arm, "sigma": sigma,
                         "epsilon_spent": spent, "student": s.tolist(),
                         "labels": lab.tolist()})
        ratio = sigmas["exact Gaussian (now)"] / sigmas["RDP (before)"] - 1
        diffs = [paired(got, key) for key in ("labels", "student")]
        print(f"| {eps:g} | now − before, paired (mean ± s.e.) | {ratio:+.1%} | | "
              f"{diffs[0]} | {diffs[1]} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
