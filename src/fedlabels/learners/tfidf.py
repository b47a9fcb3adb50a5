"""``tfidf``: TF-IDF features + L2 logistic regression, a classic text learner.

A refit learner (scikit-learn): every ``fit`` learns the vocabulary and the IDF weights from
the texts it is given and then the classifier, so in FedCT a client's vocabulary grows with
the pseudo-labelled public texts. With ``n_classes`` set (a run sets it) predictions are in
the federation's label space ``0..C-1`` and ``predict_proba`` has C columns even when the
fitted data lack a class; with ``n_classes=None`` the classes are the labels of ``y``.
Transforming is batched (``batch`` texts at a time) to bound the memory of the sparse
matrix; the vectoriser and the solver themselves are vectorised C code.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from fedlabels.core.errors import FedLabelsError, unknown_parameters
from fedlabels.learners.model_spec import quoted
from fedlabels.learners.seeds import RandomStateLike, fit_seed
from fedlabels.learners.sk_inputs import (
    NotFittedLearnerError,
    fit_classes,
    refuse_fit_params,
    text_targets,
)
from fedlabels.learners.text_input import text_rows

#: parameters of the ``tfidf`` spec and their checks (name -> (kind, lowest value))
PARAMS: dict[str, tuple[type, float]] = {
    "max_features": (int, 1), "C": (float, 0.0), "min_df": (int, 1), "batch": (int, 1),
}


def check_tfidf(params: dict[str, Any]) -> None:
    """The ``tfidf`` spec's parameters, checked when the spec is parsed."""
    known = (*PARAMS, "ngram", "sublinear")
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise FedLabelsError(f"{unknown_parameters(unknown, known)}; tfidf takes "
                             f"{', '.join(known)}.")
    for name, (kind, low) in PARAMS.items():
        if name not in params:
            continue
        value = params[name]
        ok = not isinstance(value, bool) and isinstance(value, int if kind is int else
                                                        int | float)
        if not ok or (value <= low if kind is float else value < low):
            rel = ">" if kind is float else ">="
            raise FedLabelsError(f"{name} must be {'an integer' if kind is int else 'a number'}"
                                 f" {rel} {low:g}, got {quoted(value)}.")
    ngram = params.get("ngram", (1, 2))
    pair = (ngram, ngram) if isinstance(ngram, int) and not isinstance(ngram, bool) else ngram
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(
            isinstance(n, int) and n >= 1 for n in pair) and pair[0] <= pair[1]):
        raise FedLabelsError(f"ngram must be N or LO-HI with 1 <= LO <= HI (e.g. 1-2), got "
                             f"{quoted(ngram)}.")
    if not isinstance(params.get("sublinear", True), bool):
        raise FedLabelsError(f"sublinear must be true or false, got "
                             f"{quoted(params['sublinear'])}.")


class TfidfClassifier(ClassifierMixin, BaseEstimator):
    """TF-IDF (word n-grams) + logistic regression on text ``X`` (1-D array of ``str``).

    Parameters
    ----------
    n_classes : int or None, default=None
        The federation's number of classes C: ``classes_`` is ``0..C-1`` and a label outside
        is an error. ``None``: ``classes_`` are the labels of ``y``, of any kind.
    max_features : int, default=20000
        Vocabulary size (most frequent n-grams).
    ngram : int or (int, int), default=(1, 2)
        Word n-gram range.
    C : float, default=4.0
        Inverse L2 regularisation of the logistic regression.
    min_df : int, default=1
        Ignore n-grams in fewer documents.
    sublinear : bool, default=True
        ``1 + log(tf)`` term frequencies.
    batch : int, default=4096
        Texts transformed at a time in ``predict``.
    random_state : int, RandomState, Generator or None
        Seeds the solver: one seed a fit, drawn as the torch MLP's
        (:func:`~fedlabels.learners.seeds.fit_seed`).
    """

    accepts_text: ClassVar[bool] = True

    def __init__(self, n_classes: int | None = None, max_features: int = 20000,
                 ngram: Any = (1, 2), C: float = 4.0, min_df: int = 1,
                 sublinear: bool = True, batch: int = 4096,
                 random_state: RandomStateLike = None) -> None:
        self.n_classes = n_classes
        self.max_features = max_features
        self.ngram = ngram
        self.C = C
        self.min_df = min_df
        self.sublinear = sublinear
        self.batch = batch
        self.random_state = random_state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array, tags.input_tags.string = False, True
        return tags

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("n_classes") is not None and "model_" in state:  # a models file of
            # before 2026-11-29 kept the labels seen as classes_; the columns are 0..C-1
            state = {**state, "classes_": np.arange(int(state["n_classes"]))}
        super().__setstate__(state)

    def _texts(self, X: Any) -> np.ndarray:
        return text_rows(X, "tfidf", "use a numeric model (e.g. logreg, mlp) here")

    def fit(self, X: Any, y: Any, **fit_params: Any) -> Self:
        """The vocabulary and IDF of the texts ``X``, then the logistic regression; no
        ``sample_weight``."""
        refuse_fit_params(self, fit_params, "its vocabulary and IDF count every text once, "
                          "so a weight would not be a repeated row")
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        seed = fit_seed(self.random_state)
        texts = self._texts(X)
        self.classes_, y = fit_classes(text_targets(len(texts), y), self.n_classes)
        ngram = (self.ngram, self.ngram) if isinstance(self.ngram, int) else tuple(self.ngram)
        min_df = self.min_df if self.min_df <= len(texts) else 1
        self.vectorizer_ = TfidfVectorizer(max_features=self.max_features, ngram_range=ngram,
                                           min_df=min_df, sublinear_tf=self.sublinear,
                                           dtype=np.float32)
        try:
            features = self.vectorizer_.fit_transform(texts)
        except ValueError:  # every text empty or stop words only: no vocabulary
            self.vectorizer_ = None
        if len(np.unique(y)) < 2 or self.vectorizer_ is None:
            self.model_ = None  # nothing to separate: predict the majority class seen
            self.majority_ = int(np.bincount(y).argmax()) if len(y) else 0
            return self
        self.model_ = LogisticRegression(C=self.C, max_iter=1000,
                                         random_state=seed).fit(features, y)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, a column per class of ``classes_`` (one never fitted: 0)."""
        if not hasattr(self, "model_"):
            raise NotFittedLearnerError("this TfidfClassifier is not fitted yet; call fit "
                                        "first.")
        texts = self._texts(X)
        out = np.zeros((len(texts), len(self.classes_)))
        if self.model_ is None:
            out[:, self.majority_] = 1.0
            return out
        cols = self.model_.classes_
        for i in range(0, len(texts), self.batch):
            chunk = self.vectorizer_.transform(texts[i : i + self.batch])
            out[i : i + self.batch, cols] = self.model_.predict_proba(chunk)
        return out

    def predict(self, X: Any) -> np.ndarray:
        proba = self.predict_proba(X)
        return np.asarray(self.classes_)[proba.argmax(axis=1)]


def make_tfidf(n_classes: int, random_state: int, **params: Any) -> TfidfClassifier:
    """The ``tfidf`` spec's learner (parameters checked by :func:`check_tfidf`)."""
    check_tfidf(params)
    if "sublinear" in params:
        params["sublinear"] = bool(params["sublinear"])
    return TfidfClassifier(n_classes=n_classes, random_state=random_state, **params)
