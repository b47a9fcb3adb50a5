"""How much of a Paillier evaluator's multiplication modulo N² holds the GIL.

The evaluation's inner loop (``acc = acc * table[c][x_c] % N2``, as in
:func:`fedlabels.secure.paillier_hamming.evaluate`) timed in CPU seconds of this thread,
with 4096-bit numbers (N² of a 2048-bit key) and with 60-bit ones, with and without
gmpy2's ``allow_release_gil``. With small numbers the arithmetic is negligible, so their
time is the Python part, which runs holding the GIL; its share of the 4096-bit time is
the fraction of a thread's time the GIL is held between big-integer calls.

    .venv/bin/python benchmarks/paillier_gil.py
"""

from __future__ import annotations

import random
import time

import gmpy2

CHUNKS, POINTS, REPEATS = 128, 300, 3


def per_multiplication(bits: int, release: bool) -> float:
    """CPU µs per multiply-and-reduce of the subset-product loop (best of REPEATS)."""
    rnd = random.Random(1)
    n2 = gmpy2.mpz(rnd.getrandbits(bits) | (1 << (bits - 1)) | 1)
    tables = [[gmpy2.mpz(rnd.getrandbits(bits)) % n2 for _ in range(256)]
              for _ in range(CHUNKS)]
    rows = [[rnd.randrange(256) for _ in range(CHUNKS)] for _ in range(POINTS)]
    best = float("inf")
    with gmpy2.context(gmpy2.get_context(), allow_release_gil=release):
        for _ in range(REPEATS):
            start = time.thread_time()
            for row in rows:
                acc = tables[0][row[0]]
                for c in range(1, CHUNKS):
                    acc = acc * tables[c][row[c]] % n2
            best = min(best, time.thread_time() - start)
    return best / (POINTS * (CHUNKS - 1)) * 1e6


def main() -> None:
    cost = {(bits, release): per_multiplication(bits, release)
            for bits in (4096, 60) for release in (False, True)}
    for (bits, release), us in cost.items():
        print(f"{bits:5d}-bit numbers, allow_release_gil={release!s:5}: {us:6.3f} µs CPU")
    held = cost[(60, True)] / cost[(4096, True)]
    print(f"GIL held: {100 * held:.1f} % of a thread's time (2 threads could run "
          f"{min(2.0, 1 / held):.2f}x as fast as one, if never descheduled holding it)")


if __name__ == "__main__":
    main()
