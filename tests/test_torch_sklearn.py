"""The torch learners (and RuleFit) follow scikit-learn's estimator conventions: every
check of ``sklearn.utils.estimator_checks`` passes, except those that cannot apply (waived
below, each with its reason; docs/usage.md lists them), and the conventions a user meets
first are tested directly with an independent expectation."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.learners.torch_net import TorchNetClassifier
from fedlabels.learners.torch_regressor import TorchMLPRegressor

# few, larger steps: the checks that score a fit (accuracy > 0.83, R^2 > 0.5 on their blobs)
# pass with 50 steps at lr 0.01, and the ~160 checks take seconds
_FAST = {"max_steps": 50, "learning_rate": 0.01, "random_state": 0}


class FlatNet:
    """A factory of your own (``fl.TorchModel``): flat rows, any number of features. Its
    ``repr`` names it without an address, so the checks' test ids are the same in every
    pytest-xdist worker (a function's repr differs between processes)."""

    def __call__(self, n_features: int, n_classes: int) -> nn.Module:
        return nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Linear(16, n_classes))

    def __repr__(self) -> str:
        return "FlatNet()"


flat_net = FlatNet()


_NOT_IMAGES = ("the check fits rows of 2-10 tabular features; network='small' is a CNN of "
               "(C, H, W) images and refuses rows that are not (a user's fit gets one line "
               "saying to give input_shape)")
# every check that fits or predicts sklearn's own (tabular) data: the CNN refuses it
_CNN_WAIVED = {name: _NOT_IMAGES for name in (
    "check_fit_score_takes_y", "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters", "check_estimators_fit_returns_self",
    "check_readonly_memmap_input", "check_estimators_dtypes", "check_dtype_object",
    "check_pipeline_consistency", "check_estimators_nan_inf", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_classifier_data_not_an_array",
    "check_classifiers_one_label", "check_classifiers_classes", "check_classifiers_train",
    "check_supervised_y_2d", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_fit2d_1sample", "check_fit2d_1feature",
    "check_dict_unchanged", "check_fit_idempotent", "check_fit_check_is_fitted",
    "check_n_features_in", "check_fit2d_predict1d")}


def _waived(estimator: object) -> dict[str, str]:
    if isinstance(estimator, TorchNetClassifier) and estimator.network == "small":
        return _CNN_WAIVED
    return {}


def _rulefit() -> list[object]:
    """RuleFit (the ``rulefit`` spec, small), where imodels is installed."""
    if find_spec("imodels") is None:
        return []
    from fedlabels.learners.tabular import make_rulefit

    return [make_rulefit(n_classes=3, random_state=0, n_estimators=10, max_rules=20)]


@parametrize_with_checks([
    TorchMLPClassifier(hidden_layer_sizes=(16,), **_FAST),
    TorchMLPRegressor(hidden_layer_sizes=(16,), **_FAST),
    TorchNetClassifier(network=flat_net, **_FAST),
    TorchNetClassifier(network="small", **_FAST),
    *_rulefit(),
], expected_failed_checks=_waived)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
def test_the_cnn_waivers_are_only_the_checks_without_images():
    """A waived check fails for the reason given, not another: each one fails on the
    missing image shape (or passes, which makes the waiver stale)."""
    from sklearn.utils.estimator_checks import check_estimator

    cnn = TorchNetClassifier(network="small", **_FAST)
    failed = {r["check_name"]: r["exception"] for r in check_estimator(cnn, on_fail=None)
              if r["status"] == "failed"}
    assert set(failed) == set(_CNN_WAIVED)
    for name, exc in failed.items():
        shape = "needs images" in str(exc) or "no recorded image shape" in str(exc)
        message = "error message should contain" in str(exc).lower()  # fit2d_1sample, ...
        assert shape or message or "only one class" in str(exc), (name, exc)


def _blobs(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, 4)) + 3 * np.eye(4)[y]
    return X, y


@pytest.mark.parametrize("labels", [np.array(["cat", "dog", "emu"]), np.array([3, 7, 11]),
                                    np.array([-1.0, 0.0, 2.0])])
def test_predict_returns_the_labels_of_y(labels):
    X, code = _blobs()
    y = labels[code]
    m = TorchMLPClassifier(hidden_layer_sizes=(16,), **_FAST).fit(X, y)
    assert list(m.classes_) == sorted(labels.tolist())
    proba = m.predict_proba(X)
    assert proba.shape == (len(X), 3) and np.allclose(proba.sum(axis=1), 1, atol=1e-5)
    pred = m.predict(X)
    assert set(pred.tolist()) <= set(labels.tolist())
    assert np.array_equal(pred, m.classes_[proba.argmax(axis=1)])
    assert np.mean(pred == y) > 0.9  # separable blobs: the labels are the right ones


