"""scikit-learn's input conventions for the torch learners' ``fit`` and ``predict``.

``fit`` takes what a scikit-learn estimator takes (numpy arrays, lists, pandas frames; any
labels) and refuses what it cannot use (sparse, complex, NaN or inf, 1-D ``X``, unequal
lengths, no rows) with one :class:`~fedlabels.core.errors.FedLabelsError` line, which is a
``ValueError`` as scikit-learn's own are. Predicting before fitting raises
:class:`NotFittedLearnerError`, both a ``FedLabelsError`` and scikit-learn's
``NotFittedError``. The federation's own path (``train_steps`` on data the federation has
already checked) is not re-validated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from fedlabels.core.errors import FedLabelsError


class NotFittedLearnerError(FedLabelsError, NotFittedError):
    """A learner used before ``fit``: a ``FedLabelsError`` scikit-learn recognises too."""


class InputTypeError(FedLabelsError, TypeError):
    """Input of a type the learner cannot read (a ``TypeError`` as scikit-learn's is)."""


def _finite(allow_nan: bool) -> bool | str:
    return "allow-nan" if allow_nan else True


def _one_line(exc: Exception) -> FedLabelsError:
    kind = InputTypeError if isinstance(exc, TypeError) else FedLabelsError
    return kind(" ".join(str(exc).split()))


def fit_inputs(est: Any, X: Any, y: Any, *, reset: bool, numeric_y: bool,
               dtype: Any = np.float32, order: str | None = "C", allow_nan: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """``X`` as an (n, d) array of ``dtype`` (C-ordered float32: the torch learners') and
    ``y`` as a 1-D array of the same length; ``reset`` (a fresh fit) records
    ``n_features_in_`` (and ``feature_names_in_`` of a frame), else ``X`` must match them.
    ``allow_nan``: NaN in ``X`` is a missing value the learner handles (inf is refused)."""
    try:
        X, y = validate_data(est, X, y, reset=reset, dtype=dtype, order=order,
                             y_numeric=numeric_y, ensure_all_finite=_finite(allow_nan))
        if not numeric_y:
            check_classification_targets(y)
    except (ValueError, TypeError) as exc:
        raise _one_line(exc) from None
    return _writable(X), y


#: why the torch learners take no ``sample_weight``
UNIFORM_MINIBATCHES = "its minibatches draw rows uniformly"


def refuse_fit_params(est: Any, params: dict[str, Any],
                      why: str = UNIFORM_MINIBATCHES) -> None:
    """``fit``'s keywords beyond ``X`` and ``y`` are refused in one line (an
    :class:`InputTypeError`, a ``TypeError`` as Python's for an unknown keyword), before
    anything is fitted: a ``sample_weight`` (``None`` is no weight) would be ignored, for
    the reason ``why`` says, so the line says what to do instead;
    ``has_fit_parameter(est, "sample_weight")`` stays False."""
    name = f"{type(est).__name__}.fit"
    if params.get("sample_weight") is not None:
        raise InputTypeError(f"{name} takes no sample_weight: {why}. For whole-number "
                             "weights w repeat the rows, fit(np.repeat(X, w, axis=0), "
                             "np.repeat(y, w)); else use an estimator whose fit takes one "
                             "(has_fit_parameter(est, 'sample_weight') says which).")
    other = sorted(k for k in params if k != "sample_weight")
    if other:
        raise InputTypeError(f"{name} takes X and y only, got {', '.join(other)}.")


def predict_input(est: Any, X: Any, *, fitted: str = "model_", dtype: Any = np.float32,
                  order: str | None = "C", allow_nan: bool = False) -> np.ndarray:
    """``X`` as an array of ``dtype`` with the fitted number of features, all finite (but NaN
    with ``allow_nan``; no rows is no error: a round may query none); before ``fit`` (no
    attribute ``fitted``) :class:`NotFittedLearnerError`."""
    if not hasattr(est, fitted):
        raise NotFittedLearnerError(f"this {type(est).__name__} is not fitted yet; call fit "
                                    "first.")
    try:
        out: np.ndarray = validate_data(est, X, reset=False, dtype=dtype, order=order,
                                         ensure_min_samples=0,
                                         ensure_all_finite=_finite(allow_nan))
    except (ValueError, TypeError) as exc:
        raise _one_line(exc) from None
    return _writable(out)


def _writable(X: np.ndarray) -> np.ndarray:
    """``X``, copied if it is read-only (a float32 pandas frame's values under pandas'
    copy-on-write, a read-only memmap): torch warned "The given NumPy array is not
    writable" when it took such rows; the learners never write to them."""
    return X if X.flags.writeable else X.copy()


def label_codes(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Each label's index in ``classes`` (sorted); a label that is not one of them is an
    error naming it."""
    try:
        codes = np.searchsorted(classes, y)
        ok = codes < len(classes)
        ok[ok] = classes[codes[ok]] == y[ok]
    except TypeError:  # labels of another kind than the classes (text against ints)
        ok = np.zeros(len(y), dtype=bool)
        codes = np.zeros(len(y), dtype=np.int64)
    if not ok.all():
        unknown = np.unique(np.asarray(y[~ok], dtype=object).astype(str))[:5].tolist()
        shown = classes[:10].tolist()
        raise FedLabelsError(
            f"y has labels {unknown} that are not among this model's classes {shown}"
            f"{' ...' if len(classes) > 10 else ''}; with n_classes set, labels are the ints "
            "0..n_classes-1 (leave n_classes=None to learn the labels of y), and a "
            "warm-started fit keeps the classes of the first.")
    return codes.astype(np.int64)


def text_targets(n_texts: int, y: Any) -> np.ndarray:
    """``y`` of a text learner's ``fit`` as a 1-D array of class labels, one per text (the
    texts themselves are checked by the learner: a 1-D array of ``str``); otherwise one
    :class:`~fedlabels.core.errors.FedLabelsError` line."""
    from sklearn.utils.validation import column_or_1d

    try:
        y = column_or_1d(y, warn=True)
        if len(y) != n_texts:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                             f"[{n_texts}, {len(y)}]")
        if not n_texts:
            raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
        if y.dtype.kind == "f" and not np.isfinite(y).all():
            raise ValueError("Input y contains NaN or infinity.")
        check_classification_targets(y)
    except (ValueError, TypeError) as exc:
        raise _one_line(exc) from None
    return y


def fit_classes(y: np.ndarray, n_classes: Any) -> tuple[np.ndarray, np.ndarray]:
    """``classes_`` by the learners' rule (the labels of ``y``, or ``0..n_classes-1`` when
    set) and each label's index in them."""
    classes = np.unique(y) if n_classes is None else np.arange(int(n_classes))
    return classes, label_codes(y, classes)
