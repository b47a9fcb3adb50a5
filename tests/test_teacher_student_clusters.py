"""Cluster queries and several teachers per client (PATE, DP-PATE, FREDY).

The clusters come from U and the server's seed alone; a teacher casts one class per cluster
(so one record still moves at most one vote per query); the released label labels every
member; the accounting is the same as for Q random queries; each client's teachers train on
disjoint parts chosen without looking at the records.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.consensus import vote_counts
from fedlabels.methods import get_method
from fedlabels.methods.teacher_student.clusters import (
    cluster_votes,
    public_clusters,
    spread_labels,
)
from fedlabels.privacy.gnmax import DEFAULT_ORDERS
from test_teacher_student_state import _run


@pytest.fixture(scope="module")
def fed():
    return fl.load_federation("breast_cancer", clients=3, seed=0)


def test_clusters_come_from_u_and_the_seed_only(fed):
    U = fed.X_public
    a = public_clusters(U, 8, seed=5)
    assert a.shape == (len(U),) and set(np.unique(a)) <= set(range(8))
    assert np.array_equal(a, public_clusters(U.copy(), 8, seed=5))  # same on every party
    assert not np.array_equal(a, public_clusters(U, 8, seed=6))
    # nearest centre: every row is closer to its own cluster's mean than to another's
    centres = np.stack([U[a == q].mean(axis=0) for q in np.unique(a)])
    dist = ((U[:, None, :] - centres[None]) ** 2).sum(axis=2)
    assert np.mean(np.unique(a)[dist.argmin(axis=1)] == a) > 0.99


def test_a_run_clusters_u_as_the_release_says_and_spreads_the_labels(fed):
    options = {"queries": 6, "noise_sigma": 2.0, "query_selection": "clusters"}
    _, server, grid = _run("dp-pate", "dt", options, fed, rebuild=False)
    _, server2, _ = _run("dp-pate", "dt", options, fed, rebuild=False)
    assert server.cluster_seed == server2.cluster_seed  # from the run seed
    assignment = public_clusters(fed.X_public, 6, server.cluster_seed)
    assert server.counts.shape == (6, fed.n_classes)
    assert server.counts.sum(axis=1).tolist() == [fed.n_clients] * 6  # one vote per teacher
    for role in grid.clients.values():
        # every member of a labelled cluster is a student example, with its cluster's label
        assert np.array_equal(role.student_index, np.arange(len(fed.X_public)))
        assert np.array_equal(role.student_y, server.labels[assignment])


def test_a_teacher_votes_one_class_per_cluster_the_majority_of_its_members():
    rng = np.random.default_rng(0)
    assignment = rng.integers(0, 7, 200)
    predictions = rng.integers(0, 4, 200)
    votes = cluster_votes(predictions, assignment, 9, 4)  # clusters 7 and 8 are empty
    for q in range(9):
        members = Counter(predictions[assignment == q].tolist())
        top = max(members.values(), default=0)
        expected = min((c for c, k in members.items() if k == top), default=0)
        assert votes[q] == expected


def test_changing_one_teacher_moves_at_most_one_vote_per_cluster():
    rng = np.random.default_rng(1)
    assignment = rng.integers(0, 10, 300)
    preds = rng.integers(0, 5, (6, 300))
    for trial in range(20):
        other = preds.copy()
        other[trial % 6] = rng.integers(0, 5, 300)  # one teacher retrained on anything
        a = vote_counts(np.stack([cluster_votes(p, assignment, 10, 5) for p in preds]), 5)
        b = vote_counts(np.stack([cluster_votes(p, assignment, 10, 5) for p in other]), 5)
        assert np.abs(a - b).sum(axis=1).max() <= 2  # L1 2, L2 √2: GNMax's sensitivity


def test_spread_labels_give_members_their_cluster_label_and_keep_abstentions():
    labels = np.array([2, -1, 0])
    assert spread_labels(labels, np.array([0, 1, 2, 1, 0])).tolist() == [2, -1, 0, -1, 2]


def test_cluster_queries_cost_what_random_queries_cost(fed):
    """The ledger's ε for Q clusters at σ is Q Gaussian mechanisms (L2 √2) composed exactly,
    dp-accounting's analytic Gaussian of multiplier σ/√(2Q); the RDP bound Q·λ/σ² converted
    by hand beside it."""
    import dp_accounting as dpa

    sigma, q = 2.0, 6
    eps, rdp_eps = [], []
    for selection in ("random", "clusters"):
        _, server, _ = _run("dp-pate", "dt", {"queries": q, "noise_sigma": sigma,
                                              "query_selection": selection}, fed, False)
        eps.append(server.privacy["epsilon"])
        rdp_eps.append(server.privacy["epsilon_by_accountant"]["rdp_data_independent"])
    exact = dpa.get_epsilon_gaussian(sigma / np.sqrt(2 * q), 1e-5)
    assert eps[0] == eps[1] == pytest.approx(exact, rel=1e-6)
    orders = DEFAULT_ORDERS[DEFAULT_ORDERS > 1.01]
    rdp = q * orders / sigma**2
    by_hand = float(np.min(rdp + np.log1p(-1.0 / orders)
                           - np.log(1e-5 * orders) / (orders - 1.0)))
    assert rdp_eps[0] == rdp_eps[1] == pytest.approx(by_hand, rel=1e-9)


def test_teachers_per_client_vote_on_disjoint_parts_chosen_without_the_values(fed):
    options = {"queries": 20, "noise_sigma": 2.0, "teachers_per_client": 4}
    _, server, grid = _run("dp-pate", "logreg", options, fed, rebuild=False)
    sizes = [len(c.y) for c in fed.clients]
    assert server.counts.sum(axis=1).tolist() == [sum(min(4, n) for n in sizes)] * 20
    role = grid.clients[1]
    seen = []

    class Spy:
        def __init__(self, rows):
            self.rows = rows

    role._part_teacher = lambda part, steps: seen.append(part) or Spy(part)  # type: ignore
    role.teachers(type("M", (), {"config": {"steps": role.own_teacher_steps()}})())
    parts = [p.tolist() for p in seen]
    assert len(parts) == 4 and sorted(np.concatenate(seen).tolist()) == list(range(sizes[1]))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    role.data = type(role.data)(role.data.X[::-1].copy(), role.data.y[::-1].copy())
    seen.clear()
    role.teachers(type("M", (), {"config": {"steps": role.own_teacher_steps()}})())
    assert [p.tolist() for p in seen] == parts  # the same positions whatever the records


def test_inapplicable_cluster_options_are_refused():
    with pytest.raises(fl.FedLabelsError, match="cluster_space applies only to cluster"):
        get_method("pate").parse_options({"cluster_space": "unscaled"})
    with pytest.raises(fl.FedLabelsError, match="query_selection must be one of random, "
                                                "clusters"):
        get_method("dp-pate").parse_options({"noise_sigma": 1.0, "query_selection": "kmeans"})
    with pytest.raises(fl.FedLabelsError, match="has no option 'teachers_per_client'"):
        get_method("fredy").parse_options({"epsilon_per_query": 1.0, "teachers_per_client": 2})
    assert math.isfinite(get_method("fredy").parse_options(
        {"epsilon_per_query": 1.0, "query_selection": "clusters"}).epsilon_per_query)


def test_as_many_clusters_as_rows_puts_each_row_alone():
    X = np.random.default_rng(0).normal(size=(40, 3))
    assert sorted(public_clusters(X, 40, seed=1)) == list(range(40))
    assert len(set(public_clusters(X, 39, seed=1))) <= 39
