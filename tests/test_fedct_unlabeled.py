"""FedCT's use of U beyond the consensus: the consistency loss, warm-up and fine-tune."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.consistency import Consistency
from fedlabels.learners.consistency_loss import augment, consistency_loss
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.methods import get_method
from fedlabels.methods.fedct.fedct import FedCTClient
from fedlabels.testing import check_method

MODEL = "mlp(hidden=16)"
NEW = {"consistency_weight": 1.0, "consistency_threshold": 0.5, "warmup_steps": 7,
       "finetune_steps": 3}


@pytest.fixture(scope="module")
def digits_fed():
    """Digits, 4 clients of unequal sizes (quantity skew), |U| = 300."""
    return fl.load_federation("digits", n_clients=4, n_unlabeled=300, n_private=600,
                              n_test=200, partition="quantity:1", seed=0)


def run(fed: Any, rounds: int = 3, **kwargs: Any) -> fl.RunResult:
    return fl.run("fedct", fed, model=MODEL, rounds=rounds, period=5, seed=0, progress=False,
                  **kwargs)


# ---------------------------------------------------------------- options
@pytest.mark.parametrize("options, match", [
    ({"consistency_weight": -1}, r"consistency_weight must lie in \[0, 100\]"),
    ({"consistency_weight": 1, "consistency_threshold": 1.5},
     r"consistency_threshold must lie in \[0, 1\]"),
    ({"consistency_weight": 1, "consistency_augment": "rotate"},
     "consistency_augment must be one of.*noise.*dropout.*shift"),
    ({"consistency_weight": 1, "consistency_strength": 0}, r"consistency_strength must lie"),
    ({"consistency_threshold": 0.8}, "apply only with a consistency loss"),
    ({"consistency_weight": 1, "consistency_augment": "dropout", "consistency_strength": 1},
     "dropout probability.*below 1"),
    ({"warmup_steps": -1}, r"warmup_steps must lie in \[0, 1000000\]"),
    ({"finetune_steps": 2.5}, "finetune_steps must be an integer"),
])
def test_bad_values_are_one_line_errors(options, match):
    with pytest.raises(FedLabelsError, match=match) as err:
        get_method("fedct").parse_options(options)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("model, options, match", [
    ("dt", {"warmup_steps": 5}, "need a torch learner"),
    (MODEL, {"consistency_weight": 1, "consistency_augment": "shift"}, "needs image rows"),
])
def test_inapplicable_combinations_are_refused(digits_fed, model, options, match):
    fed = fl.load_federation("wine", n_clients=3, seed=0) if "shift" in str(options) \
        else digits_fed
    with pytest.raises(FedLabelsError, match=match):
        fl.run("fedct", fed, model=model, rounds=1, options=options, progress=False)


def test_dp_fedct_takes_none_of_them():
    with pytest.raises(FedLabelsError, match="consistency_weight"):
        get_method("dp-fedct").parse_options({"epsilon": 1.0, "consistency_weight": 1.0})


# ---------------------------------------------------------------- defaults
def test_defaults_never_take_the_new_path(digits_fed, monkeypatch):
    """The defaults train as before: the new path is never entered, and the records equal
    those of a run where it cannot be entered (unequal clients, partial participation)."""
    kwargs = {"participation": 0.75}
    before = run(digits_fed, **kwargs)

    def refuse(*args: Any, **kw: Any) -> None:
        raise AssertionError("train_with_u entered with default options")

    monkeypatch.setattr(FedCTClient, "train_with_u", refuse)
    after = run(digits_fed, **kwargs)
    explicit = run(digits_fed, options={"consistency_weight": 0.0, "warmup_steps": 0,
                                        "finetune_steps": 0}, **kwargs)
    assert before.final == after.final == explicit.final
    assert [r.accuracies for r in before.rounds] == [r.accuracies for r in after.rounds]
    assert before.communication == after.communication


# ---------------------------------------------------------------- the loss
def _linear(weights: np.ndarray) -> nn.Linear:
    layer = nn.Linear(weights.shape[1], weights.shape[0], bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(weights))
    return layer


def test_consistency_loss_matches_a_direct_computation():
    """Oracle in numpy: targets are the confident rows' argmax on the clean batch, the loss
    the mean over the batch of the masked cross-entropy on the augmented view."""
    rng = np.random.default_rng(0)
    W = rng.normal(size=(3, 5)).astype(np.float32) * 2
    x = rng.normal(size=(40, 5)).astype(np.float32)
    spec = Consistency(X=x, weight=0.7, threshold=0.8, augment="noise", strength=0.3)
    layer = _linear(W)
    got = consistency_loss(spec, torch.from_numpy(x), layer, np.random.default_rng(5)).item()

    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    p = softmax(x @ W.T)
    mask = p.max(axis=1) >= 0.8
    assert 0 < mask.sum() < len(x)  # both kinds of rows are in the batch
    noise_rng = np.random.default_rng(5)
    rms = np.sqrt((x ** 2).mean(axis=1, keepdims=True))
    strong = x + 0.3 * rms * noise_rng.standard_normal(x.shape).astype(np.float32)
    q = softmax(strong @ W.T)
    ce = -np.log(q[np.arange(len(x)), p.argmax(axis=1)])
    assert got == pytest.approx(0.7 * (ce * mask).mean(), rel=1e-5)


def test_rows_below_the_threshold_get_no_gradient():
    """A batch of rows none of which is confident gives loss 0 and no gradient at all; a
    threshold of 0 takes every row."""
    x = torch.zeros(8, 4)  # a zero row: uniform prediction, confidence 1/3
    layer = _linear(np.ones((3, 4), dtype=np.float32))
    spec = Consistency(X=x.numpy(), weight=1.0, threshold=0.5)
    loss = consistency_loss(spec, x, layer, np.random.default_rng(0))
    loss.backward()
    assert loss.item() == 0.0
    assert layer.weight.grad is not None and not layer.weight.grad.any()
    spec0 = Consistency(X=x.numpy(), weight=1.0, threshold=0.0)
    assert consistency_loss(spec0, x, layer, np.random.default_rng(0)).item() > 0


def test_shift_moves_each_image_by_its_drawn_offset():
    """Oracle: numpy edge padding and slicing with the same draws, then the flip."""
    rng = np.random.default_rng(1)
    x = rng.random((6, 2 * 5 * 5)).astype(np.float32)
    spec = Consistency(X=x, weight=1.0, threshold=0.5, augment="shift", strength=2,
                       shape=(2, 5, 5))
    got = augment(torch.from_numpy(x), spec, np.random.default_rng(3)).numpy()
    draws = np.random.default_rng(3)
    offsets, flips = draws.integers(0, 5, size=(6, 2)), draws.random(6) < 0.5
    for i in range(6):
        img = np.pad(x[i].reshape(2, 5, 5), ((0, 0), (2, 2), (2, 2)), mode="edge")
        crop = img[:, offsets[i, 0]:offsets[i, 0] + 5, offsets[i, 1]:offsets[i, 1] + 5]
        if flips[i]:
            crop = crop[:, :, ::-1]
        np.testing.assert_array_equal(got[i], crop.reshape(-1))


def test_dropout_zeroes_about_its_share_and_keeps_the_mean():
    x = torch.ones(200, 50)
    spec = Consistency(X=x.numpy(), weight=1.0, threshold=0.5, augment="dropout",
                       strength=0.25)
    out = augment(x, spec, np.random.default_rng(0)).numpy()
    assert abs((out == 0).mean() - 0.25) < 0.02
    assert set(np.unique(out)) == {0.0, np.float32(1 / 0.75)}


def test_learner_ignores_u_rows_below_the_threshold(digits_fed):
    """On the MLP: a threshold no prediction reaches trains exactly as a zero weight (same
    random draws, no gradient from U); a threshold every prediction reaches moves the
    weights; the same seed repeats."""
    c = digits_fed.clients[0]
    U = digits_fed.X_public

    def trained(weight: float, threshold: float) -> np.ndarray:
        mlp = TorchMLPClassifier(hidden_layer_sizes=(16,), n_classes=10, random_state=0)
        mlp.train_steps(c.X, c.y, 20, consistency=Consistency(U, weight, threshold))
        return mlp.get_weights()

    none = trained(1.0, 1.0 + 1e-6)
    np.testing.assert_array_equal(none, trained(0.0, 0.0))
    assert not np.array_equal(trained(1.0, 0.0), none)
    np.testing.assert_array_equal(trained(1.0, 0.0), trained(1.0, 0.0))


# ---------------------------------------------------------------- schedules
def test_warmup_and_finetune_add_private_steps(digits_fed):
    """Steps per client: S before the first vote, b per round taken, F in the last round;
    under partial participation a client's warm-up comes with its own first round."""
    rounds, period = 4, 5
    res = fl.run("fedct", digits_fed, model=MODEL, rounds=rounds, period=period, seed=0,
                 progress=False, participation=0.5, options={"warmup_steps": 7,
                                                             "finetune_steps": 3})
    plain = fl.run("fedct", digits_fed, model=MODEL, rounds=rounds, period=period, seed=0,
                   progress=False, participation=0.5)
    for new, old in zip(res.client_models, plain.client_models, strict=True):
        taken = getattr(old, "steps_", 0)  # b per round the client took part in
        if taken == 0:
            continue
        assert new.steps_ in (taken + 7, taken + 7 + 3)
    assert any(m.steps_ - o.steps_ == 10 for m, o in zip(res.client_models,
                                                          plain.client_models, strict=True)
               if getattr(o, "steps_", 0))
    assert res.final != plain.final


def test_warmup_gives_a_trained_first_vote(digits_fed):
    """The first consensus comes from warmed-up models: it is more often right."""
    cold = run(digits_fed, rounds=1)
    warm = run(digits_fed, rounds=1, options={"warmup_steps": 60})
    assert warm.rounds[-1].server["consensus_accuracy"] > \
        cold.rounds[-1].server["consensus_accuracy"] + 0.1


# ---------------------------------------------------------------- contract
def test_contract_holds_with_the_new_options():
    """Determinism, declared payloads only (real traffic), and state round trip."""
    passed = check_method("fedct", options={**NEW, "vote_power": 1.0}, model=MODEL,
                          checks=("determinism", "payloads", "state"))
    assert passed == ["determinism", "payloads", "state"]
