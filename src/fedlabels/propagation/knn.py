"""Exact k-nearest-neighbour search over SimHash bits (XCLP, Algorithm 1, lines 6–9).

Every point gets its k nearest *other* points: smallest Hamming distance h, ties broken by the
smaller index. Both entry points give exactly the same neighbours:

* :func:`knn_from_bits` — from packed LSH bits, blockwise: only blocks on and above the
  diagonal are multiplied (``H`` is symmetric); each block offers its best k to its rows and,
  transposed, to its columns, and a **running top-k** per point keeps only the k best so far.
  Memory is O(n·k + block·(block + L)) (keeping every block's candidates until the end
  would take O(n²·k/block), ~39 GB at 10⁶ points).
* :func:`knn_from_hamming` — from a full Hamming matrix (the server's H), in row blocks.

**Keys from the product.** Within a block of width w the key ``h·w + column`` orders
candidates by (h, index). With rows ``[−(w/2)·signs | 1]`` and columns
``[signs | L·w/2 + column]`` the matrix product *is* that key: every partial sum is a multiple
of ½ below (L + 1)·w, exact in float32 while (L + 1)·w ≤ 2²³ (float64 beyond). The
transposed block's keys ``h·w + row`` are a contiguous transpose plus the constant
``row − column``, so top-k never reads strided memory; only the k winners per row become
global int64 keys ``h·n + j`` for the merge. The ±1 blocks come from the packed bits through
a 256-entry byte table, block by block, so the n × L sign matrix is never held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

_EXACT_F32 = 1 << 23  # every multiple of 0.5 up to here is exact in float32
#: the ±1 signs of the 8 bits of every byte value, (256, 8) float32
_SIGNS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32) * 2 - 1


def _augmented(packed: np.ndarray, n_bits: int, scale: float, last: float | np.ndarray,
               dtype: type[np.floating]) -> torch.Tensor:
    """``[scale · signs | last]`` (rows, L + 1) of a block of packed bits, via a byte table."""
    import torch

    rows = len(packed)
    out = np.empty((rows, n_bits + 1), dtype=dtype)
    out[:, :n_bits] = _SIGNS[packed].reshape(rows, -1)[:, :n_bits]
    if scale != 1.0:
        out[:, :n_bits] *= scale
    out[:, n_bits] = last
    return torch.from_numpy(out)


def _winners(key: torch.Tensor, k: int, width: int, offset: int, n: int,
             skip_diag: bool) -> torch.Tensor | None:
    """Global keys ``h·n + (offset + column)`` of each row's k smallest local keys
    ``h·width + column`` (torch int64); ``skip_diag``: the diagonal is the point itself."""
    import torch

    if skip_diag:
        key.fill_diagonal_(float("inf"))
    kk = min(k, key.shape[1] - int(skip_diag))
    if kk <= 0:
        return None
    vals = torch.topk(key, kk, dim=1, largest=False, sorted=False).values.to(torch.int64)
    h = torch.div(vals, width, rounding_mode="floor")
    return h * n + (vals - h * width + offset)


def _merge(best: torch.Tensor, cand: torch.Tensor | None, k: int) -> torch.Tensor:
    """Running top-k: the k smallest of the kept keys and the new candidates per row."""
    import torch

    if cand is None:
        return best
    both = torch.cat((best, cand), dim=1)
    return torch.topk(both, min(k, both.shape[1]), dim=1, largest=False, sorted=False).values


def _split(best: torch.Tensor, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted global keys → (indices int64, distances int32), each (n, k)."""
    import torch

    keys = torch.sort(best, dim=1).values.numpy()
    return keys % n, (keys // n).astype(np.int32)


def knn_from_bits(packed: np.ndarray, k: int, n_bits: int, block: int = 2048
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest other points of every row of ``packed`` (n, ⌈L/8⌉) uint8.

    Returns (indices (n, k) int64, Hamming distances (n, k) int32), nearest first, ties by
    index; identical to :func:`knn_from_hamming` of the full Hamming matrix.
    """
    import torch

    n = packed.shape[0]
    w = min(block, n)
    dtype = np.float32 if (n_bits + 1) * w <= _EXACT_F32 else np.float64
    back = torch.arange(w, dtype=torch.float32 if dtype is np.float32 else torch.float64)
    shift = back[None, :] - back[:, None]  # (row − column) of the transposed block
    starts = list(range(0, n, w))
    best = [torch.zeros((min(w, n - s), 0), dtype=torch.int64) for s in starts]
    for bi, si in enumerate(starts):
        rows_i = _augmented(packed[si:si + w], n_bits, -0.5 * w, 1.0, dtype)
        for bj in range(bi, len(starts)):
            sj = starts[bj]
            cols_j = packed[sj:sj + w]
            base = 0.5 * w * n_bits + np.arange(len(cols_j))
            key = rows_i @ _augmented(cols_j, n_bits, 1.0, base, dtype).T  # h·w + column
            if bj != bi:  # the transposed block: h·w + row, contiguous
                key_t = key.T.contiguous().add_(shift[:key.shape[1], :key.shape[0]])
                best[bj] = _merge(best[bj], _winners(key_t, k, w, si, n, False), k)
            best[bi] = _merge(best[bi], _winners(key, k, w, sj, n, bj == bi), k)
    idx, h = zip(*(_split(b, n) for b in best), strict=True)
    return np.concatenate(idx), np.concatenate(h)


def knn_from_hamming(H: np.ndarray, k: int, block: int = 2048
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest other points per row of a full (n, n) Hamming matrix, as
    :func:`knn_from_bits` (memory O(block·n) beyond ``H``)."""
    n = H.shape[0]
    idx_parts, h_parts = [], []
    cols = np.arange(n, dtype=np.int64)
    for s in range(0, n, block):
        key = H[s:s + block].astype(np.int64) * n + cols
        rows = np.arange(len(key))
        key[rows, rows + s] = np.iinfo(np.int64).max  # no self-loops
        part = np.partition(key, k - 1, axis=1)[:, :k]
        part.sort(axis=1)
        idx_parts.append(part % n)
        h_parts.append((part // n).astype(np.int32))
    return np.concatenate(idx_parts), np.concatenate(h_parts)
