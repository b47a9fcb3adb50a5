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


_RUN_LABELS = ("with n_classes set (as a run sets it) the labels are the run's 0..n_classes-1 "
               "and predict_proba has a column for each: the check's string labels, its "
               "labels [1, 2, 3] and its binary fits with 3 columns are refused or differ by "
               "design (n_classes=None passes them)")
#: xgboost(n_classes=3): the checks that fit labels other than 0..2 or expect 2 columns
_XGB_RUN_WAIVED = {name: _RUN_LABELS for name in (
    "check_dtype_object", "check_classifiers_classes", "check_classifiers_train")}


def _waived(estimator: object) -> dict[str, str]:
    if isinstance(estimator, TorchNetClassifier) and estimator.network == "small":
        return _CNN_WAIVED
    if getattr(estimator, "n_classes", None) is not None and _is_xgboost(estimator):
        return _XGB_RUN_WAIVED
    return {}


def _is_xgboost(estimator: object) -> bool:
    from fedlabels.learners.tabular import GlobalLabelClassifier

    return isinstance(estimator, GlobalLabelClassifier)


def _xgboost() -> list[object]:
    """The ``xgboost`` spec's adapter (small), with the labels of y and with a run's
    n_classes, where xgboost is installed."""
    if find_spec("xgboost") is None:
        return []
    from fedlabels.learners.tabular import make_xgboost

    return [make_xgboost(n_classes=n, random_state=0, n_estimators=10) for n in (None, 3)]


def _rulefit() -> list[object]:
    """RuleFit (the ``rulefit`` spec, small), where imodels is installed."""
    if find_spec("imodels") is None:
        return []
    from fedlabels.learners.tabular import make_rulefit

    return [make_rulefit(n_classes=3, random_state=0, n_estimators=10, max_rules=20)]


_CHECKED = [
    TorchMLPClassifier(hidden_layer_sizes=(16,), **_FAST),
    TorchMLPRegressor(hidden_layer_sizes=(16,), **_FAST),
    TorchNetClassifier(network=flat_net, **_FAST),
    TorchNetClassifier(network="small", **_FAST),
    *_rulefit(),
    *_xgboost(),
]
#: text learners: scikit-learn's checks feed numeric arrays, their tags skip them; the API
#: checks that fit nothing run in test_text_sklearn.py and test_transformer_learner.py
_TEXT = {"TfidfClassifier", "TransformerClassifier"}


@parametrize_with_checks(_CHECKED, expected_failed_checks=_waived)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_every_estimator_of_the_package_is_checked():
    """scikit-learn's checks run on every estimator fedlabels defines (found by walking
    the package, so a new one fails here until it is added), apart from the text learners
    and those whose optional package is not installed here."""
    from package_estimators import package_estimators

    absent = {"RuleFitClassifier": "imodels", "GlobalLabelClassifier": "xgboost"}
    skipped = {name for name, package in absent.items() if find_spec(package) is None}
    checked = {type(e).__name__ for e in _CHECKED}
    assert set(package_estimators()) - checked - _TEXT - skipped == set()


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


