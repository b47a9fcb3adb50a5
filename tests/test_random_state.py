"""``random_state`` of the torch learners as scikit-learn's glossary has it: an int repeats
a fit, ``None`` draws fresh randomness at each fit (from numpy's global generator, as
``check_random_state(None)``); a run passes every client its int seed derived from the run
seed, so a run repeats whatever the estimator given holds."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

import fedlabels as fl
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.learners.torch_net import TorchNetClassifier
from fedlabels.learners.torch_regressor import TorchMLPRegressor

_X = np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32)
_Y = (_X[:, 0] > 0).astype(int)


def _flat(n_features: int, n_classes: int):
    from torch import nn

    return nn.Linear(n_features, n_classes)


_MAKERS = {
    "mlp": lambda **kw: TorchMLPClassifier(hidden_layer_sizes=8, max_steps=3, **kw),
    "regressor": lambda **kw: TorchMLPRegressor(hidden_layer_sizes=8, max_steps=3, **kw),
    "network": lambda **kw: TorchNetClassifier(network=_flat, max_steps=3, **kw),
}


def _weights(est) -> np.ndarray:
    return np.concatenate([p.detach().numpy().ravel() for p in est.model_.parameters()])


@pytest.mark.parametrize("kind", sorted(_MAKERS))
def test_none_draws_afresh_at_each_fit_and_an_int_repeats(kind):
    """random_state=None seeded 0, so two fits were the same network, where scikit-learn's
    estimators draw fresh randomness: two fits with None now differ, two with one int are
    equal, and None after np.random.seed repeats as scikit-learn's do."""
    make = _MAKERS[kind]
    fresh = [_weights(make().fit(_X, _Y)) for _ in range(2)]
    assert not np.array_equal(*fresh)
    seeded = [_weights(make(random_state=7).fit(_X, _Y)) for _ in range(2)]
    assert np.array_equal(*seeded)
    np.random.seed(3)
    first = _weights(make().fit(_X, _Y))
    np.random.seed(3)
    assert np.array_equal(first, _weights(make().fit(_X, _Y)))


def test_a_refit_with_none_starts_from_other_weights():
    """The same estimator refitted (warm_start=False) draws anew, as scikit-learn's."""
    est = _MAKERS["mlp"]()
    first = _weights(est.fit(_X, _Y))
    assert not np.array_equal(first, _weights(est.fit(_X, _Y)))


def test_a_run_with_a_seed_repeats_bit_for_bit_with_an_estimator_of_random_state_none():
    """A run sets each client's random_state from its seed, so an estimator given with
    random_state=None (fresh draws outside a run) gives the same run twice."""
    X, y = load_breast_cancer(return_X_y=True)
    fed = fl.make_federation(X[:300], y[:300], clients=3, seed=0)
    model = TorchMLPClassifier(hidden_layer_sizes=8)
    runs = [fl.run("fedct", fed, model=model, rounds=2, period=3, seed=1, progress=False)
            for _ in range(2)]
    assert model.random_state is None and not hasattr(model, "model_")
    frames = [r.to_frame().drop(columns=[c for c in r.to_frame() if "second" in c
                                         or "time" in c]) for r in runs]
    assert frames[0].equals(frames[1])
    assert np.array_equal(runs[0].predict_proba(X), runs[1].predict_proba(X))
