"""The data splitters against what they promise, on small cases: Hamilton's method gives
the extra units to the largest remainders, lower index first on a tie."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fedlabels.data.partition import largest_remainder


def _hamilton(total: int, weights: list[int]) -> list[int]:
    """Floors of the exact quotas, then one more to the largest remainders (lower index
    first on a tie), in exact rational arithmetic."""
    quota = [Fraction(total * w, sum(weights)) for w in weights]
    counts = [q.numerator // q.denominator for q in quota]
    order = sorted(range(len(weights)), key=lambda i: (-(quota[i] - counts[i]), i))
    for i in order[:total - sum(counts)]:
        counts[i] += 1
    return counts


@pytest.mark.parametrize("total,weights,want", [
    (10, [45, 35, 20], [5, 3, 2]),  # remainders .5, .5, 0: the tie to the lower index
    (10, [1, 2, 4], [1, 3, 6]),     # quotas 1.43, 2.86, 5.71: two extra to clients 1 and 2
    (7, [1, 1, 1], [3, 2, 2]),
])
def test_largest_remainder_by_hand(total, weights, want):
    assert _hamilton(total, weights) == want
    assert largest_remainder(total, np.array(weights, dtype=float)).tolist() == want


def test_largest_remainder_equals_exact_hamilton():
    rng = np.random.default_rng(0)
    for _ in range(200):
        weights = rng.integers(1, 50, int(rng.integers(2, 9))).tolist()
        total = int(rng.integers(0, 300))
        got = largest_remainder(total, np.array(weights, dtype=float)).tolist()
        assert got == _hamilton(total, weights), (total, weights)
