"""Numeric targets of a regression federation: checked, and mapped to the unit interval.

A regression federation declares a target range ``[lo, hi]`` that every party knows: the
dataset's documented range (public metadata, as the list of class names is for
classification), given with ``--target-range LO,HI`` or, when none is given, the range of
the whole published table (all rows, test set included; the result records which).
Every target ``y`` is held as ``(y - lo) / (hi - lo)``: one public affine map, so all
clients learn on the same standardised scale, FedCT quantises predictions over ``[0, 1]``
and FedAvg averages models with one output scale. Metrics go back to original units
(:func:`fedlabels.core.metrics.regression_scores`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError

#: a declared target range as given: ``"LO,HI"``, a pair of numbers (a list, a tuple, a
#: numpy array; Python's or numpy's numbers) or ``None`` (the range of the targets read)
TargetRangeLike = str | Sequence[float | np.floating[Any] | np.integer[Any]] | np.ndarray | None

TASKS = ("classification", "regression")
#: partitions that do not look at the labels (the only ones a regression task can take)
LABEL_FREE_PARTITIONS = ("iid", "quantity")


def check_task(task: str) -> str:
    if task not in TASKS:
        raise FedLabelsError(f"unknown task {task!r}; use one of {', '.join(TASKS)}.")
    return task


def numeric_targets(y: Any, what: str = "y") -> np.ndarray:
    """Finite float64 targets, or a one-line error (missing or non-numeric values)."""
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    series = y if isinstance(y, pd.Series) else pd.Series(np.asarray(y).ravel())
    if series.isna().any():
        raise FedLabelsError(f"{what} has {int(series.isna().sum())} missing targets; drop "
                             "those rows first.")
    values = pd.to_numeric(series, errors="coerce")
    if values.isna().any():
        bad = series[values.isna()].astype(str).unique()[:3].tolist()
        raise FedLabelsError(f"{what} must be numeric for a regression task; got values such "
                             f"as {bad} (is this a classification target? drop --task "
                             "regression).")
    out = values.to_numpy(dtype=np.float64)
    if not np.isfinite(out).all():
        raise FedLabelsError(f"{what} has non-finite targets; drop those rows first.")
    return out


def parse_target_range(value: TargetRangeLike) -> tuple[float, float] | None:
    """``"LO,HI"`` or a pair of numbers -> ``(lo, hi)`` with ``lo < hi``; None stays None."""
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        lo, hi = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise FedLabelsError(f"target range must be two numbers LO,HI, got {value!r}.") \
            from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise FedLabelsError(f"target range needs finite LO < HI, got {value!r}.")
    return lo, hi


def unit_targets(y: Any, y_test: Any, target_range: TargetRangeLike
                 ) -> tuple[np.ndarray, np.ndarray | None, tuple[float, float], str]:
    """``(y, y_test)`` mapped to the unit interval, the range used and where it came from."""
    ya = numeric_targets(y, "y")
    yt = None if y_test is None else numeric_targets(y_test, "y_test")
    declared = parse_target_range(target_range)
    every = ya if yt is None else np.concatenate([ya, yt])
    if every.min() == every.max():
        raise FedLabelsError(f"every target equals {every.min():g}; there is nothing to "
                             "regress.")
    if declared is None:
        declared, source = (float(every.min()), float(every.max())), "table"
    else:
        _check_within(every, declared)
        source = "declared"
    lo, hi = declared
    if not np.isfinite(hi - lo):  # the unit map would give 0 and NaN targets
        raise FedLabelsError(f"the target range [{lo:g}, {hi:g}] is wider than a float64 can "
                             "hold; divide the target by a power of ten first (e.g. 1e300).")
    return ((ya - lo) / (hi - lo), None if yt is None else (yt - lo) / (hi - lo),
            declared, source)


def _check_within(targets: np.ndarray, declared: tuple[float, float]) -> None:
    """A declared range holds every target: FedCT clips its releases to the range, so a
    target outside it would be learnt wrongly without a word."""
    lo, hi = declared
    outside = int(np.count_nonzero((targets < lo) | (targets > hi)))
    if outside:
        raise FedLabelsError(f"{outside} of {len(targets)} targets lie outside the declared "
                             f"target range [{lo:g}, {hi:g}] (they span {targets.min():g} to "
                             f"{targets.max():g}); declare a range that holds every target "
                             "(--target-range LO,HI).")


def check_partition_for_task(kind: str, task: str) -> None:
    """A regression target has no classes: a label-based partition is an error."""
    if task == "regression" and kind not in LABEL_FREE_PARTITIONS:
        raise FedLabelsError(f"partition {kind!r} splits by class label and a regression task "
                             f"has none; use {' or '.join(LABEL_FREE_PARTITIONS)} "
                             "(quantity:ALPHA).")


def resolve_task(dataset: str, declared: str, requested: str | None) -> str:
    """The task of a run: the dataset's own, or ``requested`` for a ``csv:`` table."""
    if requested is None:
        return declared
    check_task(requested)
    if requested != declared and not dataset.startswith("csv:"):
        raise FedLabelsError(f"dataset {dataset!r} is a {declared} dataset; --task applies to "
                             "csv:PATH:TARGET tables only (leave it out).")
    return requested


def refuse_regression_deployment(dataset: str, task: str | None, sep: str | None) -> None:
    """Flower deployments carry class labels only (site data, plan): a regression run is
    refused there with one line, instead of training classifiers on real targets."""
    from fedlabels.data.registry import get_dataset

    if task is None and not dataset.startswith("csv:"):
        task = get_dataset(dataset, sep=sep).task
    if task == "regression":
        raise FedLabelsError(f"{dataset!r} is a regression task, which runs in the in-process "
                             "simulator only (fedlabels run / fl.run); a Flower deployment "
                             "of regression is not supported yet.")
