"""TorchMLPClassifier.state_dict / load_state_dict: plain values, exact resumption, wire codec."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier

PARAMS = {"hidden_layer_sizes": (16, 8), "n_classes": 3, "batch_size": 32,
          "learning_rate": 1e-2, "random_state": 7}


def _data(n: int = 200, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)
    return X, y


def _assert_plain(state: dict[str, Any]) -> None:
    for key, value in state.items():
        assert isinstance(key, str)
        assert isinstance(value, np.ndarray) or value is None or type(value) in (
            int, float, str, bool), (key, type(value))
        if isinstance(value, np.ndarray):
            assert value.dtype.kind in "biuf", (key, value.dtype)


def _wire(state: dict[str, Any]) -> dict[str, Any]:
    """Through the fedlabels wire codec: arrays as arrays, scalars in the config."""
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    config = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    decoded = decode_message(encode_message(Message("state", arrays=arrays, config=config)))
    return {**decoded.arrays, **decoded.config}


def _same(a: TorchMLPClassifier, b: TorchMLPClassifier, X: np.ndarray) -> None:
    assert np.array_equal(a.get_weights(), b.get_weights())
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert np.array_equal(a.predict(X), b.predict(X))
    assert np.array_equal(a.hidden_features(X), b.hidden_features(X))
    assert a.steps_ == b.steps_


def _continue(m: TorchMLPClassifier, X: np.ndarray, y: np.ndarray) -> None:
    m.train_steps(X, y, 9, X[:50], y[:50], w_aux=np.linspace(0.1, 1, 50))
    P = np.full((40, 3), 1 / 3, dtype=np.float32)
    m.distill_steps(X[:40], P, 4, X, y, weight=0.5)
    m.train_steps(X[:120], y[:120], 5)  # a different private set size: new cursor


@pytest.mark.parametrize("wire", [False, True])
def test_resumes_bit_identically(wire):
    X, y = _data()
    a = TorchMLPClassifier(**PARAMS)
    a.train_steps(X, y, 11, X[100:130], y[100:130])  # aux cursor mid-epoch
    a.distill_steps(X[:25], np.eye(3, dtype=np.float32)[y[:25]], 3)
    state = a.state_dict()
    _assert_plain(state)
    assert {"opt.0.step", "opt.0.exp_avg", "opt.0.exp_avg_sq", "rng.state.state",
            "cursor.0.order", "cursor.1.pos", "cursor.2.n", "model.0.weight"} <= set(state)
    b = TorchMLPClassifier(**PARAMS)
    b.load_state_dict(_wire(state) if wire else state)
    _same(a, b, X)
    _continue(a, X, y)
    _continue(b, X, y)
    _same(a, b, X)
    # the restored learner's own state equals the original's after the same steps
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        if isinstance(sa[key], np.ndarray):
            assert np.array_equal(sa[key], sb[key]), key
        else:
            assert sa[key] == sb[key], key
    assert sa["cursor.1.n"] == 0  # an empty auxiliary cursor travels too
    c = TorchMLPClassifier(**PARAMS)
    c.load_state_dict(_wire(sa))
    _continue(a, X, y)
    _continue(c, X, y)
    _same(a, c, X)


def test_state_is_a_snapshot_not_a_view():
    X, y = _data()
    a = TorchMLPClassifier(**PARAMS).train_steps(X, y, 3)
    state = a.state_dict()
    before = state["model.0.weight"].copy()
    a.train_steps(X, y, 3)
    assert np.array_equal(state["model.0.weight"], before)
    b = TorchMLPClassifier(**PARAMS)
    b.load_state_dict(state)
    b.train_steps(X, y, 3)
    assert np.array_equal(a.get_weights(), b.get_weights())


def test_writing_into_the_state_leaves_the_learner_unchanged():
    """The state's weights and Adam moments are arrays of their own (copied once on every
    device): writing into them changes neither the network nor its optimiser."""
    X, y = _data()
    a = TorchMLPClassifier(**PARAMS).train_steps(X, y, 3)
    weights = a.get_weights().copy()
    moments = [s["exp_avg"].clone() for s in a.optimizer_.state.values()]
    state = a.state_dict()
    written = [k for k, v in state.items() if k.startswith(("model.", "opt.0."))
               and isinstance(v, np.ndarray) and v.size > 1]
    assert any(k.startswith("model.") for k in written) and "opt.0.exp_avg" in written
    for key in written:
        state[key][...] = 123.0
    assert np.array_equal(a.get_weights(), weights)
    for kept, now in zip(moments, (s["exp_avg"] for s in a.optimizer_.state.values()),
                         strict=True):
        assert np.array_equal(kept.numpy(), now.numpy())


def test_never_trained_learner_round_trips():
    X, y = _data()
    state = TorchMLPClassifier(**PARAMS).state_dict()
    _assert_plain(state)
    assert state["built"] is False and len(state) <= 4
    b = TorchMLPClassifier(**PARAMS)
    b.train_steps(X, y, 2)  # a built learner reset to the never-trained one
    b.load_state_dict(_wire(state))
    assert not hasattr(b, "model_")
    fresh = TorchMLPClassifier(**PARAMS).train_steps(X, y, 6)
    _same(fresh, b.train_steps(X, y, 6), X)


def test_initialised_but_untrained_learner_round_trips():
    X, y = _data()
    a = TorchMLPClassifier(**PARAMS).initialise(X.shape[1], 3)
    b = TorchMLPClassifier(**PARAMS)
    b.load_state_dict(_wire(a.state_dict()))
    _same(a, b, X)
    _same(a.train_steps(X, y, 4), b.train_steps(X, y, 4), X)


def test_other_architecture_is_rejected():
    X, y = _data()
    state = TorchMLPClassifier(**PARAMS).train_steps(X, y, 2).state_dict()
    other = TorchMLPClassifier(**{**PARAMS, "hidden_layer_sizes": (16, 4)})
    with pytest.raises(FedLabelsError, match=r"hidden_layer_sizes=\(16, 8\)") as info:
        other.load_state_dict(state)
    assert "\n" not in str(info.value)
    with pytest.raises(FedLabelsError, match="classes"):
        TorchMLPClassifier(**{**PARAMS, "n_classes": 4}).load_state_dict(state)
    bad = dict(state, **{"model.0.weight": np.zeros((3, 3), dtype=np.float32)})
    with pytest.raises(FedLabelsError, match="shape"):
        TorchMLPClassifier(**PARAMS).load_state_dict(bad)
    with pytest.raises(FedLabelsError, match="format"):
        TorchMLPClassifier(**PARAMS).load_state_dict({"format": "something else"})


@pytest.mark.parametrize("wire", [False, True])
def test_loading_into_a_trained_learner_equals_loading_into_a_fresh_one(wire):
    """A built learner reuses its network and optimizer when it loads a state of the same
    shapes (no network built first); nothing of its own training survives: weights, Adam
    moments and step counts, its generator, and a cursor the state does not have."""
    X, y = _data()
    a = TorchMLPClassifier(**PARAMS).train_steps(X, y, 7, X[:60], y[:60])  # cursors 0, 1
    state = a.state_dict()
    assert not any(k.startswith("cursor.2.") for k in state)
    fresh = TorchMLPClassifier(**PARAMS)
    used = TorchMLPClassifier(**{**PARAMS, "random_state": 3})
    used.train_steps(X, y, 13)
    used.distill_steps(X[:40], np.full((40, 3), 1 / 3, dtype=np.float32), 5)  # a cursor 2
    network = used.model_
    for b in (fresh, used):
        b.load_state_dict(_wire(state) if wire else state)
    assert used.model_ is network  # reused, not rebuilt
    _same(fresh, used, X)
    _continue(fresh, X, y)
    _continue(used, X, y)
    _same(fresh, used, X)
    sf, su = fresh.state_dict(), used.state_dict()
    for key in sf:
        assert np.array_equal(sf[key], su[key]) if isinstance(sf[key], np.ndarray) \
            else sf[key] == su[key], key


def test_a_built_learner_of_another_width_is_rebuilt_by_a_state():
    X, y = _data(d=6)
    state = TorchMLPClassifier(**PARAMS).train_steps(X, y, 3).state_dict()
    wide = TorchMLPClassifier(**PARAMS).train_steps(*_data(d=9), 3)
    wide.load_state_dict(state)
    assert wide.n_features_in_ == 6
    fresh = TorchMLPClassifier(**PARAMS)
    fresh.load_state_dict(state)
    _same(fresh.train_steps(X, y, 4), wide.train_steps(X, y, 4), X)


def test_a_state_without_its_optimiser_is_refused_unless_it_is_for_prediction():
    """A state whose every ``opt.`` entry was missing loaded with a fresh Adam, so a damaged
    checkpoint resumed training unseen; resuming now refuses it in one line, and only a
    models file's load (``optimizer=False``: a network saved for prediction, or trained
    with its own optimiser elsewhere) starts the optimiser fresh."""
    X, y = _data()
    a = TorchMLPClassifier(**PARAMS).train_steps(X, y, 5)
    state = {k: v for k, v in a.state_dict().items() if not k.startswith("opt.")}
    with pytest.raises(FedLabelsError, match=r"lacks its optimiser's entries \(opt\.\*\)") \
            as info:
        TorchMLPClassifier(**PARAMS).load_state_dict(state)
    assert "\n" not in str(info.value)
    b = TorchMLPClassifier(**PARAMS)
    b.load_state_dict(state, optimizer=False)
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert b.steps_ == a.steps_ and not b.optimizer_.state_dict()["state"]  # fresh Adam
    moments = {k: v for k, v in a.state_dict().items()  # the hyper-parameters kept
               if not (k.startswith("opt.") and not k.startswith("opt.group."))}
    with pytest.raises(FedLabelsError, match=r"lacks Adam's moments"):
        TorchMLPClassifier(**PARAMS).load_state_dict(moments)
    TorchMLPClassifier(**PARAMS).load_state_dict(moments, optimizer=False)  # a models file's
    untrained = TorchMLPClassifier(**PARAMS)
    untrained.initialise(6, 3)  # no step yet: Adam has no moments, and none are needed
    TorchMLPClassifier(**PARAMS).load_state_dict(untrained.state_dict())
    c = TorchMLPClassifier(**PARAMS)  # a whole state loads the same either way
    c.load_state_dict(a.state_dict(), optimizer=False)
    _same(a.train_steps(X, y, 3), c.train_steps(X, y, 3), X)
