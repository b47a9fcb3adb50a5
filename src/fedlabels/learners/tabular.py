"""Tabular learners that cannot be averaged: XGBoost and RuleFit, in the global label space.

Every client predicts labels in ``0..C-1`` (C = the federation's number of classes), even
when its private data lacks some classes (a non-iid partition):

* :class:`GlobalLabelClassifier` wraps an estimator that needs contiguous labels
  ``0..k-1`` (XGBoost): it re-encodes the classes present, fits, and maps predictions back.
  With a single class present it predicts that class (as scikit-learn's trees do).
* :class:`RuleFitClassifier` is RuleFit (Friedman & Popescu 2008) from imodels: rules from a
  boosted ensemble of small trees, then an L1-regularised logistic regression keeping at most
  ``max_rules`` terms. imodels' classifier is binary only; here C > 2 classes are handled
  one-vs-rest (one rule ensemble per class present, the largest score wins).

Both are scikit-learn estimators (``clone``-able, ``fit``/``predict``/``predict_proba``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import ConvergenceWarning

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.model_spec import check_rulefit
from fedlabels.learners.seeds import RandomStateLike, fit_seed
from fedlabels.learners.sk_inputs import (
    fit_classes,
    fit_inputs,
    predict_input,
    refuse_fit_params,
)


def require_package(module: str, package: str) -> Any:
    """``module`` imported, or a one-line refusal naming ``package`` and the tabular extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise FedLabelsError(f"this model needs the '{package}' package, which is not "
                             "installed; install the tabular extra: pip install "
                             "'fedlabels[tabular]'.") from None


class GlobalLabelClassifier(ClassifierMixin, BaseEstimator):
    """Fit ``estimator`` on the classes present, predict in the global label space.

    Parameters
    ----------
    estimator : classifier
        Needs labels ``0..k-1`` with every class present (e.g. ``xgboost.XGBClassifier``).
    n_classes : int or None
        The number of global classes C (a run sets it): ``classes_`` is ``0..C-1``,
        ``predict_proba`` has C columns (0 for a class absent from ``y``) and a label outside
        is an error. ``None``: ``classes_`` are the labels of ``y``, of any kind.

    ``X`` may hold NaN (a missing value, which XGBoost routes natively, as scikit-learn's
    ``HistGradientBoostingClassifier`` does); inf, 1-D, sparse or empty ``X`` is one line.
    After ``fit``, ``seen_`` are the labels ``y`` held (what the inner estimator learnt).
    """

    def __init__(self, estimator: Any = None, n_classes: int | None = None) -> None:
        self.estimator = estimator
        self.n_classes = n_classes

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def fit(self, X: Any, y: Any, **fit_params: Any) -> Self:
        """Fit a clone of ``estimator`` on the labels ``y`` holds; no ``sample_weight``."""
        refuse_fit_params(self, fit_params, "it passes no weights to its estimator (fit "
                          "that one with them to weight rows)")
        X, y = fit_inputs(self, X, y, reset=True, numeric_y=False, dtype="numeric",
                          order=None, allow_nan=True)
        seen, codes = np.unique(y, return_inverse=True)
        self.classes_, self.columns_ = fit_classes(seen, self.n_classes)  # seen's columns
        self.seen_ = self.classes_[self.columns_]
        if len(seen) == 1:  # nothing to separate: predict the one class seen
            self.estimator_ = None
        else:
            self.estimator_ = clone(self.estimator).fit(X, codes)
        return self

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "estimator_" in state and "columns_" not in state:  # a models file of before
            # 2026-11-29 kept the labels seen as classes_ (always ints in 0..n_classes-1)
            state = {**state, "seen_": state["classes_"], "columns_": state["classes_"],
                     "classes_": np.arange(int(state["n_classes"]))}
        super().__setstate__(state)

    def _input(self, X: Any) -> np.ndarray:
        return predict_input(self, X, fitted="estimator_", dtype="numeric", order=None,
                             allow_nan=True)

    def predict(self, X: Any) -> np.ndarray:
        X = self._input(X)
        if self.estimator_ is None or not len(X):
            return np.full(len(X), self.seen_[0], dtype=self.classes_.dtype)
        codes = np.asarray(self.estimator_.predict(X)).astype(np.int64)
        return self.seen_[codes]

    def predict_proba(self, X: Any) -> np.ndarray:
        X = self._input(X)
        out = np.zeros((len(X), len(self.classes_)))
        if self.estimator_ is None:
            out[:, self.columns_[0]] = 1.0
        elif len(X):
            out[:, self.columns_] = self.estimator_.predict_proba(X)
        return out

    @property
    def feature_importances_(self) -> np.ndarray:
        if self.estimator_ is None:
            return np.zeros(self.n_features_in_)
        return self.estimator_.feature_importances_


