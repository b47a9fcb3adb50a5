"""Scores of predictions as scikit-learn's ``score`` gives them (accuracy, R²), in numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError, shown


def accuracy(y: Any, pred: np.ndarray, sample_weight: Any = None) -> float:
    """The (weighted) share of ``pred`` equal to ``y``, as ``accuracy_score``; labels of
    ``y`` that are text against predictions that are numbers (or the reverse) are its
    one-line error, not an accuracy of 0."""
    truth, weight = _paired(y, pred, sample_weight)
    kinds = {_kind(v) for v in set(truth.tolist())}
    shown = {_kind(v) for v in pred[:1].tolist()}
    if shown and kinds != shown:
        raise FedLabelsError(
            f"y holds {' and '.join(sorted(kinds))} labels but the run predicts "
            f"{shown.pop()} labels (its classes_, the training y's type): score against "
            "labels of that type, e.g. y mapped back to the names it was trained on.")
    return float(np.average(truth == pred, weights=weight))


def _kind(label: Any) -> str:
    """``text`` or ``number``, as scikit-learn tells label types apart."""
    return "text" if isinstance(label, str) else "number"


def r2(y: Any, pred: np.ndarray, sample_weight: Any = None) -> float:
    """The coefficient of determination, as ``r2_score`` (:func:`fedlabels.core.metrics.r2`,
    weighted); for a constant ``y``, 1.0 when the predictions equal it, else 0.0."""
    from fedlabels.core.metrics import r2 as r2_of

    truth, weight = _paired(y, pred, sample_weight)
    return r2_of(truth, pred, weight)


def _paired(y: Any, pred: np.ndarray,
            sample_weight: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """``y`` (and the weights) as 1-D arrays of ``pred``'s length, or a one-line error."""
    truth = np.asarray(y)
    if truth.ndim != 1 or len(truth) != len(pred):
        raise FedLabelsError(f"y must be one label per row of X: {len(pred)} rows, got y of "
                             f"shape {truth.shape}.")
    if sample_weight is None:
        return truth, None
    try:
        weight = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise FedLabelsError(f"sample_weight must be numbers, one per row of X, got "
                             f"{shown(sample_weight)}.") from None
    if weight.shape != truth.shape:
        raise FedLabelsError(f"sample_weight must be one weight per row of X: {len(pred)} "
                             f"rows, got shape {weight.shape}.")
    if not np.isfinite(weight).all():  # np.average gave nan, scikit-learn refuses them
        raise FedLabelsError(f"sample_weight holds {int((~np.isfinite(weight)).sum())} "
                             "NaN or infinite weight(s): give finite numbers.")
    if not weight.any():  # np.average's ZeroDivisionError
        raise FedLabelsError("sample_weight is all zeros: give at least one non-zero weight.")
    return truth, weight
