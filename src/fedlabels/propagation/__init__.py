"""Plaintext label propagation: SimHash LSH, kNN graph, sparse solve (XCLP's core)."""

from fedlabels.propagation.core import (
    GraphSpec,
    hamming_matrix,
    knn_graph,
    knn_graph_from_hamming,
    label_propagation,
    labels_and_confidence,
    lsh_bits,
    lsh_projection,
    one_hot,
    propagate,
    solve_cg,
)

__all__ = [
    "GraphSpec",
    "hamming_matrix",
    "knn_graph",
    "knn_graph_from_hamming",
    "label_propagation",
    "labels_and_confidence",
    "lsh_bits",
    "lsh_projection",
    "one_hot",
    "propagate",
    "solve_cg",
]
