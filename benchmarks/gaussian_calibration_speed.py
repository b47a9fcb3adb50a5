"""CPU seconds of the Gaussian σ calibration at q < 1 with one step's PLD built by
dp-accounting's ``from_gaussian_mechanism`` (before: the privacy loss inverted one grid
point at a time) and by :func:`fedlabels.privacy.gaussian_pld.gaussian_pld` (now: the grid
at once), side by side in one process, each twice in turn from empty memos, and whether σ
is the same to the bit (docs/privacy.md, DP-FedAvg accounting)::

    nice -n 10 python benchmarks/gaussian_calibration_speed.py
    nice -n 10 python benchmarks/gaussian_calibration_speed.py --cases 8:0.25:1000

``--cases`` gives ε:q:T,...; δ is 1e-5. CPU time is ``time.process_time`` of this process,
the RDP bracket included, the imports not (one untimed calibration first).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from fedlabels.privacy import accounting
from fedlabels.privacy.gaussian_calibration import calibrate_gaussian
from fedlabels.privacy.gaussian_pld import gaussian_pld

DELTA = 1e-5
#: the slowest of tests/test_gaussian_pld.py's grid, and ε 1 beside ε 8
CASES = "8:0.25:2,1:0.25:2,8:0.01:2,16:0.01:1,16:0.25:1,16:0.1:2"


def dp_accountings(noise_multiplier: float, sampling_rate: float,
                   discretization: float) -> Any:
    """One step's PLD as dp-accounting builds it (the builder before)."""
    import dp_accounting as dpa
    from dp_accounting.pld.privacy_loss_distribution import from_gaussian_mechanism

    return from_gaussian_mechanism(
        standard_deviation=noise_multiplier, value_discretization_interval=discretization,
        sampling_prob=sampling_rate,
        neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)


def timed(builder: Callable[..., Any], epsilon: float, q: float,
          steps: int) -> tuple[float, float]:
    """(CPU-s, σ) of one calibration from empty memos with ``builder`` as the PLD's."""
    accounting.gaussian_pld = builder  # type: ignore[assignment]  # what pld_of_one_step calls
    for memo in (calibrate_gaussian, accounting.gaussian_epsilon, accounting.pld_of_one_step,
                 accounting._rdp_of_one_step):
        memo.cache_clear()
    start = time.process_time()
    sigma = calibrate_gaussian(epsilon, DELTA, q, steps).sigma
    return time.process_time() - start, sigma


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=CASES, help="ε:q:T,... (default %(default)s)")
    args = parser.parse_args()
    calibrate_gaussian(3.0, DELTA, 0.3, 7)  # imports and first calls, not timed
    print("| ε, q, T | σ | CPU-s before (twice) | now (twice) | before/now | same σ |")
    print("|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        e, q, t = case.split(":")
        epsilon, rate, steps = float(e), float(q), int(t)
        runs = [timed(arm, epsilon, rate, steps)
                for _ in range(2) for arm in (dp_accountings, gaussian_pld)]
        old, new = runs[0::2], runs[1::2]
        sigmas = {s for _, s in runs}
        ratio = sum(c for c, _ in old) / sum(c for c, _ in new)
        print(f"| {epsilon:g}, {rate:g}, {steps} | {runs[0][1]:.6f} | "
              f"{old[0][0]:.2f}, {old[1][0]:.2f} | {new[0][0]:.2f}, {new[1][0]:.2f} | "
              f"{ratio:.2f} | {'yes' if len(sigmas) == 1 else 'NO'} |", flush=True)
    accounting.gaussian_pld = gaussian_pld


if __name__ == "__main__":
    main()