def test_a_fitted_regressor_has_outputs_and_no_classes_as_scikit_learns():
    """A regressor has no ``classes_`` (scikit-learn's ``MLPRegressor`` is the oracle), fitted,
    warm-started or restored from its state; ``n_outputs_`` counts the network's outputs."""
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    X, y = _blobs()
    target = X @ np.array([0.1, 0.2, -0.1, 0.05])
    theirs = MLPRegressor(hidden_layer_sizes=(4,), max_iter=5).fit(X, target)
    reg = TorchMLPRegressor(hidden_layer_sizes=(16,), warm_start=True, **_FAST)
    for fitted in (reg.fit(X, target), reg.fit(X, target)):  # the second is warm
        assert hasattr(fitted, "classes_") is hasattr(theirs, "classes_") is False
        assert fitted.n_outputs_ == theirs.n_outputs_ == 1
    restored = TorchMLPRegressor(hidden_layer_sizes=(16,), warm_start=True, **_FAST)
    restored.load_state_dict(reg.state_dict())
    assert not hasattr(restored, "classes_") and restored.n_outputs_ == 1
    np.testing.assert_array_equal(restored.predict(X), reg.predict(X))
    from fedlabels.reporting.inspect import describe_model

    assert describe_model(reg)["classes_seen"] is None  # fedlabels inspect: "classes seen: 0"
    labels = np.array(["x", "y", "z"])[y]
    clf = TorchMLPClassifier(hidden_layer_sizes=(16,), **_FAST).fit(X, labels)
    mine = MLPClassifier(hidden_layer_sizes=(4,), max_iter=5).fit(X, labels)
    assert clf.n_outputs_ == mine.n_outputs_ == len(clf.classes_) == 3


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")
def test_the_xgboost_waivers_are_only_the_run_label_space():
    """xgboost with n_classes=3 fails exactly the waived checks, each on its label space."""
    pytest.importorskip("xgboost")
    from sklearn.utils.estimator_checks import check_estimator

    from fedlabels.learners.tabular import make_xgboost

    est = make_xgboost(n_classes=3, random_state=0, n_estimators=10)
    failed = {r["check_name"]: r["exception"] for r in check_estimator(est, on_fail=None)
              if r["status"] == "failed"}
    assert set(failed) == set(_XGB_RUN_WAIVED)
    for name, exc in failed.items():
        # classifiers_train compares predict_proba's 3 columns with the 2 classes it fitted
        assert "n_classes" in str(exc) or name == "check_classifiers_train", (name, exc)


def test_xgboost_adapter_labels_missing_values_and_bad_input():
    xgboost = pytest.importorskip("xgboost")
    from fedlabels.learners.tabular import GlobalLabelClassifier, make_xgboost

    X, code = _blobs()
    names = np.array(["cat", "dog", "emu"])
    m = make_xgboost(n_classes=None, random_state=0, n_estimators=10).fit(X, names[code])
    assert list(m.classes_) == ["cat", "dog", "emu"]
    assert np.array_equal(m.predict(X), m.classes_[m.predict_proba(X).argmax(axis=1)])
    assert np.mean(m.predict(X) == names[code]) > 0.9
    # a run's label space: classes_ 0..C-1, a column per class, 0 for one the data lack
    run = make_xgboost(n_classes=5, random_state=0, n_estimators=10).fit(X, code + 1)
    assert list(run.classes_) == [0, 1, 2, 3, 4] and list(run.seen_) == [1, 2, 3]
    proba = run.predict_proba(X)
    assert proba.shape == (len(X), 5) and np.all(proba[:, [0, 4]] == 0)
    assert set(run.predict(X).tolist()) <= {1, 2, 3}
    with pytest.raises(FedLabelsError, match=r"labels \['7'\].*n_classes"):
        make_xgboost(n_classes=5, random_state=0).fit(X, np.where(code == 2, 7, code))
    # NaN is a missing value xgboost routes itself: the same predictions as XGBoost's own
    holes = X.copy()
    holes[::7, 1] = np.nan
    ours = make_xgboost(n_classes=None, random_state=0, n_estimators=10).fit(holes, code)
    own = xgboost.XGBClassifier(n_estimators=10, max_depth=6, learning_rate=0.3, n_jobs=1,
                                random_state=0, tree_method="hist").fit(holes, code)
    assert np.allclose(ours.predict_proba(holes), own.predict_proba(holes))
    unfitted = GlobalLabelClassifier(xgboost.XGBClassifier())
    with pytest.raises(NotFittedError, match="not fitted") as info:
        unfitted.predict(X)
    assert isinstance(info.value, FedLabelsError)
    for args, needle in [((np.where(holes == holes, X, np.inf), code), "infinity"),
                         ((X[:, 0], code), "Expected 2D array"), ((X, code[:-1]),
                                                                 "inconsistent numbers")]:
        with pytest.raises(FedLabelsError, match=needle) as bad:
            make_xgboost(n_classes=None, random_state=0).fit(*args)
        assert "\n" not in str(bad.value)
    with pytest.raises(FedLabelsError, match=r"X has 3 features.*expecting 4"):
        ours.predict(X[:, :3])
    assert len(ours.predict(X[:0])) == 0 and ours.predict_proba(X[:0]).shape == (0, 3)


