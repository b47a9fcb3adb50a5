"""The text learners (``tfidf`` here; ``minilm`` in test_transformer_learner.py) follow
scikit-learn's estimator conventions where they apply to text: scikit-learn's own checks
feed numeric 2-D arrays, which a text learner refuses (its tags say ``two_d_array=False``,
``string=True``, so ``check_estimator`` skips it); the API checks that fit nothing run here,
and what the others check (fit returns self and keeps its parameters, NotFittedError,
refitting starts afresh, ``classes_``, one-line errors) is tested on texts directly."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import cross_val_score
from sklearn.utils import estimator_checks as ec

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.tfidf import TfidfClassifier

#: scikit-learn's API checks that fit no data (the rest feed numeric arrays)
API_CHECKS = ("check_estimator_cloneable", "check_estimator_tags_renamed",
              "check_valid_tag_types", "check_estimator_repr",
              "check_no_attributes_set_in_init", "check_do_not_raise_errors_in_init_or_set_params",
              "check_mixin_order", "check_get_params_invariance", "check_set_params")


def run_api_checks(estimator: object) -> None:
    for name in API_CHECKS:
        getattr(ec, name)(type(estimator).__name__, estimator)
    ec.check_parameters_default_constructible(type(estimator).__name__, estimator)
    assert not ec.get_tags(estimator).input_tags.two_d_array  # check_estimator skips it
    assert ec.get_tags(estimator).input_tags.string


WORDS = {"pos": ["good", "great", "fine", "happy"], "neg": ["bad", "awful", "sad", "poor"]}


def reviews(n: int = 90, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.array(["neg", "pos", "meh"])[np.arange(n) % 3]
    X = np.empty(n, dtype=object)
    X[:] = [" ".join(["the", "film", *rng.choice(WORDS.get(t, ["plot", "was", "long"]), 3)])
            for t in y]
    return X, y


def test_tfidf_api_checks():
    run_api_checks(TfidfClassifier(random_state=0))


def test_tfidf_labels_of_y_and_a_runs_label_space():
    X, y = reviews()
    m = TfidfClassifier(random_state=0)
    assert m.fit(X, y) is m
    assert list(m.classes_) == ["meh", "neg", "pos"]
    proba = m.predict_proba(X)
    assert proba.shape == (len(X), 3)
    assert np.array_equal(m.predict(X), m.classes_[proba.argmax(axis=1)])
    assert np.mean(m.predict(X) == y) > 0.9
    assert cross_val_score(TfidfClassifier(random_state=0), X, y, cv=3).mean() > 0.9
    code = np.searchsorted(["meh", "neg", "pos"], y) + 1  # 1..3 of a run's 0..4
    run = TfidfClassifier(n_classes=5, random_state=0).fit(X, code)
    assert list(run.classes_) == [0, 1, 2, 3, 4]
    assert np.all(run.predict_proba(X)[:, [0, 4]] == 0)
    assert set(run.predict(X).tolist()) <= {1, 2, 3}
    with pytest.raises(FedLabelsError, match=r"labels \['7'\].*n_classes"):
        TfidfClassifier(n_classes=5).fit(X, np.where(code == 3, 7, code))


def test_tfidf_refit_clone_pickle_and_unfitted():
    X, y = reviews()
    m = TfidfClassifier(random_state=0, C=2.0)
    with pytest.raises(NotFittedError, match="not fitted") as info:
        m.predict(X)
    assert isinstance(info.value, FedLabelsError)
    params = m.get_params()
    m.fit(X, y)
    assert m.get_params() == params  # fit changes no parameter
    m.fit(X[:60], np.where(y[:60] == "pos", "yes", "no"))  # other labels: a fresh model
    assert list(m.classes_) == ["no", "yes"]
    fresh = clone(m).fit(X[:60], np.where(y[:60] == "pos", "yes", "no"))
    assert np.array_equal(m.predict_proba(X), fresh.predict_proba(X))
    again = pickle.loads(pickle.dumps(m))
    assert np.array_equal(again.predict_proba(X), m.predict_proba(X))
    assert len(m.predict(X[:0])) == 0 and m.predict_proba(X[:0]).shape == (0, 2)


@pytest.mark.parametrize(("X", "y", "needle"), [
    (np.zeros((4, 3)), [0, 1, 0, 1], "got an array of shape \\(4, 3\\)"),
    (np.zeros(4), [0, 1, 0, 1], "got numeric features"),
    (np.array([["a b"], ["c d"]], dtype=object), [0, 1], r"pass X\[:, 0\]"),
    (np.array(["a b", "c d", "e"], dtype=object), [0, 1], "inconsistent numbers of samples"),
    (np.array(["a b", "c d"], dtype=object), [0.5, 1.5], "Unknown label type"),
    (np.array(["a b", "c d"], dtype=object), [0.0, np.nan], "NaN"),
    (np.array([], dtype=object), [], "0 sample"),
])
def test_tfidf_bad_input_is_one_line(X, y, needle):
    with pytest.raises(FedLabelsError, match=needle) as info:
        TfidfClassifier().fit(X, y)
    assert "\n" not in str(info.value)


def test_a_tfidf_model_of_before_keeps_the_runs_label_space():
    """A models file written before 2026-11-29 kept classes_ = the labels seen (fewer than
    n_classes); loading gives classes_ 0..n_classes-1, matching predict_proba's columns."""
    X, y = reviews()
    code = np.searchsorted(["meh", "neg", "pos"], y) + 1
    new = TfidfClassifier(n_classes=5, random_state=0).fit(X, code)
    state = {**new.__getstate__(), "classes_": np.array([1, 2, 3])}
    old = TfidfClassifier.__new__(TfidfClassifier)
    old.__setstate__(state)
    assert list(old.classes_) == [0, 1, 2, 3, 4]
    assert np.array_equal(old.predict(X), new.predict(X))
