"""Clinical metrics: each checked against scikit-learn's metric functions, and the run's
``clinical`` entry against the clients' own models."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm

from fedlabels.core.clinical import (
    class_probabilities,
    classification_metrics,
    clinical_summary,
    majority_baseline,
)


def _case(rng: np.random.Generator, n: int, k: int, skill: float):
    y = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) + skill * np.eye(k)[y]
    logits = np.round(logits, 1)  # ties in the scores, as trees give
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return y, proba.argmax(axis=1), proba


@pytest.mark.parametrize("k,n,skill,seed", [(2, 57, 1.0, 0), (2, 200, 0.2, 1), (3, 90, 1.5, 2),
                                            (10, 300, 2.0, 3)])
def test_metrics_equal_scikit_learn(k, n, skill, seed):
    y, pred, proba = _case(np.random.default_rng(seed), n, k, skill)
    got = classification_metrics(y, pred, k, proba, positive=1)
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred))
    assert got["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y, pred))
    assert got["macro_f1"] == pytest.approx(skm.f1_score(y, pred, average="macro"))
    assert np.array_equal(got["confusion_matrix"],
                          skm.confusion_matrix(y, pred, labels=range(k)))
    if k == 2:
        assert got["auroc"] == pytest.approx(skm.roc_auc_score(y, proba[:, 1]))
        assert got["sensitivity"] == pytest.approx(skm.recall_score(y, pred, pos_label=1))
        assert got["specificity"] == pytest.approx(skm.recall_score(y, pred, pos_label=0))
    else:
        assert got["auroc"] == pytest.approx(
            skm.roc_auc_score(y, proba, multi_class="ovr", average="macro"))
        assert got["sensitivity"] is None and got["specificity"] is None


def test_positive_class_zero_swaps_sensitivity_and_specificity():
    y, pred, proba = _case(np.random.default_rng(5), 80, 2, 1.0)
    got = classification_metrics(y, pred, 2, proba, positive=0)
    assert got["sensitivity"] == pytest.approx(skm.recall_score(y, pred, pos_label=0))
    assert got["specificity"] == pytest.approx(skm.recall_score(y, pred, pos_label=1))
    assert got["auroc"] == pytest.approx(skm.roc_auc_score(y == 0, proba[:, 0]))


def test_a_class_missing_from_the_predictions_and_no_scores():
    y = np.array([0, 0, 1, 1, 2, 2, 2])
    pred = np.array([0, 0, 0, 0, 2, 2, 0])  # class 1 never predicted
    got = classification_metrics(y, pred, 4, None)  # class 3 in neither
    assert got["auroc"] is None
    assert got["macro_f1"] == pytest.approx(skm.f1_score(y, pred, average="macro",
                                                         zero_division=0))
    assert got["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y, pred))


def test_majority_baseline_is_the_commonest_training_class():
    y_test = np.array([0] * 30 + [1] * 70)
    base = majority_baseline([12, 40], y_test)
    assert base["class"] == 1
    assert base["accuracy"] == pytest.approx(skm.accuracy_score(y_test, np.ones(100)))
    assert base["half_width_95"] == pytest.approx(1.96 * np.sqrt(0.7 * 0.3 / 100))


def test_probabilities_of_a_model_trained_on_some_classes_only():
    from sklearn.tree import DecisionTreeClassifier

    X = np.arange(20, dtype=float).reshape(-1, 1)
    model = DecisionTreeClassifier(random_state=0).fit(X, np.where(X[:, 0] < 10, 0, 2))
    proba = class_probabilities(model, X, 3)
    assert proba is not None and proba.shape == (20, 3) and not proba[:, 1].any()
    assert class_probabilities(object(), X, 3) is None


def test_run_records_clinical_metrics_of_its_clients_models(breast_cancer_fed):
    import fedlabels as fl

    fed = breast_cancer_fed
    res = fl.run("fedct", fed, model="logreg", rounds=2, seed=0, progress=False)
    clin = res.extra["clinical"]
    counts = np.sum([np.bincount(c.y, minlength=2) for c in fed.clients], axis=0)
    assert clin["positive_class"]["class"] == int(np.argmin(counts))
    pos = clin["positive_class"]["class"]
    aurocs, sens = [], []
    for model in res.client_models:
        aurocs.append(skm.roc_auc_score(fed.y_test == pos, model.predict_proba(fed.X_test)[:, pos]))
        sens.append(skm.recall_score(fed.y_test, model.predict(fed.X_test), pos_label=pos))
    assert clin["metrics"]["auroc"]["clients"] == pytest.approx(aurocs)
    assert clin["metrics"]["sensitivity"]["mean"] == pytest.approx(np.mean(sens))
    assert clin["metrics"]["accuracy"]["clients"] == pytest.approx(
        res.final["client_accuracies"])
    assert clin["baseline"]["accuracy"] == pytest.approx(
        np.mean(fed.y_test == np.argmax(counts)))
    assert len(clin["confusion_matrices"]) == len(res.client_models)


def test_summary_says_n_a_without_scores():
    y = np.array([0, 1, 1, 0, 1])
    out = clinical_summary([(y, None), (1 - y, None)], y, 2, [3, 5], ["no", "yes"])
    assert out["metrics"]["auroc"]["mean"] is None
    assert out["auroc_scores"].startswith("n/a")
    assert out["positive_class"]["name"] == "no"  # the rarer training class
    assert out["metrics"]["accuracy"]["min"] == 0.0 and out["metrics"]["accuracy"]["max"] == 1.0


def test_no_clinical_entry_contradicts_the_recorded_accuracy(breast_cancer_fed):
    import warnings

    import fedlabels as fl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pate = fl.run("pate", breast_cancer_fed, rounds=2, seed=0, progress=False)
        part = fl.run("fedct", breast_cancer_fed, model="dt", rounds=3, seed=0,
                      progress=False, participation=0.5, dropout=0.2)
    # PATE's evaluation scores the student, not the clients' models: said, not contradicted
    assert "unavailable" in pate.extra["clinical"]
    assert part.extra["clinical"]["metrics"]["accuracy"]["clients"] == pytest.approx(
        part.final["client_accuracies"])


def test_pates_row_shows_the_baseline_of_the_test_set_it_is_scored_on(breast_cancer_fed):
    """PATE's clinical metrics are unavailable (it scores its student), and its report row
    showed a majority-class baseline estimated from the training classes (0.117) beside the
    other rows' 0.096 measured on the same test set. Its result records the measured one
    (oracle: the commonest pooled training class's share of the test labels), and a row
    without one shows none."""
    import copy
    import warnings

    import fedlabels as fl
    from fedlabels.reporting.report import group_runs, summary_rows

    fed = breast_cancer_fed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pate = fl.run("pate", fed, rounds=1, seed=0, progress=False)
        fedct = fl.run("fedct", fed, model="dt", rounds=1, seed=0, progress=False)
    train = np.bincount(np.concatenate([c.y for c in fed.clients]), minlength=2)
    expected = float(np.mean(fed.y_test == np.argmax(train)))
    assert "unavailable" in pate.extra["clinical"]
    assert pate.extra["clinical"]["baseline"]["accuracy"] == pytest.approx(expected)
    assert expected != pytest.approx(train.max() / train.sum())  # the estimate differs
    old = copy.deepcopy(pate)  # a result written before the baseline was recorded
    old.extra["clinical"] = {"unavailable": "scores something else"}
    def row_baseline(res: fl.RunResult) -> float | None:
        return summary_rows(group_runs([res]))[0]["majority_baseline"]

    assert row_baseline(pate) == pytest.approx(row_baseline(fedct)) == pytest.approx(expected)
    assert row_baseline(old) is None


@pytest.mark.parametrize("workers", [1, 2])
def test_a_torch_clients_final_metrics_predict_the_test_set_once(breast_cancer_fed,
                                                                monkeypatch, workers):
    """The clinical metrics of torch clients come from one prediction of the test set each
    (their predictions are the probabilities' argmax), the last round's evaluation (always
    made), so the final metrics predict nothing again, and equal the models' own."""
    import fedlabels as fl
    from fedlabels.engines import inprocess
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    fed = breast_cancer_fed
    calls = []
    real_clinical, real_proba = inprocess.final_clinical, TorchMLPClassifier.predict_proba

    def counting_proba(self, X):
        calls.append(len(X))
        return real_proba(self, X)

    def clinical(*args, **kw):  # count only the final metrics' predictions (one process)
        monkeypatch.setattr(TorchMLPClassifier, "predict_proba", counting_proba)
        return real_clinical(*args, **kw)

    monkeypatch.setattr(inprocess, "final_clinical", clinical)
    res = fl.run("fedavg", fed, model="mlp(hidden=8)", rounds=2, period=3, seed=0,
                 progress=False, workers=workers)
    if workers == 1:
        assert calls == []  # the last evaluation's probabilities, of these very models
    clin = res.extra["clinical"]
    pos = clin["positive_class"]["class"]
    for k, model in enumerate(res.client_models):
        proba = model.predict_proba(fed.X_test)
        assert clin["metrics"]["auroc"]["clients"][k] == pytest.approx(
            skm.roc_auc_score(fed.y_test == pos, proba[:, pos]))
        assert clin["metrics"]["accuracy"]["clients"][k] == pytest.approx(
            np.mean(model.predict(fed.X_test) == fed.y_test))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_auroc_counts_ties_half_as_scikit_learn_does(seed):
    from fedlabels.core.clinical import binary_auroc

    rng = np.random.default_rng(seed)
    positive = rng.random(500) < 0.3
    score = rng.integers(0, 6, 500) + positive * rng.integers(0, 3, 500)  # many ties
    assert binary_auroc(positive, score) == pytest.approx(
        skm.roc_auc_score(positive, score), abs=1e-12)
    assert binary_auroc(positive, np.zeros(500)) == 0.5  # all tied
    assert binary_auroc(positive, np.where(positive, 1.0, 0.0)) == 1.0
    assert np.isnan(binary_auroc(positive, np.r_[np.nan, score[1:]]))


def test_kept_test_predictions_are_used_only_for_the_model_that_made_them(breast_cancer_fed):
    """After an evaluation the client's test outputs come from it; once the model changes
    (FedAvg's new weights without a step, or more steps) they are computed afresh."""
    from fedlabels.comm import Message
    from fedlabels.learners import as_models
    from fedlabels.runs.session import build_session

    fed = breast_cancer_fed
    session = build_session("fedavg", fed, as_models("mlp(hidden=8)"), rounds=1, period=3,
                            seed=0)
    role = session.clients[0]
    role.learner.train_steps(role.data.X, role.data.y, 3)
    role.fitted = True
    role.evaluate(Message("evaluate", category="evaluation"))
    kept = role._tested
    assert kept is not None
    same_preds, same_proba = role.test_outputs()
    assert same_proba is kept[2] and same_preds is kept[1]  # reused, not predicted again
    weights = role.learner.get_weights()
    role.learner.set_weights(weights * 0.5)  # new weights, the same step count
    preds, proba = role.test_outputs()
    assert proba is not kept[2]
    np.testing.assert_allclose(proba, role.learner.predict_proba(fed.X_test), rtol=1e-6)
    np.testing.assert_array_equal(preds, role.learner.predict(fed.X_test))
    role.learner.set_weights(weights)
    role.learner.train_steps(role.data.X, role.data.y, 1)  # one more step
    assert role.test_outputs()[1] is not kept[2]


def _old_digest(model):
    """The digest as it was computed before (the oracle): SHA-256 of get_weights()'s bytes."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(model.get_weights()).tobytes()).digest()


def test_the_weights_digest_is_that_of_get_weights_for_every_kind_of_network():
    """The fingerprint hashes an MLP's parameters where they lie: the digest of get_weights'
    vector, for a trained MLP, a CNN, a network with a transposed (non-contiguous) weight and
    one of float64 parameters (hashed through get_weights); any weight changed changes it."""
    import torch
    from torch import nn

    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.learners.torch_net import TorchNetClassifier
    from fedlabels.method.base import _fingerprint, _weights_digest

    class Transposed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.arange(12.0).reshape(4, 3).t())  # 3x4, strided
            self.b = nn.Parameter(torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.to(self.w.dtype) @ self.w + self.b).float()

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)).astype(np.float32), rng.integers(0, 4, 40)
    mlp = TorchMLPClassifier(hidden_layer_sizes=(8, 5), n_classes=4, max_steps=3,
                             random_state=0).fit(X, y)
    cnn = TorchNetClassifier(network="small", n_classes=4, max_steps=1, random_state=0)
    cnn.fit(rng.normal(size=(8, 64)).astype(np.float32), rng.integers(0, 4, 8))
    strided = TorchNetClassifier(network=lambda **_: Transposed(), n_classes=4, max_steps=1,
                                 random_state=0).fit(X, y)
    assert not strided.model_.w.is_contiguous()
    wide = TorchNetClassifier(network=lambda **_: Transposed().double(), n_classes=4,
                              random_state=0).initialise(3, 4)
    for model in (mlp, cnn, strided, wide):
        assert _weights_digest(model) == _old_digest(model)
    before = _fingerprint(mlp)
    weights = mlp.get_weights()
    weights[-1] += 1.0  # the last bias of the last layer
    mlp.set_weights(weights)
    assert _fingerprint(mlp)[:2] == before[:2] and _fingerprint(mlp) != before
    assert _weights_digest(mlp) == _old_digest(mlp)


class _Raising:
    """A fitted stand-in whose ``predict_proba`` raises ``error``."""

    classes_ = np.arange(3)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        raise self.error


def test_a_fault_in_predict_proba_is_raised_not_taken_for_no_probabilities():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match="shapes do not match"):
        class_probabilities(_Raising(ValueError("shapes do not match")), X, 3)


@pytest.mark.parametrize("error", [AttributeError("no probabilities"),
                                   NotImplementedError("hard labels only")])
def test_a_learner_without_probabilities_gives_none(error):
    assert class_probabilities(_Raising(error), np.zeros((4, 2)), 3) is None


def test_an_unfitted_scikit_learn_model_gives_none():
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    X = np.zeros((4, 2))
    assert class_probabilities(LogisticRegression(), X, 3) is None  # NotFittedError
    svc = SVC(probability=False).fit(np.arange(8.0).reshape(4, 2), [0, 1, 0, 1])
    assert class_probabilities(svc, X, 3) is None  # no predict_proba
