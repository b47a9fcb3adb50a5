"""FREDY's vote sensitivity, measured on real runs against the bound the accounting uses.

Neighbouring federations differ in one private record of client 0 (replaced or removed); the
teachers' vote-count vectors on U are compared query by query. With FedAvg rounds the bound
2n is attained (it cannot be lowered); with ``teacher_rounds=1`` a record moves only its own
teacher's vote, so the bound 2 holds on every query (docs/privacy.md, "FREDY's sensitivity").
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fedlabels as fl
from conftest import load_benchmark
from fedlabels.data import ClientData
from fedlabels.methods.teacher_student.fredy import vote_l1_sensitivity

MLP = "mlp(hidden=16)"


@pytest.fixture(scope="module")
def fed():
    # unequal clients: 3 clients, the split's sizes differ
    return fl.load_federation("digits", clients=3, unlabeled=200, private=151, test=100,
                              seed=0)


def neighbours(fed):
    """Federations that differ from ``fed`` in one private record of client 0."""
    c0 = fed.clients[0]
    out = []
    for value, label in ((50.0, 0), (1000.0, 3), (-5.0, 7)):  # a replaced record
        X, y = c0.X.copy(), c0.y.copy()
        X[0], y[0] = value, label
        out.append(dataclasses.replace(fed, clients=[ClientData(X, y), *fed.clients[1:]]))
    removed = ClientData(c0.X[1:].copy(), c0.y[1:].copy())  # a removed record
    out.append(dataclasses.replace(fed, clients=[removed, *fed.clients[1:]]))
    return out


def teacher_votes(fed, teacher_rounds, epsilon_per_query=0.5):
    result = fl.run("fredy", fed, model=MLP, rounds=1, period=5, seed=0, progress=False,
                    options={"queries": len(fed.X_public), "teacher_rounds": teacher_rounds,
                             "epsilon_per_query": epsilon_per_query})
    votes = np.stack([m.predict(fed.X_public) for m in result.client_models])  # the teachers
    return votes, result.extra["privacy"]


def counts(votes, n_classes=10):
    return np.stack([(votes == k).sum(axis=0) for k in range(n_classes)], axis=1)


def test_fedavg_teachers_attain_the_sensitivity_2n(fed):
    n = fed.n_clients
    votes, privacy = teacher_votes(fed, teacher_rounds=3)
    assert privacy["l1_sensitivity"] == vote_l1_sensitivity(n, 3) == 2 * n
    assert privacy["epsilon_per_query"] == pytest.approx(0.5 * n)
    base = counts(votes)
    l1 = [np.abs(counts(teacher_votes(nb, 3)[0]) - base).sum(axis=1).max()
          for nb in neighbours(fed)[:1]]
    # one record moved every teacher's vote on some query: 2n is attained, not only a bound
    assert max(l1) == 2 * n


def test_one_teacher_round_moves_only_the_changed_clients_vote(fed):
    n = fed.n_clients
    votes, privacy = teacher_votes(fed, teacher_rounds=1)
    assert privacy["l1_sensitivity"] == vote_l1_sensitivity(n, 1) == 2
    assert privacy["epsilon_per_query"] == pytest.approx(0.5)  # formal = nominal
    assert privacy["epsilon"] == pytest.approx(privacy["if_disjoint_teachers"]["epsilon"])
    assert "no weights are exchanged" in " ".join(privacy["assumptions"])
    base = counts(votes)
    moved_own = False
    for nb in neighbours(fed):
        other, _ = teacher_votes(nb, teacher_rounds=1)
        assert np.array_equal(other[1:], votes[1:])  # the other teachers never see it
        assert np.abs(counts(other) - base).sum(axis=1).max() <= 2
        moved_own |= bool(np.any(other[0] != votes[0]))
    assert moved_own  # the record does matter to its own teacher


def test_a_total_budget_buys_less_noise_with_disjoint_teachers(fed):
    def privacy(teacher_rounds):
        return fl.run("fredy", fed, model=MLP, rounds=1, period=5, seed=0, progress=False,
                      options={"queries": 10, "teacher_rounds": teacher_rounds,
                               "epsilon": 8.0}).extra["privacy"]

    fedavg, disjoint = privacy(2), privacy(1)
    for p in (fedavg, disjoint):
        assert p["epsilon"] <= 8.0 * (1 + 1e-9)
    assert disjoint["l1_sensitivity"] == 2 and fedavg["l1_sensitivity"] == 2 * fed.n_clients
    assert disjoint["laplace_scale"] < fedavg["laplace_scale"] / 2


# ------------------------------------------------------------------ the label bound script


@pytest.fixture(scope="module")
def bound():
    """benchmarks/fredy_label_bound.py, imported as a module (benchmarks/ is no package)."""
    return load_benchmark("fredy_label_bound")


@pytest.mark.parametrize("eps1,n_classes,n_queries,epsilon", [
    (1.0, 3, 1, 0.5), (1.0, 4, 3, 1.2), (0.7, 10, 4, 1.0), (2.0, 2, 5, 3.0), (0.5, 5, 3, 0.0)])
def test_randomized_response_delta_matches_brute_force(bound, eps1, n_classes, n_queries,
                                                       epsilon):
    # oracle: every output vector of Q k-ary randomized responses, inputs (0,..,0) vs (1,..,1)
    import itertools

    z = np.exp(eps1) + n_classes - 1

    def prob(outputs, label):
        return np.prod([(np.exp(eps1) if o == label else 1.0) / z for o in outputs])

    oracle = sum(max(0.0, prob(o, 0) - np.exp(epsilon) * prob(o, 1))
                 for o in itertools.product(range(n_classes), repeat=n_queries))
    assert bound.rr_delta(eps1, n_classes, n_queries, epsilon) == pytest.approx(oracle,
                                                                                 abs=1e-12)


def test_randomized_response_budget_beats_basic_composition(bound):
    eps1 = bound.rr_epsilon_per_label(8.0, 1e-5, 10, 10)
    assert bound.rr_delta(eps1, 10, 10, 8.0) <= 1e-5 < bound.rr_delta(eps1 * 1.01, 10, 10, 8.0)
    assert 0.8 < eps1 < 8.0  # more than ε/Q per label, far less than ε
