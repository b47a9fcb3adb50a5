"""FedCT's ``soft_targets``: the vote's distribution as the pseudo-labels' target."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.methods.fedct.fedct import FedCTServer
from fedlabels.methods.fedct.schedule import soft_rows
from fedlabels.testing import check_method

MODEL = "mlp(hidden=16)"


def test_rows_give_the_soft_cross_entropy():
    """Drawing a row uniformly has the expected loss of drawing an example uniformly under
    -sum_k q_k log p_k (torch's probability-target cross-entropy as the oracle)."""
    rng = np.random.default_rng(0)
    n, c = 9, 3
    labels = rng.integers(0, c, n)
    share = np.array([1.0, 0.5, 0.7, 1.0, 0.4, 0.9, 0.6, 1.0, 0.8])
    logits = torch.from_numpy(rng.standard_normal((n, c)))
    q = np.full((n, c), 0.0)
    for j in range(n):
        q[j] = (1 - share[j]) / (c - 1)
        q[j, labels[j]] = share[j]
    oracle = torch.nn.functional.cross_entropy(logits, torch.from_numpy(q)).item()
    at, cls, w = soft_rows(labels, share, c)
    assert len(at) == n + 2 * int((share < 1).sum())  # zero-probability rows are left out
    per_row = torch.nn.functional.cross_entropy(logits[at], torch.from_numpy(cls),
                                                reduction="none").numpy()
    assert np.mean(per_row * w) == pytest.approx(oracle)
    for j in range(n):  # each example's rows carry its distribution
        mass = np.zeros(c)
        np.add.at(mass, cls[at == j], w[at == j] * n / len(at))
        assert np.allclose(mass, q[j])


def test_needs_a_torch_learner():
    fed = fl.load_federation("digits", clients=3, unlabeled=100, private=300, test=100,
                             seed=0)
    with pytest.raises(FedLabelsError, match="soft_targets need a torch learner"):
        fl.run("fedct", fed, model="dt", rounds=1, options={"soft_targets": True},
               progress=False)


def test_learner_gets_the_vote_distribution(monkeypatch):
    """Partial participation (3 of 5), unequal clients, a quorum that abstains: the rows a
    client trains on carry, per example of U it kept, the previous round's vote shares
    counted directly from the clients' replies."""
    fed = fl.load_federation("digits", clients=5, unlabeled=120, private=500, test=100,
                             partition="quantity:1", seed=1)
    calls: list[tuple[Any, Any, Any, int]] = []
    votes: list[tuple[np.ndarray, np.ndarray]] = []
    steps, run_round = TorchMLPClassifier.train_steps, FedCTServer.run_round

    def train_steps(learner: Any, X: Any, y: Any, n: int, X_aux: Any = None,
                    y_aux: Any = None, w_aux: Any = None, aux_index: Any = None,
                    **kw: Any) -> Any:
        calls.append((None if y_aux is None else np.array(y_aux), w_aux,
                      None if aux_index is None else np.array(aux_index), len(votes)))
        return steps(learner, X, y, n, X_aux, y_aux, w_aux=w_aux, aux_index=aux_index, **kw)

    def server_round(server: FedCTServer, rnd: int, grid: Any) -> Any:
        collect, seen = server.collect_votes, []
        server.collect_votes = lambda replies: seen.append(collect(replies)) or seen[-1]
        out = run_round(server, rnd, grid)
        votes.append((seen[0], np.array(server.labels)))
        return out

    monkeypatch.setattr(TorchMLPClassifier, "train_steps", train_steps)
    monkeypatch.setattr(FedCTServer, "run_round", server_round)
    res = fl.run("fedct", fed, model=MODEL, rounds=4, period=5, seed=0, progress=False,
                 participation=3, options={"soft_targets": True, "quorum": 0.6})
    checked = 0
    for y_aux, w_aux, index, done in calls:  # done: rounds finished before this call
        if y_aux is None:  # no consensus received yet
            continue
        voted, labels = votes[done - 1]
        kept = np.flatnonzero(labels >= 0)
        assert set(np.unique(index)) == set(kept)
        for j in kept:
            count = Counter(voted[:, j].tolist())
            share = count[int(labels[j])] / voted.shape[0]
            rows = index == j
            mass = {int(c): float(w) for c, w in zip(y_aux[rows], w_aux[rows], strict=True)}
            total = sum(mass.values())
            assert mass[int(labels[j])] / total == pytest.approx(share, rel=1e-5)
            rest = [v / total for c, v in mass.items() if c != labels[j]]
            assert np.allclose(rest, (1 - share) / (fed.n_classes - 1), rtol=1e-4)
        checked += 1
    assert checked >= 6
    plain = fl.run("fedct", fed, model=MODEL, rounds=4, period=5, seed=0, progress=False,
                   participation=3, options={"quorum": 0.6})
    assert res.final != plain.final


def test_contract_holds():
    """Determinism, declared payloads only (real traffic), and the state round trip (the
    server's vote counts are state)."""
    passed = check_method("fedct", options={"soft_targets": True, "warmup_steps": 5},
                          model=MODEL, checks=("determinism", "payloads", "state"))
    assert passed == ["determinism", "payloads", "state"]