def _binary_rulefit_class() -> type:
    """imodels' RuleFitClassifier with a vectorised rule transform and a bisection search."""
    require_package("imodels", "imodels")
    from fedlabels.learners._rulefit_binary import BinaryRuleFit

    return BinaryRuleFit


class RuleFitClassifier(ClassifierMixin, BaseEstimator):
    """RuleFit (imodels) for any number of classes, predicting the classes it was fitted on.

    Parameters
    ----------
    tree_size : int, default=4
        Mean number of leaves of the boosted trees that generate the candidate rules.
    max_rules : int, default=200
        At most this many non-zero terms per binary rule model (per class for C > 2).
    n_estimators : int, default=100
        Trees grown to generate candidate rules.
    include_linear : bool, default=False
        Add the (winsorised, standardised) raw features as linear terms. Off by default, as in
        the FedCT paper's code (rules only).
    memory_par : float, default=0.01
        Shrinkage of the boosted tree generator.
    random_state : int, RandomState, Generator or None
        Seeds the tree generator and the solver: one seed a fit, drawn as the torch MLP's
        (:func:`~fedlabels.learners.seeds.fit_seed`).

    Notes
    -----
    The class of a binary model is decided by the sign of the fitted logit (imodels'
    own ``predict`` thresholds the logit at 0.5). For C > 2 one binary model per class present
    is fitted on "this class vs the rest" and the largest logit wins.
    """

    def __init__(self, tree_size: int = 4, max_rules: int = 200, n_estimators: int = 100,
                 include_linear: bool = False, memory_par: float = 0.01,
                 random_state: RandomStateLike = None) -> None:
        self.tree_size = tree_size
        self.max_rules = max_rules
        self.n_estimators = n_estimators
        self.include_linear = include_linear
        self.memory_par = memory_par
        self.random_state = random_state

    def _binary(self, seed: int) -> Any:
        return _binary_rulefit_class()(
            tree_size=self.tree_size, max_rules=self.max_rules,
            n_estimators=self.n_estimators, include_linear=self.include_linear,
            memory_par=self.memory_par, cv=False, random_state=seed)

    def fit(self, X: Any, y: Any, **fit_params: Any) -> Self:
        """One binary rule model per class present (one for two classes); no
        ``sample_weight``."""
        refuse_fit_params(self, fit_params, "imodels' rule generator and its L1 path "
                          "weight every row alike")
        X, y = fit_inputs(self, X, y, reset=True, numeric_y=False, dtype=np.float64,
                          order=None)
        seed = fit_seed(self.random_state)
        self.classes_ = np.unique(y)
        targets = [] if len(self.classes_) == 1 else (
            [self.classes_[1]] if len(self.classes_) == 2 else list(self.classes_))
        with warnings.catch_warnings():  # liblinear along the regularisation path
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.estimators_ = [self._binary(seed).fit(X, (y == c).astype(int)) for c in targets]
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Logit of class 1 (binary), or one logit per class (one-vs-rest)."""
        X = predict_input(self, X, fitted="estimators_", dtype=np.float64, order=None)
        if not self.estimators_:
            return np.zeros(len(X))
        scores = np.stack([est.decision_function(X) for est in self.estimators_], axis=1)
        return scores[:, 0] if len(self.estimators_) == 1 else scores

    def predict(self, X: Any) -> np.ndarray:
        scores = self.decision_function(X)
        if not self.estimators_:
            return np.full(len(scores), self.classes_[0])
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    def predict_proba(self, X: Any) -> np.ndarray:
        """Logistic probabilities (binary) or normalised one-vs-rest probabilities."""
        scores = self.decision_function(X)
        if not self.estimators_:
            return np.ones((len(scores), 1))
        if scores.ndim == 1:
            p = 1.0 / (1.0 + np.exp(-scores))
            return np.stack([1 - p, p], axis=1)
        p = 1.0 / (1.0 + np.exp(-scores))
        return p / p.sum(axis=1, keepdims=True)

    def rules(self, feature_names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The fitted rules: ``{"class", "rule", "coef", "support", "importance"}``.

        Sorted by importance |coef| * sqrt(s (1 - s)) (Friedman & Popescu), largest first.
        """
        out: list[dict[str, Any]] = []
        names = feature_names
        if not self.estimators_:
            return out
        targets = [self.classes_[1]] if len(self.estimators_) == 1 else list(self.classes_)
        for target, est in zip(targets, self.estimators_, strict=True):
            n_lin = est.n_features_ if est.include_linear else 0
            coefs = np.asarray(est.coef, dtype=float)[n_lin:]
            for rule, coef in zip(est.rules_without_feature_names_, coefs, strict=True):
                text = str(rule)
                if names is not None:
                    text = re.sub(r"X_(\d+)", lambda m: names[int(m.group(1))], text)
                support = float(getattr(rule, "support", np.nan))
                spread = np.sqrt(support * (1 - support)) if np.isfinite(support) else 0.5
                out.append({"class": target.item() if hasattr(target, "item") else target,
                            "rule": text, "coef": float(coef), "support": support,
                            "importance": float(abs(coef) * spread)})
        out.sort(key=lambda r: -r["importance"])
        return out

    @property
    def feature_importances_(self) -> np.ndarray:
        """Sum of |coef| * sqrt(s(1-s)) of the rules using each feature (Friedman-Popescu)."""
        imp = np.zeros(self.n_features_in_)
        for rule in self.rules():
            cols = {int(c) for c in re.findall(r"X_(\d+)", rule["rule"])}
            for c in cols:
                imp[c] += rule["importance"] / len(cols)
        total = imp.sum()
        return imp / total if total > 0 else imp


