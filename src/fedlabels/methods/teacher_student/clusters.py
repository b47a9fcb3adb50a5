"""Cluster queries: the teachers label clusters of the public set U, not single points.

With ``query_selection=clusters`` the Q queries are Q clusters of U, found by k-means on U
alone (:func:`public_clusters`, seeded by the server's run seed), so choosing them costs no
privacy. Every party holds U and computes the same clusters from the same seed; only the
seed travels.

**A teacher's vote on a cluster is one class** (:func:`cluster_votes`): the class it
predicts for most of the cluster's members (ties: the smallest class). Each teacher still
casts exactly one vote per query, so changing one private record, which trains one teacher,
moves at most that teacher's one vote per query: the vote counts change by -1 in one class
and +1 in another, the same L2 sensitivity √2 (L1: 2) as a vote on one point, and the GNMax
and Laplace accounting apply unchanged.

The released label of a cluster labels every member (:func:`spread_labels`): post-processing
of the release with public data, so the student trains on all of U at no privacy cost.
"""

from __future__ import annotations

import warnings

import numpy as np

from fedlabels.core.errors import FedLabelsError

#: spaces the clusters can be found in: the features as the learners see them, or with the
#: federation's z-scoring undone (features measured in one unit, such as pixels)
CLUSTER_SPACES = ("features", "unscaled")

#: Lloyd iterations of k-means (enough to converge on U's sizes here; scipy's default is 10)
KMEANS_ITERATIONS = 50


def public_clusters(X_public: np.ndarray, n_clusters: int, seed: int) -> np.ndarray:
    """Cluster index in ``[0, n_clusters)`` of each row of U (k-means++, Lloyd), from U and
    the seed only: the same on every party."""
    from scipy.cluster.vq import kmeans2  # lazily: importing fedlabels must not load scipy

    X = np.asarray(X_public, dtype=np.float64)
    if not 1 <= n_clusters <= len(X):
        raise FedLabelsError(f"cannot form {n_clusters} clusters of the {len(X)} rows of U; "
                             f"use --queries between 1 and {len(X)}.")
    if n_clusters == len(X):  # one row per cluster: k-means' optimum, without its cost
        return np.arange(len(X), dtype=np.int64)
    with warnings.catch_warnings():  # an empty cluster is allowed: nobody gets its label
        warnings.simplefilter("ignore")
        _, assignment = kmeans2(X, n_clusters, iter=KMEANS_ITERATIONS, minit="++",
                                seed=int(seed))
    return np.asarray(assignment, dtype=np.int64)


def cluster_votes(predictions: np.ndarray, assignment: np.ndarray, n_clusters: int,
                  n_classes: int) -> np.ndarray:
    """One teacher's vote per cluster: the class it predicts for most of the cluster's
    members (ties and empty clusters: the smallest class). ``predictions`` are its labels on
    every row of U."""
    counts = np.zeros((n_clusters, n_classes), dtype=np.int64)
    np.add.at(counts, (np.asarray(assignment, dtype=np.int64),
                       np.asarray(predictions, dtype=np.int64)), 1)
    return counts.argmax(axis=1).astype(np.int64)


def spread_labels(labels: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    """Each row of U gets its cluster's released label (ABSTAIN where it was declined)."""
    labels = np.asarray(labels, dtype=np.int64)
    return labels[np.asarray(assignment, dtype=np.int64)]


def unscale(X: np.ndarray, scaling: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """U with the federation's z-scoring undone (as loaded); U itself without scaling."""
    if scaling is None:
        return X
    mean, std = scaling
    return np.asarray(X, dtype=np.float64) * np.asarray(std) + np.asarray(mean)


__all__ = ["CLUSTER_SPACES", "cluster_votes", "public_clusters", "spread_labels", "unscale"]