def test_an_xgboost_model_of_before_keeps_predicting_in_the_run_label_space():
    """A models file written before 2026-11-29 holds classes_ = the labels seen (no
    columns_): loading maps them to the run's label space and predicts as before."""
    pytest.importorskip("xgboost")
    from fedlabels.learners.tabular import GlobalLabelClassifier, make_xgboost

    X, code = _blobs()
    new = make_xgboost(n_classes=5, random_state=0, n_estimators=10).fit(X, code + 1)
    old_state = {k: v for k, v in new.__getstate__().items() if k not in ("columns_", "seen_")}
    old_state["classes_"] = np.array([1, 2, 3])
    old = GlobalLabelClassifier.__new__(GlobalLabelClassifier)
    old.__setstate__(old_state)
    assert list(old.classes_) == [0, 1, 2, 3, 4] and list(old.seen_) == [1, 2, 3]
    assert np.array_equal(old.predict_proba(X), new.predict_proba(X))
    assert np.array_equal(old.predict(X), new.predict(X))


def test_an_xgboost_client_lacking_a_class_gives_probabilities_for_auroc():
    """classes_ are the run's classes, so the clinical scores read predict_proba's columns
    (before: classes_ were the 3 labels seen against 5 columns, and AUROC was 'n/a')."""
    pytest.importorskip("xgboost")
    from fedlabels.core.clinical import class_probabilities
    from fedlabels.learners.tabular import make_xgboost

    X, code = _blobs()
    run = make_xgboost(n_classes=5, random_state=0, n_estimators=10).fit(X, code + 1)
    full = class_probabilities(run, X, 5)
    assert full is not None and np.array_equal(full, run.predict_proba(X))


@pytest.mark.parametrize("spec, task, values", [
    ("mlp", "classification", {"hidden": (32,), "lr": 0.01}),
    ("mlp", "regression", {"hidden": (32,), "lr": 0.01}),
    ("cnn", "classification", {"arch": "svhn", "lr": 0.01, "shape": (3, 32, 32)}),
])
def test_set_params_with_a_model_specs_name_names_the_estimators(spec, task, values):
    """clone(TorchMLPClassifier()).set_params(lr=0.01) raised scikit-learn's ValueError
    listing the valid names, not saying that mlp(lr=...) is learning_rate here. The names
    it gives are checked against what the spec builds (an independent oracle)."""
    from fedlabels.learners import as_models
    from fedlabels.learners.specs import build_learner

    text = ",".join(f"{k}={'-'.join(map(str, v)) if isinstance(v, tuple) else v}"
                    for k, v in values.items())
    built = build_learner(as_models(f"{spec}({text})")[0], n_classes=2, random_state=0,
                          task=task)
    for name, value in values.items():
        with pytest.raises(ValueError) as caught:
            clone(built).set_params(**{name: value})
        message = str(caught.value)
        here = message.split(" is ")[1].split(" here")[0]
        assert f"the model spec's {name} is {here} here" in message and "\n" not in message
        assert built.get_params()[here] == value  # the spec's value lands in that parameter
        assert clone(built).set_params(**{here: value}).get_params()[here] == value
    with pytest.raises(ValueError, match="Invalid parameter 'bogus'"):  # scikit-learn's own
        clone(built).set_params(bogus=1)


def test_an_int_hidden_layer_sizes_is_one_layer_as_in_scikit_learn():
    """MLPClassifier(hidden_layer_sizes=64) is one layer of 64; here it was Python's
    TypeError "'int' object is not iterable" from deep in fit."""
    from sklearn.neural_network import MLPClassifier

    X, y = _blobs()
    ours = TorchMLPClassifier(hidden_layer_sizes=8, **_FAST).fit(X, y)
    theirs = MLPClassifier(hidden_layer_sizes=8, max_iter=5).fit(X, y)  # the oracle
    widths = [m.out_features for m in ours.model_ if isinstance(m, nn.Linear)]
    assert widths[:-1] == [c.shape[1] for c in theirs.coefs_[:-1]] == [8]
    as_tuple = TorchMLPClassifier(hidden_layer_sizes=(8,), **_FAST).fit(X, y)
    assert np.array_equal(ours.predict_proba(X), as_tuple.predict_proba(X))
    assert TorchMLPRegressor(hidden_layer_sizes=np.int64(4), **_FAST).fit(X, y).score(X, y)


