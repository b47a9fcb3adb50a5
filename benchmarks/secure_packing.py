"""The cost of packing DP-FedAvg's masked residues to k bits (docs/privacy.md §5) next to
sending them as the narrowest numpy word (uint32 for k = 19), in one process.

For d residues mod 2^k: the client's step (uint64 residues -> wire array) and the server's
(wire array -> uint64 residues) of each path, each timed as the median CPU seconds
(``time.process_time``) of ``--reps`` calls, the two paths interleaved; and the bytes each
path sends.

    nice -n 10 python benchmarks/secure_packing.py --size 100000 --bits 19
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from fedlabels.secure.masked_sum import pack_residues, unpack_residues


def word(bits: int) -> type[np.unsignedinteger]:
    """The narrowest numpy word holding k bits (the wire format before packing)."""
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        if bits <= 8 * np.dtype(dtype).itemsize:
            return dtype
    raise ValueError(bits)


def cpu(call: Callable[[], object]) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--bits", type=int, default=19)
    parser.add_argument("--reps", type=int, default=41)
    args = parser.parse_args()
    d, k = args.size, args.bits
    residues = np.random.default_rng(0).integers(0, 2 ** k, d, dtype=np.uint64)
    dtype = word(k)
    as_word, packed = residues.astype(dtype), pack_residues(residues, k)
    assert np.array_equal(unpack_residues(packed, k, d), residues)
    steps = {"word, client": lambda: residues.astype(dtype),
             "word, server": lambda: as_word.astype(np.uint64),
             "packed, client": lambda: pack_residues(residues, k),
             "packed, server": lambda: unpack_residues(packed, k, d)}
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.reps):
        for name, step in steps.items():
            times[name].append(cpu(step))
    print(f"d = {d:,} residues of k = {k} bits, {args.reps} calls each, median CPU ms")
    print("| path | bytes | client (to wire) ms | server (from wire) ms |")
    print("|---|---|---|---|")
    for path, size in ((f"{np.dtype(dtype).name}", as_word.nbytes), ("packed", packed.nbytes)):
        key = "word" if path != "packed" else "packed"
        client, server = (1e3 * statistics.median(times[f"{key}, {side}"])
                          for side in ("client", "server"))
        print(f"| {path} | {size:,} | {client:.3f} | {server:.3f} |")


if __name__ == "__main__":
    main()
