"""What writing a checkpoint costs with its HMAC over the arrays' bytes (formats 2 and 3, the
"before" arm) and over the SHA-256 digests the de-duplication computed (format 4 and 5,
"after"): the arrays are hashed twice before, once after (docs/robustness.md, Crash and
resume).

Both arms write the same states (a run's checkpoint, read back) to a file in a temporary
directory, alternately in one process, ``--reps`` times each; the "before" arm swaps the MAC
for the former rule (``_bytes_mac``). CPU time is ``time.process_time`` of this process;
the MAC's own share is timed apart. Without ``--checkpoint``, synthetic states of
``mlp(hidden=512-512)`` on 784 features (weights and two Adam moments, 5 clients).

    python benchmarks/checkpoint_mac.py --checkpoint runs/x.checkpoint.npz --reps 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from fedlabels.runs import checkpoint as ckpt


def _synthetic(clients: int) -> tuple[dict[str, Any], dict[str, Any], dict[int, Any]]:
    rng = np.random.default_rng(0)
    shapes = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]
    states = {c: {f"{kind}{i}": rng.standard_normal(s).astype(np.float32)
                  for i, s in enumerate(shapes) for kind in ("w", "m", "v")}
              for c in range(clients)}
    return {"rounds": 1}, {}, states


def _arm(before: bool, meta: dict[str, Any], server: Any, clients: Any,
         folder: Path) -> tuple[float, float]:
    """(CPU-s of the write, CPU-s in the MAC and the de-duplication's digests)."""
    spent = [0.0]

    def timed(fn: Any) -> Any:
        def inner(*args: Any, **kw: Any) -> Any:
            t = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                spent[0] += time.process_time() - t
        return inner

    mac = (lambda key, text, arrays, digests=None, fmt=ckpt.FORMAT:
           ckpt._bytes_mac(key, text, arrays, fmt)) if before else ckpt._mac
    with mock.patch.object(ckpt, "_mac", timed(mac)), \
            mock.patch.object(ckpt.ArrayTable, "add", timed(ckpt.ArrayTable.add)):
        t = time.process_time()
        ckpt.write_checkpoint(folder / "x.checkpoint.npz", meta, server, clients,
                              key=b"k" * 32)
        return time.process_time() - t, spent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if args.checkpoint is None:
        meta, server, clients = _synthetic(5)
    else:
        saved = ckpt.load_checkpoint(args.checkpoint)
        meta, server, clients = saved.meta, saved.server, saved.clients
    size = sum(v.nbytes for s in [server, *clients.values()] for v in s.values()
               if isinstance(v, np.ndarray))
    totals = {True: [0.0, 0.0], False: [0.0, 0.0]}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.reps):
            for before in (True, False):
                write, hashing = _arm(before, meta, server, clients, Path(folder))
                totals[before][0] += write
                totals[before][1] += hashing
    print(f"arrays {size / 1e6:.1f} MB, {args.reps} writes per arm (CPU-s per write)")
    for before, name in ((True, "before (HMAC over the bytes)"),
                         (False, "after (HMAC over the digests)")):
        write, hashing = (x / args.reps for x in totals[before])
        print(f"{name:32s} write {write:.3f}  digests + MAC {hashing:.3f}")
    print(f"ratio after/before: write {totals[False][0] / totals[True][0]:.2f}, "
          f"hashing {totals[False][1] / totals[True][1]:.2f}")


if __name__ == "__main__":
    main()
