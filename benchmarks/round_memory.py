"""What a long run keeps per round (docs/usage.md, Long runs): Python objects, by line.

Runs ``fedlabels run --method fedct --dataset breast_cancer --clients 5 --model dt
--rounds B --seed 0`` in this process (``workers=1``) under tracemalloc, takes snapshots
after rounds A and B, and prints what grew between them per round, largest first::

    nice -n 10 python benchmarks/round_memory.py --first 200 --last 1000
"""

from __future__ import annotations

import argparse
import tracemalloc
import warnings

import fedlabels as fl
from fedlabels.results import RoundRecord


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=200)
    parser.add_argument("--last", type=int, default=1000)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    snaps: dict[int, tracemalloc.Snapshot] = {}

    def snapshot(record: RoundRecord) -> None:
        if record.round in (args.first, args.last):
            snaps[record.round] = tracemalloc.take_snapshot()

    warnings.simplefilter("ignore", fl.RunCaveatWarning)
    tracemalloc.start(1)
    fl.run("fedct", "breast_cancer", clients=5, model="dt", rounds=args.last, seed=0,
           on_round=snapshot, progress=False, workers=1)
    rounds = args.last - args.first
    diff = snaps[args.last].compare_to(snaps[args.first], "lineno")
    grew = sum(d.size_diff for d in diff)
    print(f"rounds {args.first}-{args.last}: {grew / rounds:.0f} B a round")
    for d in diff[:args.top]:
        print(f"{d.size_diff / rounds:8.0f} B a round  {d.traceback.format()[0].strip()}")


if __name__ == "__main__":
    main()
