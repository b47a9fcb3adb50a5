"""Every estimator fedlabels defines answers ``fit(X, y, sample_weight=w)`` alike: none of
them weights rows, so each refuses a weight in one line saying what to do instead, before
anything is fitted, and ``has_fit_parameter`` says so (found by walking the package, so a
new estimator is covered or this test names it)."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest
from sklearn.utils.validation import has_fit_parameter

from fedlabels.core.errors import FedLabelsError
from package_estimators import package_estimators


def _logreg():
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression()


def _flat(n_features: int, n_classes: int):
    from torch import nn

    return nn.Linear(n_features, n_classes)


#: a small instance of each, and whether this machine can fit it (minilm needs its download)
_SMALL = {
    "TorchMLPClassifier": (lambda c: c(hidden_layer_sizes=4, max_steps=2), True),
    "TorchMLPRegressor": (lambda c: c(hidden_layer_sizes=4, max_steps=2), True),
    "TorchNetClassifier": (lambda c: c(network=_flat, max_steps=2), True),
    "TransformerClassifier": (lambda c: c(mode="frozen", model_dir="/nonexistent"), False),
    "TfidfClassifier": (lambda c: c(), True),
    "GlobalLabelClassifier": (lambda c: c(estimator=_logreg()), True),
    "RuleFitClassifier": (lambda c: c(n_estimators=5, max_rules=5, random_state=0),
                          find_spec("imodels") is not None),
}
_ESTIMATORS = package_estimators()


def test_every_estimator_of_the_package_is_covered():
    assert set(_ESTIMATORS) == set(_SMALL), "add the new estimator to _SMALL"


def _data(est: object) -> tuple[object, np.ndarray]:
    y = np.arange(24) % 2
    if getattr(est, "accepts_text", False):
        return np.array([f"w{i % 2} t{i}" for i in range(24)]), y
    return np.random.default_rng(0).normal(size=(24, 3)).astype(np.float32), y


@pytest.mark.parametrize("name", sorted(_SMALL))
def test_a_sample_weight_is_refused_in_one_line_saying_what_to_do(name):
    """TfidfClassifier, GlobalLabelClassifier and RuleFitClassifier gave Python's bare
    "unexpected keyword argument" TypeError, the torch learners one line; each is one line
    (a FedLabelsError and a TypeError) naming the estimator, why and what to do instead."""
    make, fits = _SMALL[name]
    est = make(_ESTIMATORS[name])
    X, y = _data(est)
    assert not has_fit_parameter(est, "sample_weight")
    for kw, needle in (({"sample_weight": np.ones(len(y))},
                        rf"^{name}\.fit takes no sample_weight: .+\. For whole-number weights "
                        r"w repeat the rows, fit\(np\.repeat\(X, w, axis=0\), "
                        r"np\.repeat\(y, w\)\)"),
                       ({"classes": [0, 1]}, rf"^{name}\.fit takes X and y only, got classes")):
        with pytest.raises(FedLabelsError, match=needle) as info:
            est.fit(X, y, **kw)
        assert isinstance(info.value, TypeError) and "\n" not in str(info.value)
        assert not [k for k in vars(est) if k.endswith("_") and not k.startswith("_")]
    if fits:
        assert est.fit(X, y, sample_weight=None) is est
        repeated = make(_ESTIMATORS[name]).fit(np.repeat(X, 2, axis=0), np.repeat(y, 2))
        assert repeated.predict(X).shape == y.shape  # the advice runs
