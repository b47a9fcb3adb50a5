"""The data splitters against what they promise, on small cases: an iid split is a shuffle
(not the rows in file order), Hamilton's method gives the extra units to the largest
remainders (lower index first on a tie), each half of a Dirichlet split takes its own
alpha, shards hand out classes round-robin, and a class missing from the test split never
takes another's last test row."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fedlabels.data.partition import largest_remainder, partition


def test_iid_split_holds_every_class_near_its_global_share_even_on_sorted_rows():
    y = np.repeat([0, 1, 2, 3], 250)  # a file sorted by class: a split in file order is
    parts = partition(y, 4, "iid", np.random.default_rng(0))  # one class per client
    assert sorted(np.concatenate(parts).tolist()) == list(range(1000))
    assert [len(p) for p in parts] == [250] * 4
    for p in parts:
        share = np.bincount(y[p], minlength=4) / len(p)
        assert np.all(np.abs(share - 0.25) < 0.1), share
    again = partition(y, 4, "iid", np.random.default_rng(1))
    assert any(not np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


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


@pytest.mark.parametrize("spec", ["dirichlet:1e6,0.001", "dirichlet:0.001,1e6"])
def test_each_half_of_the_dirichlet_split_takes_its_own_alpha(spec):
    """Half the pool is split with Dirichlet(alpha1), half with Dirichlet(alpha2): with one
    alpha huge (an even split) and the other tiny (each class to about one client), the
    client holding most of a class holds at least its tiny-alpha half plus a share of the
    other (~ 1/2 + 1/8 for 4 clients); two huge alphas give each about 1/4."""
    y = np.repeat(np.arange(4), 500)
    for seed in range(3):
        parts = partition(y, 4, spec, np.random.default_rng(seed))
        held = np.stack([np.bincount(y[p], minlength=4) for p in parts])  # (client, class)
        assert held.sum() == len(y)
        assert np.all(held.max(axis=0) / 500 > 0.55), held
    even = partition(y, 4, "dirichlet:1e6,1e6", np.random.default_rng(0))
    held = np.stack([np.bincount(y[p], minlength=4) for p in even])
    assert np.all(np.abs(held / 500 - 0.25) < 0.05), held


@pytest.mark.parametrize("m,k,c", [(2, 2, 4), (3, 2, 6), (5, 2, 10), (4, 3, 5)])
def test_shards_give_each_client_k_classes_and_every_class_a_holder(m, k, c):
    """Round-robin over the class order: client i takes classes i·K .. i·K + K - 1 (mod C),
    so with m·K >= C every class is held, and a class's rows go evenly to its holders."""
    y = np.repeat(np.arange(c), 60)
    parts = partition(y, m, f"shards:{k}", np.random.default_rng(0))
    classes = [set(np.unique(y[p]).tolist()) for p in parts]
    assert all(len(s) == k for s in classes)
    assert set().union(*classes) == set(range(c))
    for cls in range(c):
        shares = [int(np.sum(y[p] == cls)) for p, s in zip(parts, classes, strict=True)
                  if cls in s]
        assert sum(shares) == 60 and max(shares) - min(shares) <= 1


def test_a_missing_test_class_never_takes_the_last_test_row_of_another():
    """every_class_in_test by hand: the test split (first 2 rows) holds class 0 twice;
    class 1 gets one of its rows, then class 2 finds no class with two test rows to give."""
    from fedlabels.data.partition import every_class_in_test

    y = np.array([0, 0, 1, 1, 2, 2])
    out = every_class_in_test(np.arange(6), y, 2)
    assert out.tolist() == [0, 2, 1, 3, 4, 5]
    assert sorted(y[out[:2]].tolist()) == [0, 1]  # class 0 kept its last test row
