"""CPU seconds of DP-FedCT kary's calibration with RDP asked at every step of the search
(before) and only where the exact accountant is above the target (now), side by side in one
process, each twice in turn from empty memos, and whether the per-round ε is the same
(docs/privacy.md, DP-FedCT's k-ary RR)::

    nice -n 10 python benchmarks/kary_calibration_rdp.py
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import fedlabels.privacy.accounting as accounting
import fedlabels.privacy.kary_exact as kary_exact
from fedlabels.privacy.accounting import (
    LabelTally,
    account_label_tally,
    calibrate_kary_round_epsilon,
)

DELTA = 1e-5
#: (total ε, rounds, s*_labels, classes): privacy.md's timing case and two small ones
CASES = [(8.0, 50, 2000, 10), (4.0, 3, 370, 2), (1.0, 10, 100, 5)]


def before(total: float, rounds: int, labels: int, k: int) -> float:
    """The former calibration: min(exact, RDP) computed at every step."""
    def run_total(eps_round: float) -> float:
        p = k / (math.exp(eps_round / labels) + k - 1)
        tally = LabelTally(groups={(p, k): rounds * labels}, count=rounds)
        return account_label_tally(tally, DELTA, ("exact", "rdp")).epsilon

    return accounting._largest_round_epsilon(run_total, total, rounds)


def now(total: float, rounds: int, labels: int, k: int) -> float:
    return calibrate_kary_round_epsilon(total, DELTA, rounds, labels, k)


def timed(arm: Callable[..., float], case: tuple[float, int, int, int]) -> tuple[float, float]:
    for module in (accounting, kary_exact):
        for name in dir(module):
            clear = getattr(getattr(module, name), "cache_clear", None)
            if callable(clear):
                clear()
    start = time.process_time()
    value = arm(*case)
    return time.process_time() - start, value


def main() -> None:
    now(3.0, 3, 10, 3)  # imports and first calls, not timed
    print("| total ε, R, s*_labels, k | CPU-s before (twice) | now (twice) | same ε |")
    print("|---|---|---|---|")
    for case in CASES:
        runs = [timed(arm, case) for _ in range(2) for arm in (before, now)]
        old, new = runs[0::2], runs[1::2]
        same = {v for _, v in old} == {v for _, v in new} and len({v for _, v in old}) == 1
        print(f"| {', '.join(f'{c:g}' for c in case)} | "
              f"{old[0][0]:.2f}, {old[1][0]:.2f} | {new[0][0]:.2f}, {new[1][0]:.2f} | "
              f"{'yes' if same else 'NO'} ({new[0][1]!r}) |", flush=True)


if __name__ == "__main__":
    main()
