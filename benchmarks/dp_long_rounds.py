"""The CPU time of a long DP-FedCT run's rounds (docs/usage.md, Long runs).

Runs ``fedlabels run --method dp-fedct --dataset breast_cancer --clients 5 --model dt
--rounds R --seed 0 --epsilon-per-round 1`` in this process (``workers=1``), times each
round's CPU through an ``on_round`` hook and prints the median of the 20 rounds around each
mark as it gets there::

    nice -n 10 python benchmarks/dp_long_rounds.py --rounds 3000 --marks 100,1000,2500

CPU time, not wall time: the machine is shared; still say the load (``uptime``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import fedlabels as fl
from fedlabels.results import RoundRecord


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--marks", default="100,1000,2500")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    marks = [int(m) for m in args.marks.split(",")]
    cpu: list[float] = []
    last = [time.process_time()]

    def timed(record: RoundRecord) -> None:
        now = time.process_time()
        cpu.append(now - last[0])
        for mark in marks:
            if len(cpu) == mark + 10:
                window = cpu[max(0, mark - 10):mark + 10]
                print(f"round {mark}: median CPU {1000 * statistics.median(window):.1f} ms",
                      flush=True)
        last[0] = time.process_time()

    warnings.simplefilter("ignore", fl.RunCaveatWarning)
    started = time.time()
    result = fl.run("dp-fedct", "breast_cancer", clients=5, model="dt", rounds=args.rounds,
                    seed=args.seed, options={"epsilon_per_round": 1.0}, on_round=timed,
                    progress=False, workers=1)
    print(f"{len(cpu)} rounds: {sum(cpu):.1f} CPU-s, {time.time() - started:.0f} s wall, "
          f"ε = {result.privacy['epsilon']:.4g}")


if __name__ == "__main__":
    main()
