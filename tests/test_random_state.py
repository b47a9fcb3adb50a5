"""``random_state`` of the torch learners as scikit-learn's glossary has it: an int repeats
a fit, ``None`` draws fresh randomness at each fit (from numpy's global generator, as
``check_random_state(None)``), a ``RandomState`` (or ``Generator``) one draw from itself at
each fit; a run passes every client its int seed derived from the run
seed, so a run repeats whatever the estimator given holds."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.tabular import RuleFitClassifier
from fedlabels.learners.tfidf import TfidfClassifier
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


_INSTANCES = {"RandomState": np.random.RandomState, "Generator": np.random.default_rng}
_ONE_DRAW = {"RandomState": lambda r: r.randint(np.iinfo(np.int32).max),
             "Generator": lambda r: r.integers(np.iinfo(np.int32).max)}


def _fit_pattern(make, weights) -> tuple[bool, bool]:
    """(two fits with one RandomState equal, a clone's first fit equal to the original's)."""
    est = make(random_state=np.random.RandomState(5))
    assert est.get_params()["random_state"] is est.random_state
    copy = clone(est)
    first, second = (weights(est.fit(_X, _Y)) for _ in range(2))
    return np.array_equal(first, second), np.array_equal(first, weights(copy.fit(_X, _Y)))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("kind", sorted(_MAKERS))
def test_a_random_state_instance_behaves_as_in_scikit_learns_estimators(kind):
    """A RandomState was refused ("pass an integer drawn from it"); scikit-learn's
    MLPClassifier, the oracle, takes it: two fits with the instance differ, and a clone (a
    copy of the instance in its state) repeats the original's first fit."""
    from sklearn.neural_network import MLPClassifier

    def theirs(**kw):
        return MLPClassifier(hidden_layer_sizes=8, max_iter=3, **kw)

    expected = _fit_pattern(theirs, lambda m: np.concatenate([c.ravel() for c in m.coefs_]))
    assert expected == (False, True)
    assert _fit_pattern(_MAKERS[kind], _weights) == expected


@pytest.mark.parametrize("source", sorted(_INSTANCES))
@pytest.mark.parametrize("kind", sorted(_MAKERS))
def test_an_instance_is_drawn_from_once_per_fit(kind, source):
    """The seed of a fit with an instance is its one draw below 2**31 - 1, as scikit-learn's
    estimators draw a seed from ``check_random_state``'s instance: the fit with
    RandomState(5) is the fit with the int RandomState(5) draws first (a Generator alike)."""
    make, new = _MAKERS[kind], _INSTANCES[source]
    drawn = int(_ONE_DRAW[source](new(5)))
    assert np.array_equal(_weights(make(random_state=new(5)).fit(_X, _Y)),
                          _weights(make(random_state=drawn).fit(_X, _Y)))


@pytest.mark.parametrize("source", sorted(_INSTANCES))
def test_rulefit_and_tfidf_take_an_instance_as_the_torch_learners(source):
    """RuleFit failed in imodels ("Cannot cast scalar from dtype('O')") on a RandomState or
    Generator, and TF-IDF's logistic regression refused a Generator; each draws one seed
    from the instance at fit, so the fit is the fit with that int."""
    new = _INSTANCES[source]
    drawn = int(_ONE_DRAW[source](new(5)))
    rules = [RuleFitClassifier(n_estimators=5, random_state=rs).fit(_X, _Y)
             for rs in (new(5), drawn)]
    assert np.array_equal(*(r.decision_function(_X) for r in rules))
    texts = np.array(["good day", "bad day", "great fun", "awful mess"] * 5, dtype=object)
    labels = np.array([1, 0, 1, 0] * 5)
    tfidf = [TfidfClassifier(random_state=rs).fit(texts, labels) for rs in (new(5), drawn)]
    assert np.array_equal(*(t.predict_proba(texts) for t in tfidf))


@pytest.mark.parametrize("make", [
    lambda rs: RuleFitClassifier(n_estimators=5, random_state=rs),
    lambda rs: TorchMLPClassifier(max_steps=3, random_state=rs)])
@pytest.mark.parametrize("value", [-1, 2**32, 1.5, "0", True])
def test_a_random_state_scikit_learn_refuses_is_one_line(make, value):
    """What ``check_random_state``'s estimators refuse (-1, 2**32, 1.5, "0"; a bool for a
    number) is one line naming the parameter and what it takes."""
    with pytest.raises(FedLabelsError, match=r"random_state must be None, an integer in "
                       r"\[0, 2\*\*32\), a numpy RandomState or Generator") as info:
        make(value).fit(_X, _Y)
    assert "\n" not in str(info.value)


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
