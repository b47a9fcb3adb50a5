"""How right can FREDY's released labels be at a total ε? (docs/privacy.md, "FREDY's sensitivity")

For Q queries at a total (ε, δ), n teachers and C classes, per query:

* ``lnmax_2n``: FREDY's Laplace noisy-max with the formal L1 sensitivity 2n (scale calibrated
  as the method does), probability that a unanimous vote comes out right (Monte Carlo);
* ``rr``: k-ary randomized response on the teachers' plurality label, the best per-label
  release whose guarantee holds whatever the sensitivity (it is ε₁-DP between any two
  labels); ε₁ is the largest whose Q-fold composition meets (ε, δ) exactly (the privacy-loss
  distribution of the worst pair, every query's label changed, summed in closed form);
* ``lnmax_2``: the same noisy-max with sensitivity 2 (``teacher_rounds=1``): a unanimous vote
  and a 3-of-5 vote against a runner-up of 1 (Monte Carlo).

The Monte Carlo uses a seeded generator (``--seed``): it estimates a probability, it is not
a release. Usage::

    python benchmarks/fredy_label_bound.py --out benchmarks/results/fredy_label_bound.json
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from fedlabels.privacy.noisy_max import VOTE_L1_SENSITIVITY
from fedlabels.privacy.vote_accounting import calibrate_laplace_scale


def rr_delta(eps1: float, n_classes: int, n_queries: int, epsilon: float) -> float:
    """Tight δ(ε) of Q k-ary randomized responses at ε₁, every query's input changed."""
    z = math.exp(eps1) + n_classes - 1
    p_own, p_other, p_rest = math.exp(eps1) / z, 1.0 / z, (n_classes - 2) / z
    total = 0.0
    for a in range(n_queries + 1):  # a outputs equal the true label, b the neighbour's
        for b in range(n_queries - a + 1):
            loss = eps1 * (a - b)
            if loss > epsilon:
                c = n_queries - a - b
                prob = (math.comb(n_queries, a) * math.comb(n_queries - a, b)
                        * p_own ** a * p_other ** b * p_rest ** c)
                total += prob * (1.0 - math.exp(epsilon - loss))
    return total


def rr_epsilon_per_label(epsilon: float, delta: float, n_classes: int, n_queries: int
                         ) -> float:
    lo, hi = 0.0, epsilon
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rr_delta(mid, n_classes, n_queries, epsilon) <= delta else (lo, mid)
    return lo


def noisy_max_right(votes: list[int], scale: float, n_classes: int, rng: np.random.Generator,
                    draws: int) -> float:
    counts = np.zeros((draws, n_classes))
    counts[:, :len(votes)] = votes
    noisy = counts + rng.laplace(0.0, scale, counts.shape)
    return float(np.mean(np.argmax(noisy, axis=1) == 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--teachers", type=int, default=5)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--queries", default="10,20,50")
    ap.add_argument("--draws", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    n, k = args.teachers, args.classes
    rows = []
    for q in map(int, args.queries.split(",")):
        b_2n = calibrate_laplace_scale(args.epsilon, q, args.delta, VOTE_L1_SENSITIVITY * n)
        b_2 = calibrate_laplace_scale(args.epsilon, q, args.delta, VOTE_L1_SENSITIVITY)
        eps1 = rr_epsilon_per_label(args.epsilon, args.delta, k, q)
        rows.append({
            "queries": q,
            "lnmax_2n": {"scale": b_2n,
                         "right_unanimous": noisy_max_right([n], b_2n, k, rng, args.draws)},
            "rr": {"epsilon_per_label": eps1,
                   "right": math.exp(eps1) / (math.exp(eps1) + k - 1),
                   "basic_composition_epsilon_per_label": args.epsilon / q},
            "lnmax_2": {"scale": b_2,
                        "right_unanimous": noisy_max_right([n], b_2, k, rng, args.draws),
                        "right_3_of_5": noisy_max_right([3, 1, 1], b_2, k, rng, args.draws)},
        })
        r = rows[-1]
        print(f"Q = {q:3d}: LNMax 2n {r['lnmax_2n']['right_unanimous']:.3f} | RR "
              f"(eps1 {eps1:.3f}) {r['rr']['right']:.3f} | LNMax 2: unanimous "
              f"{r['lnmax_2']['right_unanimous']:.3f}, 3 of 5 {r['lnmax_2']['right_3_of_5']:.3f}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"setting": {k2: v for k2, v in vars(args).items() if k2 != "out"},
                       "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
