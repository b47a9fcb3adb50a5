"""FedCT robust=reputation's peer κ: the former loop over clients against consensus.peer_kappa.

Both run side by side in this process on the same votes (m clients, |U| examples, C classes,
seed 0), alternating, on one BLAS thread (as a run's simulator: 1 thread a process by
default), and must give the same bytes; prints the CPU seconds (the least of ``--repeats``)
and their ratio::

    python benchmarks/peer_kappa_speed.py --clients 100 500
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from fedlabels.consensus import kappa_rows, peer_kappa


def peer_kappa_loop(votes: np.ndarray, n_classes: int) -> np.ndarray:
    """The former peer_kappa: kappa_rows of every client with client j, one j at a time."""
    m = votes.shape[0]
    pairs = np.stack([np.maximum(kappa_rows(votes, votes[j], n_classes), 0.0)
                      for j in range(m)])
    return (pairs.sum(axis=0) - np.diag(pairs)) / max(m - 1, 1)


def cpu_seconds(f: Callable[[np.ndarray, int], np.ndarray], votes: np.ndarray,
                n_classes: int) -> float:
    """CPU seconds of one call."""
    start = time.process_time()
    f(votes, n_classes)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--unlabeled", type=int, default=1000)
    parser.add_argument("--classes", type=int, default=26)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n, c = args.unlabeled, args.classes
    for m in args.clients:
        truth = rng.integers(0, c, n)
        right = rng.random((m, n)) < rng.uniform(0.2, 0.9, (m, 1))
        votes = np.where(right, truth, rng.integers(0, c, (m, n)))
        if peer_kappa(votes, c).tobytes() != peer_kappa_loop(votes, c).tobytes():
            raise SystemExit(f"m={m}: peer_kappa differs from the loop")
        loop, vec = [], []
        with threadpool_limits(1):
            for _ in range(args.repeats):
                loop.append(cpu_seconds(peer_kappa_loop, votes, c))
                vec.append(cpu_seconds(peer_kappa, votes, c))
        print(f"m={m} |U|={n} C={c}: loop {min(loop):.3f} CPU-s, peer_kappa "
              f"{min(vec):.4f} CPU-s, {min(loop) / min(vec):.1f}x (same bytes)")


if __name__ == "__main__":
    main()
