"""XCLP's graph, balance and confidences against dense formulas written out here: the kNN
graph of a Hamming matrix (k nearest others by (h, index), similarity max(cos(πh/L), 0)^p,
W + Wᵀ, D^{-1/2} W D^{-1/2}), the class-balanced scores (propagating Y[i, c] = 1/|L_c|),
the per-class loss weights and the entropy confidence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlabels.propagation.core import (
    GraphSpec,
    class_loss_weights,
    knn_graph_from_hamming,
    labels_and_confidence,
    one_hot,
    propagate,
)


def _dense_graph(H: np.ndarray, k: int, n_bits: int, power: float) -> np.ndarray:
    n = len(H)
    B = np.zeros((n, n))
    for i in range(n):
        others = sorted((int(H[i, j]), j) for j in range(n) if j != i)[:k]
        for h, j in others:
            B[i, j] = max(math.cos(math.pi * h / n_bits), 0.0) ** power
    W = B + B.T
    deg = W.sum(axis=1)
    deg[deg == 0] = 1.0
    return W / np.sqrt(deg)[:, None] / np.sqrt(deg)[None, :]


@pytest.mark.parametrize("seed", range(4))
def test_graph_of_a_hamming_matrix_equals_the_dense_formula(seed):
    rng = np.random.default_rng(seed)
    n, n_bits, k = 12, 16, 3
    H = rng.integers(0, n_bits + 1, (n, n))  # many distances beyond L/2: cosines below 0
    H = np.triu(H, 1) + np.triu(H, 1).T
    for power in (1.0, 3.0):
        W = knn_graph_from_hamming(H, GraphSpec(k=k, n_bits=n_bits, power=power))
        np.testing.assert_allclose(W.toarray(), _dense_graph(H, k, n_bits, power),
                                   rtol=1e-12, atol=1e-15)


def test_class_balanced_scores_propagate_labels_weighted_by_one_over_the_class_count():
    rng = np.random.default_rng(0)
    n, n_bits = 30, 32
    H = rng.integers(0, n_bits // 2, (n, n))
    H = np.triu(H, 1) + np.triu(H, 1).T
    W = knn_graph_from_hamming(H, GraphSpec(k=4, n_bits=n_bits))
    y = np.full(n, -1)
    y[[0, 1, 2, 3, 4, 5, 6, 7]] = [0, 0, 0, 0, 0, 0, 1, 2]  # 6, 1 and 1 labelled
    Y = one_hot(y, 3) / np.array([6.0, 1.0, 1.0])
    dense = np.linalg.solve(np.eye(n) - 0.9 * W.toarray(), Y)
    np.testing.assert_allclose(propagate(W, y, 3, 0.9, "class"), dense, atol=1e-8)


def test_class_loss_weights_are_the_mean_count_over_each_count():
    assert class_loss_weights(np.array([1, 3, 0, 4])).tolist() == [2.0, 2.0 / 3, 0.0, 0.5]


def test_confidence_is_one_minus_entropy_over_log_c():
    Z = np.array([[1.0, 1.0, 0.0], [3.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    labels, conf = labels_and_confidence(Z)
    ent = [math.log(2), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), 0.0]
    np.testing.assert_allclose(conf, [1 - e / math.log(3) for e in ent], rtol=1e-12)
    assert labels.tolist() == [0, 0, 2]
