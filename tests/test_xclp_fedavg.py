"""FedAvg+XCLP (Algorithm 2) and the confidence-weighted loss hook of the torch MLP."""

from __future__ import annotations

import numpy as np

import fedlabels as fl
from fedlabels.learners.torch_mlp import TorchMLPClassifier


def _toy(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(80, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    return X, y


def test_unit_weights_equal_unweighted_training():
    X, y = _toy()
    a = TorchMLPClassifier((8,), n_classes=2, random_state=0, batch_size=16)
    b = TorchMLPClassifier((8,), n_classes=2, random_state=0, batch_size=16)
    a.train_steps(X[:40], y[:40], 5, X[40:], y[40:])
    b.train_steps(X[:40], y[:40], 5, X[40:], y[40:], w_aux=np.ones(40))
    np.testing.assert_allclose(a.get_weights(), b.get_weights(), rtol=1e-6, atol=1e-7)


def test_zero_weights_ignore_pseudo_labels():
    X, y = _toy()
    wrong = 1 - y[40:]
    a = TorchMLPClassifier((8,), n_classes=2, random_state=0, batch_size=16)
    b = TorchMLPClassifier((8,), n_classes=2, random_state=0, batch_size=16)
    a.train_steps(X[:40], y[:40], 30, X[40:], wrong, w_aux=np.zeros(40))
    b.train_steps(X[:40], y[:40], 30, X[40:], wrong, w_aux=np.ones(40))
    assert np.mean(a.predict(X) == y) > np.mean(b.predict(X) == y)


def test_fedavg_xclp_runs_with_client_sampling(breast_cancer_fed):
    res = fl.run("fedavg-xclp", breast_cancer_fed, model="mlp(hidden=32-16)", rounds=4,
                 period=10, seed=0,
                 options={"lsh_bits": 64, "knn": 4, "labeled_fraction": 0.3,
                          "client_fraction": 0.5, "warmup_rounds": 1, "secure": "none"})
    info = res.extra["xclp"]
    assert len(info["rounds"]) == 3  # XCLP ran in every round after the warm-up
    assert all(len(r["members"]) == 3 for r in info["rounds"])  # ceil(0.5 * 5) sampled, not 2
    assert res.final["mean_accuracy"] > 0.8
    assert len(set(res.final["client_accuracies"])) == 1  # all evaluate the global model


def test_fedavg_xclp_secure_matches_protocol(breast_cancer_fed):
    res = fl.run("fedavg-xclp", breast_cancer_fed, model="mlp(hidden=16)", rounds=2,
                 period=5, seed=0,
                 options={"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3,
                          "warmup_rounds": 1, "secure": "paillier", "key_bits": 512,
                          "insecure_small_keys": True})
    assert res.extra["xclp"]["rounds"][0]["members"] == [0, 1, 2, 3, 4]
    assert res.communication["bytes_up_total"] > 0


def test_fedavg_xclp_options():
    import pytest

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.methods.xclp import FedAvgXCLPOptions

    def parse(data):
        return FedAvgXCLPOptions.from_mapping(data, "fedavg-xclp")

    assert parse({"propagation": None}).propagation == "none"  # --opt parses "none" to None
    assert (parse({}).client_fraction, parse({}).warmup_rounds) == (1.0, 2)
    with pytest.raises(FedLabelsError, match="client_fraction"):
        parse({"client_fraction": 0})
    with pytest.raises(FedLabelsError, match="propagation"):
        parse({"propagation": "global"})


def test_fedavg_xclp_goes_on_without_a_client_lost_in_xclp(breast_cancer_fed):
    from dropping_grid import DroppingGrid, run_on_grid, xclp_drop
    from fedlabels.engines.inprocess import InProcessGrid

    def grid(build, learners, meter):
        inner = InProcessGrid({c: build(c, ln) for c, ln in enumerate(learners)}, meter)
        return DroppingGrid(inner, [xclp_drop(2, "within-rowsums", deliver=True)])

    records, server, g = run_on_grid(
        "fedavg-xclp", breast_cancer_fed, grid, rounds=3, model="mlp(hidden=16)",
        options={"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3, "warmup_rounds": 1})
    assert g.client_ids == [0, 1, 3, 4]
    assert [h["members"] for h in server.history] == [[0, 1, 3, 4]] * 2
    assert [len(r.accuracies) for r in records] == [5, 4, 4]
    assert np.all(np.isfinite(server.weights))