@pytest.mark.parametrize("make, params, needle", [
    (TorchMLPClassifier, {"hidden_layer_sizes": "64-32"}, "hidden_layer_sizes must be"),
    (TorchMLPClassifier, {"hidden_layer_sizes": (8, 0)}, "hidden_layer_sizes must be"),
    (TorchMLPClassifier, {"max_steps": "5"}, r"max_steps must be an integer >= 1, got '5'"),
    (TorchMLPClassifier, {"max_steps": 2.5}, r"max_steps must be an integer >= 1, got 2.5"),
    (TorchMLPClassifier, {"batch_size": True}, "batch_size must be an integer >= 1"),
    (TorchMLPRegressor, {"learning_rate": "0.01"},
     r"learning_rate \(lr\) must be a finite number > 0, got '0.01'"),
    (TorchMLPClassifier, {"learning_rate": float("nan")}, r"learning_rate \(lr\) must be a"),
    (TorchMLPClassifier, {"weight_decay": -1.0}, "weight_decay must be a finite number >= 0"),
    (lambda **p: TorchNetClassifier(network=flat_net, **p), {"max_steps": "5"},
     "max_steps must be an integer >= 1"),
    (TorchMLPClassifier, {"random_state": 1.5},
     r"random_state must be None, an integer in \[0, 2\*\*32\).*got 1.5"),
    (TorchMLPRegressor, {"random_state": -1}, r"random_state must be None, an integer"),
])
def test_a_parameter_of_the_wrong_type_is_one_line_naming_it(make, params, needle):
    """max_steps="5" and 2.5 were taken as 5 and 2 (int() of them), learning_rate="0.01"
    was a bare TypeError ('>' not supported) and a negative weight_decay torch's own error;
    scikit-learn's estimators refuse each, naming the parameter."""
    X, y = _blobs()
    with pytest.raises(FedLabelsError, match=needle) as info:
        make(**{**_FAST, **params}).fit(X, y)
    assert "\n" not in str(info.value)
    numpy_ints = {"max_steps": np.int64(5), "batch_size": np.int32(16)}
    assert make(**{**_FAST, **numpy_ints}).fit(X, y).predict(X).shape == y.shape  # GridSearch


def test_read_only_rows_are_taken_without_torchs_warning():
    """Read-only rows (a float32 pandas frame's values under pandas' copy-on-write, a
    read-only memmap) warned torch's "The given NumPy array is not writable ... undefined
    behavior" in fit and predict. torch warns once per process, so a fresh one fits and
    predicts with warnings as errors."""
    import subprocess
    import sys

    code = """if True:
        import numpy as np
        from fedlabels.learners.torch_mlp import TorchMLPClassifier
        X = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
        X.flags.writeable = False
        m = TorchMLPClassifier(hidden_layer_sizes=(4,), max_steps=2).fit(X, np.arange(40) % 2)
        assert len(m.predict(X)) == 40 and not X.flags.writeable
        print("quiet")
    """
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "quiet", done.stderr[-2000:]


def test_the_docs_say_where_to_import_each_estimator_from():
    """docs/usage.md named the estimator classes but not their modules, so a reader could
    not import them; the section's first code block imports every class it names, and
    runs."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text("utf-8")
    section = text.split("### The torch learners are scikit-learn estimators")[1]
    section = section.split("\n## ")[0].split("\n### ")[0]
    block = section.split("```python\n")[1].split("```")[0]
    from sklearn.utils import all_estimators

    theirs = {name for name, _ in all_estimators()}  # MLPClassifier, ...: scikit-learn's
    named = set(re.findall(r"`([A-Z][A-Za-z]+(?:Classifier|Regressor))`", section)) - theirs
    scope: dict[str, object] = {}
    exec(block, scope)  # the docs' own snippet
    assert named and named <= set(scope), sorted(named - set(scope))
