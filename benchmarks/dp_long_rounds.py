"""The CPU time of a long DP-FedCT run's rounds (docs/usage.md, Long runs).

Runs ``fedlabels run --method dp-fedct --dataset breast_cancer --clients 5 --model dt
--rounds R --seed 0 --epsilon-per-round 1`` in this process (``workers=1``), times each
round's CPU through an ``on_round`` hook and prints the median of the 20 rounds around each
mark as it gets there::

    nice -n 10 python benchmarks/dp_long_rounds.py --rounds 3000 --marks 100,1000,2500

``--checkpoint`` writes the run's checkpoint as ``fedlabels run`` does (a DP run: after
every round, in the run's thread) into a temporary directory, so its cost is in each
round's; ``--profile A:B`` profiles rounds A to B (cProfile) and prints the functions that
took the most time in them, to see what grows with the rounds.

CPU time, not wall time: the machine is shared; still say the load (``uptime``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import fedlabels as fl
from fedlabels.results import RoundRecord


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--marks", default="100,1000,2500")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", action="store_true",
                        help="checkpoint every round as `fedlabels run` does")
    parser.add_argument("--profile", default=None, metavar="A:B",
                        help="profile rounds A to B and print the costliest functions")
    args = parser.parse_args()
    marks = [int(m) for m in args.marks.split(",")]
    first, last_profiled = ((int(x) for x in args.profile.split(":")) if args.profile
                            else (0, -1))
    profiler = cProfile.Profile()
    cpu: list[float] = []
    wall: list[float] = []
    last = [time.process_time(), time.perf_counter()]

    def timed(record: RoundRecord) -> None:
        now, now_wall = time.process_time(), time.perf_counter()
        cpu.append(now - last[0])
        wall.append(now_wall - last[1])
        done = len(cpu)
        if done == last_profiled:
            profiler.disable()
        for mark in marks:
            if done == mark + 10:
                at = slice(max(0, mark - 10), mark + 10)
                print(f"round {mark}: median CPU {1000 * statistics.median(cpu[at]):.1f} ms, "
                      f"wall {1000 * statistics.median(wall[at]):.1f} ms", flush=True)
        if done == first - 1:
            profiler.enable()
        last[:] = [time.process_time(), time.perf_counter()]

    warnings.simplefilter("ignore", fl.RunCaveatWarning)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="dp-long-") as tmp:
        result = _run(args.rounds, args.seed, timed,
                      Path(tmp) / "run.checkpoint.npz" if args.checkpoint else None)
    print(f"{len(cpu)} rounds: {sum(cpu):.1f} CPU-s, {time.time() - started:.0f} s wall, "
          f"ε = {result.privacy['epsilon']:.4g}")
    if args.profile:
        print(f"rounds {first}-{last_profiled}, by own time:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


def _run(rounds: int, seed: int, hook: Callable[[RoundRecord], None], checkpoint: Path | None
         ) -> fl.RunResult:
    """``fl.run`` of the run above; with ``checkpoint``, as ``fedlabels run`` writes it."""
    options = {"epsilon_per_round": 1.0}
    if checkpoint is None:
        return fl.run("dp-fedct", "breast_cancer", clients=5, model="dt", rounds=rounds,
                      seed=seed, options=options, on_round=hook, progress=False, workers=1)
    from fedlabels.engines import simulate
    from fedlabels.learners import as_models
    from fedlabels.methods import get_method
    from fedlabels.runs.federation import federation_for

    cfg = fl.RunConfig(method="dp-fedct", dataset="breast_cancer", clients=5, model="dt",
                       rounds=rounds, seed=seed, options=options, workers=1)
    impl = get_method(cfg.method)
    return simulate(impl, federation_for(cfg), as_models(cfg.model), rounds=rounds,
                    seed=seed, options=impl.parse_options(cfg.options), on_round=hook,
                    progress=False, checkpoint=checkpoint, workers=1)


if __name__ == "__main__":
    main()
