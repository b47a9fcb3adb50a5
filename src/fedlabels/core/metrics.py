"""Evaluation metrics of a client's model: accuracy for classification, RMSE and R² for
regression (reported in the target's original units)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: the keys an evaluation reply carries, by task
REPLY_KEYS = {"classification": ("accuracy",), "regression": ("rmse", "r2")}
#: the config key of an evaluation reply by which a site declines to report any score
DECLINED = "declined"


def declined(reply: Any) -> bool:
    """Whether an evaluation reply declines to report (a Flower site with ``evaluate``
    false in its node config: its scores are not covered by a privacy guarantee)."""
    return reply.config.get(DECLINED) is True


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Root mean squared error."""
    diff = np.asarray(y_pred, dtype=np.float64) - np.asarray(y_true, dtype=np.float64)
    return float(np.sqrt(np.mean(diff * diff)))


def r2(y_true: np.ndarray, y_pred: np.ndarray,
       sample_weight: np.ndarray | None = None) -> float:
    """Coefficient of determination 1 - SS_res / SS_tot, weighted by ``sample_weight`` (as
    scikit-learn's ``r2_score``; a constant ``y_true`` gives 1.0 for a perfect prediction,
    else 0.0)."""
    y = np.asarray(y_true, dtype=np.float64)
    w = 1.0 if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    mean = y.mean() if sample_weight is None else np.average(y, weights=w)
    res = float(np.sum(w * (y - np.asarray(y_pred, dtype=np.float64)) ** 2))
    tot = float(np.sum(w * (y - mean) ** 2))
    if tot == 0.0:
        return 1.0 if res == 0.0 else 0.0
    return 1.0 - res / tot


def regression_scores(y_true: np.ndarray, y_pred: np.ndarray,
                      target_range: tuple[float, float]) -> dict[str, float]:
    """RMSE (original units) and R² of unit-scaled targets/predictions.

    A regression federation holds targets as ``(y - lo) / (hi - lo)``; RMSE scales back by
    ``hi - lo``, R² is invariant under the affine map.
    """
    lo, hi = target_range
    return {"rmse": (hi - lo) * rmse(y_true, y_pred), "r2": r2(y_true, y_pred)}


def mean_baseline(train_targets: np.ndarray, y_test: np.ndarray,
                  target_range: tuple[float, float]) -> dict[str, Any]:
    """The regressor that always predicts the mean of the pooled private training targets
    (unit-scaled, as a federation holds them): that mean in the target's units, its test
    RMSE (the target's units) and R², and the test size."""
    lo, hi = target_range
    mean = float(np.mean(np.asarray(train_targets, dtype=np.float64)))
    y = np.asarray(y_test, dtype=np.float64)
    return {"predicts": "the training mean", "mean": lo + (hi - lo) * mean,
            **regression_scores(y, np.full(len(y), mean), target_range), "n_test": len(y)}


def evaluation_scores(replies: Mapping[int, Any]) -> dict[str, list[float]]:
    """The metrics of evaluation replies (``Message`` objects), one list per key over the
    clients in id order: ``accuracy``, or ``rmse`` and ``r2``; none when nothing replied.
    Replies that decline (:func:`declined`) are left out."""
    cids = sorted(c for c in replies if not declined(replies[c]))
    keys = [k for keys in REPLY_KEYS.values() for k in keys
            if cids and all(k in replies[c].config for c in cids)]
    return {k: [float(replies[c].config[k]) for c in cids] for k in keys}
