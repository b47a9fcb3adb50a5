"""DS-FL (entropy reduction averaging) and FedDF (server-side ensemble distillation)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from scipy.special import softmax

import fedlabels as fl
from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import as_models
from fedlabels.method.base import Settings, make_learners
from fedlabels.methods import get_method
from fedlabels.methods.distillation.dsfl import (
    DSFLClient,
    DSFLOptions,
    DSFLServer,
    era,
    mean_entropy,
)
from fedlabels.methods.distillation.feddf import FLOWER_REFUSAL, ensemble_target
from fedlabels.methods.distillation.fedmd import subset_indices

MLP = "mlp(hidden=8)"


@pytest.fixture(scope="module")
def fed():
    # unequal client sizes: a Dirichlet split of breast_cancer (m = 3)
    return fl.load_federation("breast_cancer", clients=3, seed=1,
                              partition="dirichlet:1.0,1.0")


def run(method: str, fed: Any, **kw: Any) -> Any:
    kw.setdefault("rounds", 3)
    return fl.run(method, fed, model=MLP, period=5, seed=1, progress=False, **kw)


def weights(result: Any) -> np.ndarray:
    return np.concatenate([m.get_weights() for m in result.client_models])


class ScriptedGrid:
    """A grid whose clients answer with fixed probability matrices."""

    def __init__(self, replies: Mapping[int, np.ndarray]) -> None:
        self.replies = replies

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.replies)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        return {c: Message("dsfl.soft", arrays={"soft": self.replies[c]}) for c in messages}


def random_probs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return softmax(rng.normal(scale=2.0, size=shape), axis=-1)


# ------------------------------------------------------------------ DS-FL

def test_era_is_the_softmax_of_the_mean_over_temperature():
    rng = np.random.default_rng(0)
    probs = random_probs(rng, (4, 30, 5))
    opts = DSFLOptions(temperature=0.25, soft_dtype="float32")
    server = DSFLServer(Settings(n_classes=5, options=opts), 30, None, seed=0)
    server.run_round(0, ScriptedGrid({c: probs[c].astype(np.float32) for c in range(4)}))
    # independent oracle: scipy's softmax of the plain mean of the four clients, divided by T
    expected = softmax(probs.mean(axis=0) / 0.25, axis=1)
    np.testing.assert_allclose(server.aggregate, expected, atol=1e-6)
    np.testing.assert_allclose(era(probs.mean(axis=0), 0.25), expected, atol=1e-12)


def test_lower_temperature_lowers_the_aggregate_entropy():
    mean = random_probs(np.random.default_rng(1), (200, 10))
    temps = [4.0, 1.0, 0.5, 0.1, 0.02]
    entropies = [mean_entropy(era(mean, t)) for t in temps]
    assert all(a > b for a, b in pairwise(entropies))
    assert entropies[-1] < mean_entropy(mean) < entropies[0]
    assert entropies[-1] < 0.05 * np.log(10)  # near one-hot at T = 0.02


def test_dsfl_sharpening_changes_training_and_the_shared_targets(fed):
    sharp = run("ds-fl", fed, options={"temperature": 0.1})
    plain = run("ds-fl", fed, options={"aggregation": "mean"})
    assert not np.allclose(weights(sharp), weights(plain))  # ERA is not a no-op
    for rec in sharp.rounds:
        assert rec.server["aggregate_mean_entropy"] < rec.server["soft_mean_entropy"]
    for rec in plain.rounds:
        assert rec.server["aggregate_mean_entropy"] == pytest.approx(
            rec.server["soft_mean_entropy"])
    # payload: |U| x C float16 probabilities per client and round (plus a small header)
    payload = len(fed.X_public) * fed.n_classes * 2
    up = np.asarray(sharp.rounds[0].bytes_up)
    assert np.all(up >= payload) and np.all(up < payload + 200)
    assert sharp.extra["soft_labels"]["bytes_per_example"] == 2 * fed.n_classes


def test_dsfl_client_distils_on_the_subset_the_aggregate_is_about(fed, monkeypatch):
    """Under partial participation a client's last subset is not the aggregate's: the
    server names the aggregate's subset, and the client distils on exactly those rows."""
    settings = Settings(n_classes=2, n_features=fed.n_features, n_clients=3, period=2,
                        options=DSFLOptions(public_subset=40))
    learner = make_learners(as_models(MLP), [0], n_classes=2)[0]
    client = DSFLClient(0, fed.clients[0], learner, settings, fed.X_public, fed.X_test,
                        fed.y_test)
    seen: list[np.ndarray] = []
    monkeypatch.setattr(learner, "distill_steps",
                        lambda X, P, steps: seen.append(np.asarray(X)), raising=False)
    target = np.full((40, 2), 0.5, dtype=np.float16)
    msg = Message("dsfl.train", arrays={"soft": target},
                  config={"round": 3, "steps": 2, "subset_seed": 11, "subset_size": 40,
                          "soft_seed": 7, "soft_size": 40, "distill_steps": 2})
    reply = client.handle(msg)
    np.testing.assert_array_equal(seen[0], fed.X_public[subset_indices(7, len(fed.X_public),
                                                                        40)])
    assert reply.arrays["soft"].shape == (40, 2)


