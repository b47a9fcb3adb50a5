"""What a DP server's budget check costs a round with PLD's σ, before and after the ledger
took the plan's bound for rounds the plan covers (docs/privacy.md §4, "DP-FedAvg").

With σ calibrated to PLD's ε, RDP's bound of the last planned rounds is above the target, so
the server's check (``Ledger.record(tight=False)``) computed a PLD of every such round's
composition. ``Ledger.check_plan`` now keeps the plan it found within the target, and a
check of fewer of the same releases takes the plan's bound (``Ledger._within_plan``). The
"before" arm switches that off (``_within_plan`` answers None), in the same process.
Each arm starts with every memo cleared; CPU time is ``time.process_time`` of this process.

* ``ledger``: a client-level DP-FedAvg server's ledger alone (calibration untimed, then the
  plan's check and one ``record`` a round), per (ε, q, rounds).
* ``run``: ``dp-fedavg`` on letter (``fedlabels fetch mlbench``), 200 clients × 60 records,
  ``sample_rate`` 0.2, ``mlp(hidden=32,lr=0.01)``, 20 rounds × 10 steps (benchmarks/
  pld_gain.py's client setting), seed 0: the run's CPU-s (its σ's calibration included,
  loading the federation not) over its rounds, and the share inside the server's
  ``Ledger.record``.

    nice -n 10 python benchmarks/ledger_plan_check.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

from fedlabels.privacy import accounting, dpsgd_accounting
from fedlabels.privacy.accounting import default_gaussian_accountants
from fedlabels.privacy.events import SampledGaussianEvent
from fedlabels.privacy.gaussian_calibration import calibrate_gaussian
from fedlabels.privacy.ledger import Ledger

DELTA = 1e-5
LEDGER_SETTINGS = [(1.0, 0.2, 20), (8.0, 0.2, 20), (2.0, 0.2, 25), (8.0, 0.1, 100)]


def _fresh() -> None:
    for memo in (calibrate_gaussian, accounting.gaussian_epsilon, accounting.pld_of_one_step,
                 accounting._rdp_of_one_step, dpsgd_accounting.dpsgd_epsilon):
        memo.cache_clear()


def _arm(after: bool, work: Callable[[], Any]) -> Any:
    _fresh()
    if after:
        return work()
    with mock.patch.object(Ledger, "_within_plan", lambda self, tally: None):
        return work()


def ledger_rounds(epsilon: float, q: float, rounds: int) -> list[float]:
    """CPU-s of the plan's check and of each round's ``record``, as the server makes them."""
    sigma = calibrate_gaussian(epsilon, DELTA, q, rounds).sigma  # the server's __init__
    event = SampledGaussianEvent(sigma, q, 1.0)
    ledger = Ledger(DELTA, epsilon, what="each client",
                    gaussian_accountants=default_gaussian_accountants(q), calibrated_by="pld")
    times = []
    start = time.process_time()
    ledger.check_plan([event] * rounds, f"{rounds} round(s)")
    for _ in range(rounds):
        ledger.record(event, tight=False)
        times.append(time.process_time() - start)
        start = time.process_time()
    return times


def run_cost(fed: Any, epsilon: float) -> tuple[float, float, int]:
    """The run's CPU-s (its calibration included), the CPU-s inside the server's
    ``Ledger.record``, and its rounds."""
    import warnings

    import fedlabels as fl

    spent = [0.0]
    original = Ledger.record

    def timed(self: Ledger, *new: Any, tight: bool = True) -> Any:
        start = time.process_time()
        try:
            return original(self, *new, tight=tight)
        finally:
            spent[0] += time.process_time() - start

    start = time.process_time()
    with mock.patch.object(Ledger, "record", timed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fl.run("dp-fedavg", fed, model="mlp(hidden=32,lr=0.01)", rounds=20, period=10,
               seed=0, eval_every=20, progress=False,
               options={"epsilon": epsilon, "sample_rate": 0.2, "delta": DELTA})
    return time.process_time() - start, spent[0], 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-run", action="store_true", help="the ledger rows only")
    args = parser.parse_args()
    calibrate_gaussian(3.0, DELTA, 0.3, 7)  # imports and first calls, not timed
    print("| ledger: ε, q, rounds | CPU-s of all checks before | after | most a round before "
          "| after |")
    print("|---|---|---|---|---|")
    for epsilon, q, rounds in LEDGER_SETTINGS:
        before = _arm(False, lambda: ledger_rounds(epsilon, q, rounds))  # noqa: B023
        after = _arm(True, lambda: ledger_rounds(epsilon, q, rounds))  # noqa: B023
        print(f"| {epsilon:g}, {q:g}, {rounds} | {sum(before):.3f} | {sum(after):.3f} | "
              f"{max(before):.3f} | {max(after):.3f} |", flush=True)
    if args.no_run:
        return
    import torch

    import fedlabels as fl

    torch.set_num_threads(1)
    fed = fl.load_federation("letter", clients=200, private_per_client=60, test=1000,
                             unlabeled=1000, seed=0)
    print("\n| run: ε | CPU-s a round before | ledger's share | after | ledger's share |")
    print("|---|---|---|---|---|")
    for epsilon in (1.0, 8.0):
        rows = [_arm(after, lambda: run_cost(fed, epsilon))  # noqa: B023
                for after in (False, True)]
        cells = [f"{cpu / rounds:.3f} | {100 * ledger / cpu:.1f} %"
                 for cpu, ledger, rounds in rows]
        print(f"| {epsilon:g} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
