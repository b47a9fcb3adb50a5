"""The text-input contract: which data are text, which learners take text.

A text dataset's ``X`` is a 1-D numpy array of dtype ``object`` holding one Python ``str``
per row. A learner that takes text declares it with a class attribute
``accepts_text = True`` (its model spec name is also registered here with
:func:`register_text_model`, so a spec can be checked before anything is built). Numeric
learners refuse text and text learners refuse numeric features, each with one clear line;
:func:`check_learner_input` is the single place that decides.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError

#: model spec names (canonical) of learners that take text
TEXT_MODELS: set[str] = set()


def register_text_model(name: str) -> None:
    """Record that the model registered as ``name`` takes text ``X`` (``accepts_text``)."""
    TEXT_MODELS.add(name)


def is_text(X: Any) -> bool:
    """True for text features: a 1-D array (or list) of ``str``.

    Decided by the dtype and the first row, so it costs O(1) on an object array.
    """
    if isinstance(X, list | tuple):
        return len(X) > 0 and isinstance(X[0], str)
    arr = X if isinstance(X, np.ndarray) else None
    if arr is None and callable(getattr(X, "to_numpy", None)) and getattr(X, "ndim", 0) == 1:
        arr = X.to_numpy()  # a pandas Series
    if arr is None:
        return False
    if arr.dtype.kind in "US":
        return arr.ndim == 1
    return arr.dtype == object and arr.ndim == 1 and len(arr) > 0 and isinstance(arr[0], str)


def accepts_text(learner: Any) -> bool:
    """Whether a learner (an object, or a :class:`~fedlabels.learners.specs.ModelSpec`)
    takes text ``X``."""
    from fedlabels.learners.model_spec import ModelSpec

    if isinstance(learner, ModelSpec):
        return learner.name in TEXT_MODELS
    return bool(getattr(learner, "accepts_text", False))


def _text_models() -> str:
    return ", ".join(sorted(TEXT_MODELS)) or "(none registered)"


def check_learner_input(learner: Any, X: Any, where: str = "model") -> None:
    """Refuse text ``X`` for a numeric learner and numeric ``X`` for a text learner."""
    from fedlabels.learners.model_spec import ModelSpec

    label = str(learner) if isinstance(learner, ModelSpec) else type(learner).__name__
    if is_text(X) and not accepts_text(learner):
        raise FedLabelsError(f"{where} {label} needs numeric features but this dataset is "
                             f"text; use a text model: {_text_models()}.")
    if not is_text(X) and accepts_text(learner):
        raise FedLabelsError(f"{where} {label} takes text but this dataset has numeric "
                             "features; use a text dataset (tweets, movie_reviews, "
                             "amazon_reviews, or csv:PATH:TARGET with --text-column NAME).")


def refuse_text(X: Any, what: str, hint: str = "") -> None:
    """Raise a one-line error if ``X`` is text: ``what`` needs numeric features."""
    if is_text(X):
        extra = f"; {hint}" if hint else ""
        raise FedLabelsError(f"{what} needs numeric features and this dataset is text{extra}.")


def as_text_array(values: Any) -> np.ndarray:
    """A 1-D object array of ``str`` (the text ``X`` format)."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1 and all(
            type(v) is str for v in values):
        return values
    arr = np.empty(len(values), dtype=object)
    arr[:] = [str(v) for v in values]
    return arr


def check_run_input(X: Any, models: list[Any], method: Any = None,
                    settings: Any = None) -> None:
    """Refuse a run whose models (specs or estimators, one per client) or method (a
    ``Method`` with its run's ``settings``; its ``text_refusal`` says what of it computes on
    the features) cannot take the federation's features ``X``."""
    refusal = method.text_refusal(settings) if method is not None else None
    if refusal is not None:
        refuse_text(X, *refusal)
    for cid, model in enumerate(models):
        check_learner_input(model, X, f"client {cid}'s model")


def text_rows(X: Any, learner: str, hint: str) -> np.ndarray:
    """``X`` of a text learner as a 1-D object array of ``str`` (a list, a 1-D array or a
    pandas Series of texts); anything else is one line naming what it got (``hint``: what
    to use for numeric features); no texts is an empty array (a round may predict none)."""
    if is_text(X):
        return as_text_array(X.to_numpy() if callable(getattr(X, "to_numpy", None)) else X)
    shape = getattr(X, "shape", None)
    if (shape is not None and tuple(shape) == (0,)) or (isinstance(X, list | tuple) and not X):
        return np.empty(0, dtype=object)
    if shape is not None and len(shape) == 2 and shape[1] == 1 and is_text(
            np.asarray(X)[:, 0]):
        got = f"a column of shape {tuple(shape)}: pass X[:, 0] or df['column']"
    elif shape is not None and len(shape) != 1:
        got = f"an array of shape {tuple(shape)}"
    else:
        got = "numeric features" if shape is not None or isinstance(X, list | tuple) else \
            f"a value of type {type(X).__name__}"
    raise FedLabelsError(f"{learner} takes text (a 1-D array of str, one text per row), got "
                         f"{got}; {hint}.")
