"""DP-FedCT kary's per-round ε calibrated by the exact k-ary accountant against the RDP
calibration it replaced, at the same total (ε, δ) (docs/privacy.md, DP-FedCT's k-ary RR).

Part 1 (no runs): for each (total ε, rounds R, s*_labels, classes k) the per-round ε, ε per
label ε₁ and the probability a label is kept, e^{ε₁}/(e^{ε₁} + k − 1), of both
calibrations, and the run's ε at each by the exact accountant (both within the total).
Part 2 (``--seeds``): DP-FedCT kary on ``--dataset`` with the per-round ε of each arm
(``epsilon_per_round``; the new arm's is checked against what ``--epsilon`` gives), the arms
taking turns per seed (the noise is secret, OS entropy); mean ± std of the final mean
accuracy and the paired difference now − before::

    nice -n 10 python benchmarks/kary_calibration.py --seeds 0,1,2,3,4
"""

from __future__ import annotations

import argparse
import math
import warnings

import numpy as np

import fedlabels as fl
from fedlabels.privacy.accounting import (
    LabelTally,
    _label_epsilon,
    _largest_round_epsilon,
    calibrate_kary_round_epsilon,
)

DELTA = 1e-5
#: (total ε, rounds, s*_labels, classes)
SETTINGS = [(4.0, 3, 370, 2), (8.0, 10, 2, 10), (4.0, 10, 10, 10), (8.0, 10, 10, 10),
            (8.0, 20, 30, 10), (2.0, 5, 50, 4), (8.0, 10, 500, 10)]


def _tally(eps_round: float, rounds: int, labels: int, k: int) -> LabelTally:
    p = k / (math.exp(eps_round / labels) + k - 1)  # as LabelTally.add keys a release
    return LabelTally(groups={(p, k): rounds * labels}, count=rounds)


def rdp_calibration(total: float, rounds: int, labels: int, k: int) -> float:
    """The calibration before: the largest per-round ε whose RDP composition is within."""
    return _largest_round_epsilon(
        lambda e: _label_epsilon(_tally(e, rounds, labels, k), DELTA, "rdp"), total, rounds)


def keep(eps_round: float, labels: int, k: int) -> float:
    e = math.exp(eps_round / labels)
    return e / (e + k - 1)


def table() -> None:
    print(f"δ = {DELTA:g}; per-round ε (keep probability of a label), before → now")
    print("| total ε | R | s*_labels | k | RDP (before) | exact (now) | ratio | run's ε "
          "by exact: before / now |")
    print("|---|---|---|---|---|---|---|---|")
    for total, rounds, labels, k in SETTINGS:
        before = rdp_calibration(total, rounds, labels, k)
        now = calibrate_kary_round_epsilon(total, DELTA, rounds, labels, k)
        spent = [_label_epsilon(_tally(e, rounds, labels, k), DELTA, "exact")
                 for e in (before, now)]
        print(f"| {total:g} | {rounds} | {labels} | {k} | {before:.4g} "
              f"({keep(before, labels, k):.4f}) | {now:.4g} ({keep(now, labels, k):.4f}) | "
              f"{now / before:.3f} | {spent[0]:.3f} / {spent[1]:.3f} |")


def accuracy(dataset: str, seeds: list[int], total: float, rounds: int, bits: int) -> None:
    labels = math.ceil(bits / 2)
    print(f"\n{dataset}, 5 clients, dp-fedct kary, model dt, {rounds} rounds, s* = {bits} bits "
          f"(given), total ε = {total:g}, δ = {DELTA:g}, seeds {seeds}")
    got: dict[str, list[float]] = {"RDP (before)": [], "exact (now)": []}
    for seed in seeds:
        fed = fl.load_federation(dataset, clients=5, seed=seed)
        k = fed.n_classes
        arms = {"RDP (before)": rdp_calibration(total, rounds, labels, k),
                "exact (now)": calibrate_kary_round_epsilon(total, DELTA, rounds, labels, k)}
        base = {"mechanism": "kary", "sensitivity": bits, "delta": DELTA}
        check = fl.run("dp-fedct", fed, model="dt", rounds=rounds, seed=seed, progress=False,
                       options={**base, "epsilon": total}).extra["privacy"]
        if check["epsilon_per_round"] != arms["exact (now)"]:
            raise SystemExit(f"--epsilon gave {check['epsilon_per_round']} per round")
        for arm, eps_round in arms.items():  # the arms take turns
            result = fl.run("dp-fedct", fed, model="dt", rounds=rounds, seed=seed,
                            progress=False, options={**base, "epsilon_per_round": eps_round})
            got[arm].append(float(result.final["mean_accuracy"]))
    for arm, acc in got.items():
        a = np.array(acc)
        print(f"{arm}: per-round ε {arms[arm]:.4g}, accuracy {a.mean():.3f} ± "
              f"{a.std(ddof=1):.3f} ({', '.join(f'{x:.3f}' for x in a)})")
    diff = np.array(got["exact (now)"]) - np.array(got["RDP (before)"])
    print(f"now − before, paired: {diff.mean():+.3f} ± "
          f"{diff.std(ddof=1) / np.sqrt(len(diff)):.3f} (s.e.)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="", help="comma-separated; none: the table only")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sensitivity", type=int, default=4, help="s* in bits")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    table()
    if args.seeds:
        accuracy(args.dataset, [int(s) for s in args.seeds.split(",")], args.epsilon,
                 args.rounds, args.sensitivity)


if __name__ == "__main__":
    main()
