"""kNN candidate search of XCLP, before and after issue 20, side by side (time and memory).

    .venv/bin/python benchmarks/xclp_knn.py --n 10000 60000 --seed 0

For every n it runs, in fresh subprocesses one after the other, the pre-issue-20 search
(every block's candidates kept until a final merge, int64 keys, transposed top-k; kept
verbatim below as ``old``) and :func:`fedlabels.propagation.knn.knn_from_bits` (running
top-k, float keys from the product) on the same random LSH bits (L = 1024, k = 10, block
2048), and prints CPU seconds, the peak RSS above the process's RSS before the call, and
whether both found exactly the same neighbours (SHA-256 of the indices and distances). The
children run with ``MALLOC_MMAP_THRESHOLD_=65536`` so that glibc's heap fragmentation does not
inflate the peak RSS (see ``main``).
``--ops`` times the operations of one 2048 × 2048 block instead (the profile).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

L, K, BLOCK = 1024, 10, 2048


def old(packed: np.ndarray, k: int, n_bits: int, block: int = BLOCK
        ) -> tuple[np.ndarray, np.ndarray]:
    """The candidate search of ``knn_graph`` before issue 20 (memory O(n²k/block))."""
    import torch

    from fedlabels.propagation.core import _signs

    n = packed.shape[0]
    signs = torch.from_numpy(_signs(packed, n_bits))
    starts = list(range(0, n, block))
    cands: list[list[torch.Tensor]] = [[] for _ in starts]
    big = torch.iinfo(torch.int64).max
    for bi, si in enumerate(starts):
        rows_i = signs[si:si + block]
        for bj in range(bi, len(starts)):
            sj = starts[bj]
            dots = rows_i @ signs[sj:sj + block].T
            h = torch.round((n_bits - dots) * 0.5).to(torch.int64)
            ri, cj = h.shape
            key_r = h * n + torch.arange(sj, sj + cj)
            if bj == bi:
                key_r.fill_diagonal_(big)
            cands[bi].append(torch.topk(key_r, min(k, cj), dim=1, largest=False).values)
            if bj != bi:
                key_c = h.T * n + torch.arange(si, si + ri)
                cands[bj].append(torch.topk(key_c, min(k, ri), dim=1, largest=False).values)
    best = np.concatenate([torch.topk(torch.cat(c, dim=1), k, dim=1, largest=False,
                                      sorted=True).values.numpy() for c in cands])
    return best % n, best // n


def _bits(n: int, seed: int) -> np.ndarray:
    """Random packed LSH bits, drawn in small pieces (no large temporaries before the
    baseline RSS is taken)."""
    rng = np.random.default_rng(seed)
    return np.concatenate([np.packbits(rng.integers(0, 2, (min(1024, n - s), L),
                                                    dtype=np.uint8), axis=1)
                           for s in range(0, n, 1024)])


def _child(variant: str, n: int, seed: int) -> None:
    """One measurement in this (fresh) process; prints a JSON line."""
    import torch  # noqa: F401  (loaded before the baseline RSS is taken)

    from fedlabels.propagation.knn import knn_from_bits

    packed = _bits(n, seed)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()
    idx, h = (old if variant == "old" else knn_from_bits)(packed, K, L)
    cpu = time.process_time() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    digest = hashlib.sha256(np.asarray(idx, np.int64).tobytes()
                            + np.asarray(h, np.int64).tobytes()).hexdigest()[:16]
    print(json.dumps({"variant": variant, "n": n, "cpu_s": round(cpu, 2),
                      "peak_mb": round((peak - base) / 1024, 1), "sha": digest}))


def _ops(seed: int) -> None:
    """CPU ms of the operations on one off-diagonal 2048 × 2048 block, old and new."""
    import torch

    from fedlabels.propagation.knn import _augmented

    packed = _bits(2 * BLOCK, seed)
    s = torch.from_numpy(np.unpackbits(packed, axis=1).astype(np.float32) * 2 - 1)
    a, b = s[:BLOCK], s[BLOCK:]

    def timed(name: str, fn: Callable[[], Any], reps: int = 5) -> Any:
        t0 = time.process_time()
        for _ in range(reps):
            out = fn()
        print(f"{name:44s} {1000 * (time.process_time() - t0) / reps:8.1f} ms")
        return out

    dots = timed("old: matmul", lambda: a @ b.T)
    h = timed("old: round + int64 keys h·n + j (rows)",
              lambda: torch.round((L - dots) * 0.5).to(torch.int64) * 99_999
              + torch.arange(BLOCK))
    timed("old: top-k of the row keys (int64)", lambda: torch.topk(h, K, dim=1, largest=False))
    timed("old: transposed int64 keys + strided top-k",
          lambda: torch.topk(h.T * 99_999 + torch.arange(BLOCK), K, dim=1, largest=False))
    rows = timed("new: row side [-(w/2)·signs | 1]",
                 lambda: _augmented(packed[:BLOCK], L, -0.5 * BLOCK, 1.0, np.float32))
    cols = timed("new: column side [signs | L·w/2 + j]",
                 lambda: _augmented(packed[BLOCK:], L, 1.0, 0.5 * BLOCK * L
                                    + np.arange(BLOCK), np.float32))
    key = timed("new: matmul giving the keys h·w + j", lambda: rows @ cols.T)
    shift = (torch.arange(BLOCK)[None, :] - torch.arange(BLOCK)[:, None]).float()
    timed("new: contiguous transpose + (row − col)", lambda: key.T.contiguous().add_(shift))
    timed("new: top-k of float32 keys (x2 per block)",
          lambda: torch.topk(key, K, dim=1, largest=False, sorted=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 60_000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ops", action="store_true", help="per-operation profile of one block")
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]), args.seed)
        return
    if args.ops:
        _ops(args.seed)
        return
    # glibc raises its mmap threshold after freeing large blocks, after which freed block
    # temporaries fragment the heap and inflate peak RSS; a fixed threshold (same for both
    # variants) makes the RSS reflect live memory
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    print("n       variant  cpu_s    peak_MB_above_base  same_neighbours")
    for n in args.n:
        res = {}
        for variant in ("old", "new"):
            out = subprocess.run([sys.executable, __file__, "--seed", str(args.seed),
                                  "--child", variant, str(n)], check=True, env=env,
                                 capture_output=True, text=True).stdout
            res[variant] = json.loads(out.strip().splitlines()[-1])
        same = res["old"]["sha"] == res["new"]["sha"]
        for variant in ("old", "new"):
            r = res[variant]
            print(f"{n:<7d} {variant:8s} {r['cpu_s']:<8} {r['peak_mb']:<19} {same}")
        print(f"{n:<7d} ratio    {res['old']['cpu_s'] / res['new']['cpu_s']:.2f}x cpu, "
              f"{res['old']['peak_mb'] / max(res['new']['peak_mb'], 0.1):.1f}x memory")


if __name__ == "__main__":
    main()
