"""Clinical metrics of classifiers on the test set: balanced accuracy, macro-F1, AUROC
(binary, or one-vs-rest macro), sensitivity and specificity, the confusion matrix, and the
majority-class baseline every model must beat. Pure numpy/scipy; the tests check each
against scikit-learn's metric functions.

Binary tasks take the *rarer* class of the pooled private training labels as the positive
class (the disease in a screening task); the result names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedlabels.core.metric_names import METRIC_HEADINGS as METRIC_HEADINGS
from fedlabels.core.metric_names import SCALAR_METRICS as SCALAR_METRICS


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Counts ``C[i, j]`` of true class ``i`` predicted as ``j`` (classes 0..n-1)."""
    t, p = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    return np.bincount(t * n_classes + p, minlength=n_classes * n_classes).reshape(
        n_classes, n_classes)


def balanced_accuracy(cm: np.ndarray) -> float:
    """Mean recall over the classes present in ``y_true``."""
    support = cm.sum(axis=1)
    present = support > 0
    return float(np.mean(np.diag(cm)[present] / support[present]))


def macro_f1(cm: np.ndarray) -> float:
    """Mean F1 over the classes that occur as truth or prediction (0 where undefined)."""
    tp = np.diag(cm).astype(float)
    support, predicted = cm.sum(axis=1), cm.sum(axis=0)
    seen = (support + predicted) > 0
    denom = (support + predicted)[seen]
    return float(np.mean(np.where(denom > 0, 2 * tp[seen] / np.maximum(denom, 1), 0.0)))