def test_n_classes_set_takes_the_indices_and_names_a_label_outside():
    X, y = _blobs()
    m = TorchMLPClassifier(hidden_layer_sizes=(8,), n_classes=5, **_FAST).fit(X, y)
    assert list(m.classes_) == [0, 1, 2, 3, 4] and m.predict_proba(X).shape == (len(X), 5)
    with pytest.raises(FedLabelsError, match=r"labels \['9'\].*n_classes"):
        TorchMLPClassifier(n_classes=5, **_FAST).fit(X, np.where(y == 2, 9, y))
    with pytest.raises(FedLabelsError, match=r"labels \['a', 'b'\]"):
        TorchMLPClassifier(n_classes=5, **_FAST).fit(X, np.where(y == 2, "a", "b"))


def test_refit_starts_afresh_unless_warm_start():
    X, y = _blobs()
    m = TorchMLPClassifier(hidden_layer_sizes=(8,), **_FAST).fit(X, y)
    m.fit(X[:, :3], np.where(y == 0, "a", "b"))  # new features and labels: a new model
    assert m.n_features_in_ == 3 and list(m.classes_) == ["a", "b"] and m.steps_ == 50
    fresh = clone(m).fit(X[:, :3], np.where(y == 0, "a", "b"))
    assert np.array_equal(m.get_weights(), fresh.get_weights())
    warm = TorchMLPClassifier(hidden_layer_sizes=(8,), warm_start=True, **_FAST).fit(X, y)
    warm.fit(X, y)
    assert warm.steps_ == 100  # continued
    with pytest.raises(FedLabelsError, match="expecting 4 features"):
        warm.fit(X[:, :3], y)
    with pytest.raises(FedLabelsError, match="warm-started fit keeps the classes"):
        warm.fit(X, y + 1)


def test_pandas_and_lists_and_feature_names():
    X, y = _blobs()
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    m = TorchMLPClassifier(hidden_layer_sizes=(8,), **_FAST).fit(frame, pd.Series(y))
    assert list(m.feature_names_in_) == ["a", "b", "c", "d"]
    from_lists = TorchMLPClassifier(hidden_layer_sizes=(8,), **_FAST).fit(X.tolist(),
                                                                          y.tolist())
    assert np.array_equal(m.predict(frame), from_lists.predict(X))
    with pytest.raises(FedLabelsError, match="feature names"):
        m.predict(frame[["d", "c", "b", "a"]])


@pytest.mark.parametrize("make", [
    lambda: TorchMLPClassifier(hidden_layer_sizes=(8,), **_FAST),
    lambda: TorchMLPRegressor(hidden_layer_sizes=(8,), **_FAST),
    lambda: TorchNetClassifier(network=flat_net, **_FAST)])
def test_bad_input_is_one_line(make):
    X, y = _blobs()
    bad = X.copy()
    bad[3, 1] = np.nan
    for args, needle in [((bad, y), "NaN"), ((X, y[:-1]), "inconsistent numbers of samples"),
                         ((X[:, 0], y), "Expected 2D array"), ((X[:0], y[:0]), "0 sample")]:
        with pytest.raises(FedLabelsError, match=needle) as info:
            make().fit(*args)
        assert "\n" not in str(info.value)
    m = make()
    with pytest.raises(NotFittedError, match="not fitted") as unfitted:
        m.predict(X)
    assert isinstance(unfitted.value, FedLabelsError)
    m.fit(X, y)
    assert len(m.predict(X[:0])) == 0  # no rows to predict is no error (a round may have none)
    with pytest.raises(FedLabelsError, match=r"X has 3 features.*expecting 4"):
        m.predict(X[:, :3])
    with pytest.raises(FedLabelsError, match="infinity"):
        m.predict(np.where(bad == bad, X, np.inf))


def test_fit_does_not_change_its_input():
    X, y = _blobs()
    X32, y_before = X.astype(np.float32), y.copy()
    before = X32.copy()
    TorchMLPClassifier(hidden_layer_sizes=(8,), **_FAST).fit(X32, y)
    assert np.array_equal(X32, before) and np.array_equal(y, y_before)


def test_regressor_has_no_predict_proba_and_works_in_cross_validation():
    X, y = _blobs()
    target = X @ np.array([0.1, 0.2, -0.1, 0.05])
    reg = TorchMLPRegressor(hidden_layer_sizes=(16,), **_FAST)
    assert not hasattr(reg, "predict_proba")
    assert cross_val_score(reg, X, target, cv=3).mean() > 0.5  # R^2 of a linear target
    scores = cross_val_score(TorchMLPClassifier(hidden_layer_sizes=(16,), **_FAST), X,
                             np.array(["x", "y", "z"])[y], cv=3)
    assert scores.mean() > 0.9
