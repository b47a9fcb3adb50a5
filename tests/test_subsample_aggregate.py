"""DP-FedCT --mechanism subsample-aggregate: PATE inside each client, GNMax labels accounted
exactly (one Gaussian mechanism)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

import fedlabels as fl
from fedlabels.consensus import vote_counts
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import reproducible
from fedlabels.learners import as_models
from fedlabels.method.base import TrainingData, make_learners
from fedlabels.methods import get_method
from fedlabels.methods.fedct.mechanisms.subsample_aggregate import (
    SubsampleAggregateEvent,
    account_subsample_aggregate,
    record_parts,
    teacher_votes,
)
from fedlabels.privacy.gnmax import DEFAULT_ORDERS

DELTA = 1e-5
SA = {"mechanism": "subsample-aggregate", "epsilon": 8.0, "teachers": 4, "label_queries": 30}


def gaussian_epsilon(sigma: float, n: int, delta: float = DELTA) -> float:
    """dp-accounting's PLD ε of n Gaussian mechanisms with L2 sensitivity √2 and std σ."""
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma / np.sqrt(2)), n))
    return float(acc.get_epsilon(delta))


def rdp_epsilon(sigma: float, n: int, delta: float = DELTA) -> float:
    """dp-accounting's RDP ε of the same mechanisms (the looser bound beside the guarantee)."""
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(DEFAULT_ORDERS))
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma / np.sqrt(2)), n))
    return float(acc.get_epsilon(delta))


@pytest.fixture(scope="module")
def fed():
    # unequal client sizes: a Dirichlet split of breast_cancer (m = 3)
    return fl.load_federation("breast_cancer", clients=3, seed=1,
                              partition="dirichlet:1.0,1.0")


def run(fed: Any, model: str = "dt", **kw: Any) -> Any:
    options = {**SA, **kw.pop("options", {})}
    return fl.run("dp-fedct", fed, model=model, rounds=kw.pop("rounds", 3), period=3, seed=1,
                  progress=False, options=options, **kw)


def test_accountant_matches_dp_accounting_on_known_parameters():
    for sigma, n in ((5.0, 100), (20.0, 3000), (50.5, 7)):
        ours = account_subsample_aggregate([SubsampleAggregateEvent(sigma, n, (0,))], DELTA)
        assert ours["epsilon"] == pytest.approx(gaussian_epsilon(sigma, n), rel=1e-6)
        assert ours["epsilon_by_accountant"]["rdp_data_independent"] == pytest.approx(
            rdp_epsilon(sigma, n), rel=1e-9)
    # two clients, one of which skipped a round: each is charged its own labels
    events = [SubsampleAggregateEvent(10.0, 40, (0, 1)), SubsampleAggregateEvent(10.0, 40, (0,))]
    out = account_subsample_aggregate(events, DELTA)
    assert out["labels_released"] == {"0": 80, "1": 40}
    assert out["epsilon_per_client"]["1"] == pytest.approx(gaussian_epsilon(10.0, 40), rel=1e-6)
    assert out["epsilon"] == pytest.approx(gaussian_epsilon(10.0, 80), rel=1e-6)


def test_result_epsilon_is_the_accountants_for_the_labels_released(fed):
    result = run(fed, participation=2, options={"data_dependent": True})
    p = result.extra["privacy"]
    sigma = p["noise_sigma"]
    # who released what, read off the traffic: a client that was not selected sent nothing
    took_part = np.array([[b > 0 for b in r.bytes_up] for r in result.rounds])
    for cid in range(fed.n_clients):
        n = 30 * int(took_part[:, cid].sum())
        assert p["labels_released"][str(cid)] == n
        assert p["epsilon_per_client"][str(cid)] == pytest.approx(gaussian_epsilon(sigma, n),
                                                                  rel=1e-6)
    assert p["epsilon"] == max(p["epsilon_per_client"].values()) <= 8.0 * (1 + 1e-6)
    assert p["guarantee"] == "formal" and "added or removed" in p["neighbouring"]
    # the data-dependent bound is reported, marked, and its payload is outside the guarantee
    assert p["epsilon_data_dependent"] <= p["epsilon"]
    assert "neither it nor" in p["epsilon_data_dependent_note"]
    assert any(o["name"] == "dpfedct.sa_labels:dd_rdp" for o in p["outside_guarantee"])


def test_noise_is_not_from_the_run_seed(fed):
    def consensus_trace() -> list[Any]:
        res = run(fed, options={"epsilon": 0.5, "label_queries": 100})
        return [r.server for r in res.rounds]

    assert consensus_trace() != consensus_trace()  # same seed, fresh OS entropy each run
    with reproducible(7):
        a = consensus_trace()
    with reproducible(7):
        assert consensus_trace() == a


def test_record_parts_depend_on_the_record_alone():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 6)), rng.integers(0, 3, size=300)
    parts = record_parts(X, y, 7, key=5)
    assert set(parts.tolist()) == set(range(7))
    np.testing.assert_array_equal(record_parts(X[1:], y[1:], 7, key=5), parts[1:])
    order = rng.permutation(300)
    np.testing.assert_array_equal(record_parts(X[order], y[order], 7, key=5), parts[order])


class StubClient:
    """What :func:`teacher_votes` reads from a DP-FedCT client."""

    def __init__(self, X: np.ndarray, y: np.ndarray, U: np.ndarray, model: str) -> None:
        self.cid, self.seed, self.public = 0, 3, U
        self.learner = make_learners(as_models(model), [0], n_classes=2)[0]
        self.X, self.y = X, y

    def training_data(self) -> TrainingData:
        return TrainingData(self.X, self.y)


@pytest.mark.parametrize("model", ["dt", "mlp(hidden=4)"])
def test_removing_one_record_moves_the_vote_counts_by_at_most_sqrt2(fed, model):
    data, U = fed.clients[0], fed.X_public
    rows = np.arange(len(U))
    full = vote_counts(teacher_votes(StubClient(data.X, data.y, U, model), rows, 5, 5), 2)
    for drop in (0, len(data.y) // 2):
        keep = np.arange(len(data.y)) != drop
        less = vote_counts(teacher_votes(StubClient(data.X[keep], data.y[keep], U, model),
                                         rows, 5, 5), 2)
        assert np.sqrt(((full - less) ** 2).sum(axis=1)).max() <= np.sqrt(2) + 1e-12


def test_torch_teachers_and_option_errors(fed):
    res = run(fed, model="mlp(hidden=4)", rounds=1,
              options={"teachers": 3, "teacher_steps": 3})
    assert res.extra["privacy"]["labels_released"] == {"0": 30, "1": 30, "2": 30}
    parse = get_method("dp-fedct").parse_options
    with pytest.raises(FedLabelsError, match="apply only with --mechanism subsample-agg"):
        parse({"epsilon": 1.0, "teachers": 5})
    with pytest.raises(FedLabelsError, match="needs the total budget"):
        parse({"mechanism": "subsample-aggregate", "epsilon_per_round": 1.0})
    with pytest.raises(FedLabelsError, match="do not apply"):
        parse({"mechanism": "subsample-aggregate", "epsilon": 1.0, "sensitivity": "empirical"})
