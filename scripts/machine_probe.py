"""How fast this machine is right now: a fixed pure-Python loop, best of three, in seconds.

Run it before and after a timing (``python scripts/machine_probe.py``): on a shared virtual
machine the same work can take a third longer from one minute to the next, and a timing is
only comparable with another taken at a similar probe.
"""

from __future__ import annotations

import os
import time

#: the loop, run as module-level code (global names, as ``python -c`` would run it)
LOOP = compile("s = 0\nfor i in range(20_000_000):\n    s += i\n", "<probe>", "exec")


def probe(repeats: int = 3) -> float:
    """Best wall-clock seconds of ``repeats`` runs of :data:`LOOP`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        exec(LOOP, {})
        best = min(best, time.perf_counter() - start)
    return best


if __name__ == "__main__":
    print(f"probe {probe():.2f} s, load average {os.getloadavg()[0]:.2f}")