def test_dsfl_partial_participation_and_option_errors(fed):
    res = run("ds-fl", fed, participation=2, options={"public_subset": 60})
    assert all(np.isfinite(r.server["aggregate_mean_entropy"]) for r in res.rounds)
    assert sum(b > 0 for b in res.rounds[0].bytes_up) == 2
    with pytest.raises(FedLabelsError, match="temperature applies only"):
        get_method("ds-fl").parse_options({"aggregation": "mean", "temperature": 0.5})
    with pytest.raises(FedLabelsError, match="exceeds"):
        run("ds-fl", fed, rounds=1, options={"public_subset": 10**6})
    with pytest.raises(FedLabelsError, match="mlp"):
        fl.run("ds-fl", fed, model="dt", rounds=1, progress=False)


# ------------------------------------------------------------------ FedDF

def test_ensemble_target_is_the_softmax_of_averaged_logits():
    rng = np.random.default_rng(2)
    logits = rng.normal(scale=3.0, size=(3, 50, 4))
    probs = softmax(logits, axis=2)
    for t in (1.0, 0.5, 3.0):
        np.testing.assert_allclose(ensemble_target(probs, t),
                                   softmax(logits.mean(axis=0) / t, axis=1), atol=1e-9)


def test_ensemble_target_keeps_confident_clients_logit_gaps():
    # two confident clients disagree: gaps of 50 and 30 nats; the averaged logits (25, 15)
    # pick class 0 with probability 1 - e^-10 (a 1e-12 clip made it a tie, 0.5 / 0.5)
    logits = np.array([[[50.0, 0.0]], [[0.0, 30.0]]])
    probs = softmax(logits, axis=2).astype(np.float32)  # as predict_proba returns them
    for t in (1.0, 0.5, 3.0):
        np.testing.assert_allclose(ensemble_target(probs, t),
                                   softmax(logits.mean(axis=0) / t, axis=1), rtol=1e-5)


def test_feddf_distillation_moves_the_average_towards_the_ensemble(fed):
    feddf = run("feddf", fed, options={"server_steps": 30})
    fedavg = run("fedavg", fed)
    assert not np.allclose(weights(feddf), weights(fedavg))  # distillation is not a no-op
    for rec in feddf.rounds:
        assert rec.server["ensemble_kl_after"] < rec.server["ensemble_kl_before"]
    # the same client traffic as FedAvg: parameters up, the global model down
    assert [r.bytes_up for r in feddf.rounds] == [r.bytes_up for r in fedavg.rounds]


def test_feddf_partial_participation_unequal_sizes(fed):
    res = run("feddf", fed, participation=2, options={"server_steps": 20})
    assert all(r.server["ensemble_kl_after"] < r.server["ensemble_kl_before"]
               for r in res.rounds)
    assert all(sum(b > 0 for b in r.bytes_up) == 2 for r in res.rounds)