def binary_auroc(is_positive: np.ndarray, score: np.ndarray) -> float | None:
    """Area under the ROC curve (Mann-Whitney, ties counted half); ``None`` without both
    positives and negatives, NaN if a score is NaN.

    The Mann-Whitney count: for each positive, the negatives scored below it plus half
    those scored equal, found by binary search in the sorted negative scores (one sort;
    several times faster than ranking all scores, which a run of hundreds of clients does
    for every class of every client)."""
    pos = np.asarray(is_positive, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    values = np.asarray(score, dtype=np.float64)
    if np.isnan(values).any():
        return float("nan")
    negatives = np.sort(values[~pos])
    positives = values[pos]
    below = np.searchsorted(negatives, positives, side="left")
    equal = np.searchsorted(negatives, positives, side="right") - below
    return float((below.sum() + 0.5 * equal.sum()) / (n_pos * n_neg))


def auroc(y_true: np.ndarray, proba: np.ndarray, positive: int) -> float | None:
    """Binary AUROC of ``positive``'s probability, or the macro mean of one-vs-rest AUROCs
    over the classes present in ``y_true`` (more than two classes)."""
    y = np.asarray(y_true)
    if proba.shape[1] == 2:
        return binary_auroc(y == positive, proba[:, positive])
    aucs = [a for k in np.unique(y) if (a := binary_auroc(y == k, proba[:, k])) is not None]
    return float(np.mean(aucs)) if aucs else None


def classification_metrics(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int,
                           proba: np.ndarray | None = None,
                           positive: int = 1) -> dict[str, Any]:
    """Every scalar metric of :data:`SCALAR_METRICS` (``None`` where it does not apply:
    AUROC without probabilities, sensitivity and specificity beyond two classes) and the
    confusion matrix as nested lists."""
    cm = confusion_matrix(y_true, y_pred, n_classes)
    out: dict[str, Any] = {
        "accuracy": float(np.trace(cm) / max(1, cm.sum())),
        "balanced_accuracy": balanced_accuracy(cm),
        "macro_f1": macro_f1(cm),
        "auroc": None if proba is None else auroc(y_true, proba, positive),
        "sensitivity": None, "specificity": None,
    }
    if n_classes == 2:
        negative = 1 - positive
        pos_n, neg_n = cm[positive].sum(), cm[negative].sum()
        out["sensitivity"] = float(cm[positive, positive] / pos_n) if pos_n else None
        out["specificity"] = float(cm[negative, negative] / neg_n) if neg_n else None
    out["confusion_matrix"] = cm.tolist()
    return out


def positive_class(train_counts: Sequence[int]) -> int:
    """The rarer class of a binary task's pooled training labels (class 1 on a tie)."""
    return 0 if train_counts[0] < train_counts[1] else 1


def majority_baseline(train_counts: Sequence[int], y_test: np.ndarray) -> dict[str, Any]:
    """The classifier that always answers the commonest training class: its class and its
    test accuracy, with the half-width of a 95 % binomial interval on that accuracy."""
    k = int(np.argmax(train_counts))
    acc = float(np.mean(np.asarray(y_test) == k)) if len(y_test) else 0.0
    half = 1.96 * float(np.sqrt(max(acc * (1 - acc), 1e-12) / max(1, len(y_test))))
    return {"class": k, "accuracy": acc, "half_width_95": half}


def shares_baseline(train_counts: Sequence[int], y_test: np.ndarray,
                    shares: Sequence[np.ndarray]) -> dict[str, Any]:
    """:func:`majority_baseline` where each client is scored on its own share of the test
    set (``shares``: its rows, disjoint): the commonest training class's accuracy on each
    share (``clients``), their mean, and that mean's 95 % half-width (the shares'
    binomial variances summed, over the number of clients squared)."""
    per = [majority_baseline(train_counts, np.asarray(y_test)[rows]) for rows in shares]
    halves = np.array([b["half_width_95"] for b in per])
    return {"class": per[0]["class"],
            "accuracy": float(np.mean([b["accuracy"] for b in per])),
            "half_width_95": float(np.sqrt(np.sum(halves ** 2)) / len(per)),
            "clients": [b["accuracy"] for b in per],
            "scored_on": "each client's own share of the test set"}


def aggregate(per_client: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Mean, min and max over clients of each scalar metric (``None`` if any client lacks
    it), and the per-client values."""
    out: dict[str, dict[str, Any]] = {}
    for name in SCALAR_METRICS:
        values = [m.get(name) for m in per_client]
        known = [v for v in values if v is not None]
        full = len(known) == len(values) and bool(known)
        out[name] = {"mean": float(np.mean(known)) if full else None,
                     "min": float(min(known)) if full else None,
                     "max": float(max(known)) if full else None,
                     "clients": values}
    return out


def class_probabilities(model: Any, X: np.ndarray, n_classes: int) -> np.ndarray | None:
    """``model.predict_proba(X)`` as one column per global class, or ``None`` when the
    model gives no probabilities (hard-label learners: AUROC is then n/a): it has no
    ``predict_proba``, or it raises ``AttributeError`` (scikit-learn's ``NotFittedError``
    among them) or ``NotImplementedError``. Any other error is a fault and is raised."""
    proba_fn = getattr(model, "predict_proba", None)
    if proba_fn is None:
        return None
    try:
        proba = np.asarray(proba_fn(X), dtype=np.float64)
    except (AttributeError, NotImplementedError):  # what a learner without them raises
        return None
    classes = np.asarray(getattr(model, "classes_", np.arange(proba.shape[1])))
    if proba.ndim != 2 or proba.shape[1] != len(classes):
        return None
    full = np.zeros((len(X), n_classes))
    full[:, classes.astype(np.int64)] = proba
    return full


def clinical_summary(predictions: Sequence[tuple[np.ndarray, np.ndarray | None]],
                     y_test: np.ndarray, n_classes: int, train_counts: Sequence[int],
                     class_names: Sequence[str] = ()) -> dict[str, Any]:
    """The result's ``clinical`` entry from each client's (test predictions, class
    probabilities or ``None``)."""
    names = list(class_names) or [str(k) for k in range(n_classes)]
    positive = positive_class(train_counts) if n_classes == 2 else None
    per_client = [classification_metrics(y_test, pred, n_classes, proba,
                                         positive if positive is not None else 1)
                  for pred, proba in predictions]
    baseline = majority_baseline(train_counts, y_test)
    out: dict[str, Any] = {
        "metrics": aggregate(per_client),
        "confusion_matrices": [m["confusion_matrix"] for m in per_client],
        "class_names": names,
        "baseline": {**baseline, "name": names[baseline["class"]]},
        "n_test": len(y_test),
        "auroc_scores": "predicted probabilities" if all(p is not None for _, p in predictions)
        else "n/a: a client's model gives no probabilities",
    }
    if positive is not None:
        out["positive_class"] = {"class": positive, "name": names[positive],
                                 "rule": "the rarer class of the pooled private labels"}
    return out