# ------------------------------------------------------------------ factories

def make_xgboost(n_classes: int | None, random_state: int, n_estimators: int = 100,
                 max_depth: int = 6, learning_rate: float = 0.3, n_jobs: int = 1,
                 **params: Any) -> GlobalLabelClassifier:
    """XGBoost (binary or multi-class objective, chosen by the classes present)."""
    xgboost = require_package("xgboost", "xgboost")
    try:
        inner = xgboost.XGBClassifier(n_estimators=n_estimators, max_depth=max_depth,
                                      learning_rate=learning_rate, n_jobs=n_jobs,
                                      random_state=random_state, tree_method="hist",
                                      **params)
    except TypeError as exc:
        raise FedLabelsError(f"invalid parameters for XGBClassifier: {exc}") from None
    return GlobalLabelClassifier(inner, n_classes=n_classes)


def make_rulefit(n_classes: int, random_state: int, tree_size: int = 4, max_rules: int = 200,
                 n_estimators: int = 100, linear: bool = False,
                 memory_par: float = 0.01) -> RuleFitClassifier:
    """RuleFit from imodels, tree size 4, at most 200 rules (the FedCT paper's settings)."""
    require_package("imodels", "imodels")
    check_rulefit({"tree_size": tree_size, "max_rules": max_rules,
                   "n_estimators": n_estimators, "linear": linear, "memory_par": memory_par})
    return RuleFitClassifier(tree_size=tree_size, max_rules=max_rules,
                             n_estimators=n_estimators, include_linear=bool(linear),
                             memory_par=memory_par, random_state=random_state)