def test_feddf_refuses_a_server_without_u_and_non_torch_models(fed):
    method = get_method("feddf")
    from fedlabels.runs.loop import plan_run
    from fedlabels.runs.session import build_server

    plan = plan_run(method, n_roles=3, n_classes=2, n_features=fed.n_features, rounds=1,
                    period=2, seed=0, models=as_models(MLP))
    with pytest.raises(FedLabelsError, match="Flower ServerApp holds no copy of U"):
        build_server(plan, n_public=len(fed.X_public), client_sizes=[1, 1, 1])
    assert "simulator" in FLOWER_REFUSAL
    with pytest.raises(FedLabelsError, match="mlp"):
        fl.run("feddf", fed, model="dt", rounds=1, progress=False)


@pytest.mark.parametrize("method, shown, alone", [
    ("dd", "DD", "local"), ("fedmd", "FedMD", "local"), ("ds-fl", "DS-FL", "local"),
    ("feddf", "FedDF", "fedavg"), ("xclp", "XCLP", "perclient-lp"),
    ("fedavg-xclp", "FedAvg+XCLP", "perclient-lp")])
def test_methods_of_several_clients_refuse_one_before_any_data_loads(
        method, shown, alone, tmp_path, capsys, no_data):
    """DD, FedMD and DS-FL said 'needs at least 2 clients' only in validate, after the data
    had loaded (an image folder decoded every image first), and FedDF (an ensemble of one),
    XCLP and FedAvg+XCLP (label propagation across one client) ran with one client:
    Method.check_clients refuses it from the options alone, as FedCT's and PATE's, on the
    command line (exit 2, one line naming the fix) and in fl.run."""
    from fedlabels.cli import main

    for dataset in (f"imagefolder:{tmp_path}", "breast_cancer"):
        assert main(["run", "--method", method, "--dataset", dataset, "--clients", "1",
                     "-o", str(tmp_path / "r.json")]) == 2
        err = capsys.readouterr().err
        assert f"{shown} needs at least 2 clients, got 1." in err and err.count("\n") == 1
        assert "--clients 2 or more" in err and f"--method {alone}" in err
        with pytest.raises(FedLabelsError, match=re.escape(f"{shown} needs at least 2 clients")):
            fl.run(method, dataset, clients=1)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("method, model", [("feddf", "mlp(hidden=4)"), ("xclp", None),
                                           ("fedavg-xclp", "mlp(hidden=4)")])
def test_one_client_of_a_federation_is_refused_when_the_run_is_built(method, model):
    """A Federation passed to fl.run skips the check before data: validate refuses it."""
    fed = fl.load_federation("breast_cancer", clients=1, seed=0)
    with pytest.raises(FedLabelsError, match="needs at least 2 clients, got 1"):
        fl.run(method, fed, model=model, rounds=1, progress=False)


def test_dsfl_refuses_trees_before_building_every_client_s_model(fed, monkeypatch):
    """DS-FL (and DD, FedMD) with trees built all m learners (200 clients: seconds) before
    validate refused them; one learner of each distinct model is checked first."""
    import fedlabels.runs.loop as loop

    built: list[int] = []
    make = loop.make_learners

    def counting(specs: list[Any], *args: Any, **kwargs: Any) -> list[Any]:
        built.append(len(specs))
        return make(specs, *args, **kwargs)

    monkeypatch.setattr(loop, "make_learners", counting)
    with pytest.raises(FedLabelsError, match="DS-FL trains every client towards averaged "
                                             "soft labels"):
        fl.run("ds-fl", fed, model="dt", rounds=1)
    assert built == [1]  # the first client's tree, never all three
    built.clear()
    with pytest.raises(FedLabelsError, match="got DecisionTreeClassifier"):
        fl.run("dd", fed, model=["dt", "mlp(hidden=8)", "dt"], rounds=1)
    assert built == [1, 1]  # one of each distinct model
