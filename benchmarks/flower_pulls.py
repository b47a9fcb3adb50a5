"""What the ServerApp's reply pulls cost with many sites, on Flower's simulation engine.

``FlowerGrid`` pulls every pending reply one id per ``pull_messages`` call (a pull that hangs
loses only its own reply), every ``poll_interval`` (0.01 s on the simulation engine). For each
number of sites this runs FedCT on digits (decision trees, 2 rounds, seed 0, 2 Ray workers)
with ``engine="flower-simulation"`` and prints one JSON line: the ``pull_messages`` calls and
how many found nothing, the CPU seconds of those calls (the pulling thread's), the seconds
the run's thread spent in ``FlowerGrid._pull``, the CPU seconds of this (the coordinator's)
process, and the wall seconds. The ClientApps run in Ray's worker processes, not counted
in the coordinator's CPU. Times depend on the machine's load: say it (``uptime``).

    .venv/bin/python benchmarks/flower_pulls.py 10 50 100
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

STATS: dict[str, Any] = {}


class Counting:
    """A Flower ``Grid`` whose ``pull_messages`` calls are counted and timed."""

    def __init__(self, grid: Any) -> None:
        self._grid = grid

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def pull_messages(self, ids: Any) -> Any:
        start = time.thread_time()
        got = list(self._grid.pull_messages(ids))
        STATS["calls"] += 1
        STATS["empty"] += not got
        STATS["call_cpu_s"] += time.thread_time() - start
        return got


def instrument() -> None:
    """Count every ``FlowerGrid``'s pulls (its Flower grid wrapped in :class:`Counting`)."""
    from fedlabels.engines.flower import grid

    init, pull = grid.FlowerGrid.__init__, grid.FlowerGrid._pull

    def counted_init(self: Any, flower: Any, *args: Any, **kwargs: Any) -> None:
        init(self, flower if isinstance(flower, Counting) else Counting(flower), *args,
             **kwargs)

    def timed_pull(self: Any, ids: list[str], deadline: float) -> Any:
        start = time.perf_counter()
        try:
            return pull(self, ids, deadline)
        finally:
            STATS["in_pull_s"] += time.perf_counter() - start

    grid.FlowerGrid.__init__ = counted_init  # type: ignore[method-assign]
    grid.FlowerGrid._pull = timed_pull  # type: ignore[method-assign]


def main() -> None:
    import fedlabels as fl

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sites", type=int, nargs="*", default=[10, 50, 100],
                        help="numbers of sites, one run each (default 10 50 100)")
    args = parser.parse_args()
    instrument()
    for clients in args.sites:
        STATS.update(calls=0, empty=0, call_cpu_s=0.0, in_pull_s=0.0)
        wall, cpu = time.perf_counter(), time.process_time()
        fl.run("fedct", "digits", engine="flower-simulation", clients=clients, model="dt",
               rounds=2, seed=0, workers=2, progress=False)
        print(json.dumps({"clients": clients,
                          "wall_s": round(time.perf_counter() - wall, 1),
                          "coordinator_cpu_s": round(time.process_time() - cpu, 2),
                          **{k: round(v, 3) if isinstance(v, float) else v
                             for k, v in STATS.items()}}), flush=True)


if __name__ == "__main__":
    main()
