"""kNN candidate search (propagation/knn.py) against a brute-force oracle, ties included."""

import numpy as np
import pytest

from fedlabels.propagation.knn import knn_from_bits, knn_from_hamming


def _brute(bits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Oracle: bitwise XOR counts, then a stable sort of (h, index) without the point itself."""
    n = len(bits)
    H = np.stack([(row != bits).sum(axis=1) for row in bits])
    idx = np.empty((n, k), dtype=np.int64)
    for i in range(n):  # small data: clarity over speed
        others = [j for j in range(n) if j != i]
        idx[i] = sorted(others, key=lambda j: (H[i, j], j))[:k]
    return idx, np.take_along_axis(H, idx, axis=1)


@pytest.mark.parametrize(("n", "n_bits", "k", "block"), [
    (61, 5, 7, 16),     # L = 5: distances 0..5 only, so nearly every choice is a tie
    (50, 12, 9, 50),    # one block (diagonal only)
    (43, 9, 10, 4),     # blocks narrower than k
    (70, 33, 3, 13),    # block not dividing n, L not a multiple of 8
])
def test_knn_matches_brute_force_with_ties(n: int, n_bits: int, k: int, block: int) -> None:
    rng = np.random.default_rng(n)
    bits = rng.integers(0, 2, (n, n_bits), dtype=np.uint8)
    bits[5] = bits[2]  # exact duplicates: distance 0 to a lower and a higher index
    bits[9] = bits[2]
    want_idx, want_h = _brute(bits, k)
    packed = np.packbits(bits, axis=1)
    idx, h = knn_from_bits(packed, k, n_bits, block=block)
    assert np.array_equal(idx, want_idx) and np.array_equal(h, want_h)
    H = (bits[:, None, :] != bits[None, :, :]).sum(axis=2).astype(np.int32)
    idx2, h2 = knn_from_hamming(H, k, block=block)
    assert np.array_equal(idx2, want_idx) and np.array_equal(h2, want_h)


def test_wide_keys_fall_back_to_float64() -> None:
    """(L + 1)·block > 2^23 cannot be exact in float32; the float64 path gives the same."""
    rng = np.random.default_rng(3)
    n_bits, n, k = 1 << 18, 40, 4  # (L + 1)·n > 2^23
    bits = rng.integers(0, 2, (n, n_bits), dtype=np.uint8)
    bits[:, 100:] = bits[0, 100:]  # distances only from the first 100 bits: many ties
    want_idx, want_h = _brute(bits, k)
    idx, h = knn_from_bits(np.packbits(bits, axis=1), k, n_bits, block=1024)
    assert np.array_equal(idx, want_idx) and np.array_equal(h, want_h)
