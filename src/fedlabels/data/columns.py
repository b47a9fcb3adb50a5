"""Feature columns of a table: choose them (``--features``/``--drop``) and check them.

One-hot encoding turns every distinct value of a non-numeric column into a feature, so a
column that is not really categorical explodes the feature matrix (an ID column: one
feature per row) or hides a data error (a numeric column with one stray ``"?"``: every
number becomes a category). :func:`check_feature_columns` rejects such columns, naming
them, before anything is encoded; a pandas index column (``Unnamed: 0``, written by
``DataFrame.to_csv``) is dropped with a warning, since it is row order, not a feature (in
a file sorted by label it *is* the label), and an integer column of row numbers (every
value of a consecutive range once: a ``patient_id`` 1..n) is a warning that names it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any

import pandas as pd

from fedlabels.core.errors import FedLabelsError, FedLabelsWarning, user_stacklevel

#: a non-numeric column with more distinct values than this fraction of the rows (and at
#: least ``_MIN_DISTINCT``) looks like an identifier, not a category
_ID_FRACTION = 0.5
_MIN_DISTINCT = 10
_MAX_CATEGORIES = 1000  # more distinct values than this is never a usable category
_INDEX_COLUMN = re.compile(r"Unnamed: \d+")
#: a number with a decimal comma (and perhaps '.' or ' ' thousands): 1,5  -0,25  1.234,5
_DECIMAL_COMMA = r"[-+]?\d{1,3}(?:[. ]\d{3})*,\d+|[-+]?\d+,\d+"
_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?.*)?"
                   r"|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}( \d{1,2}:\d{2}(:\d{2})?)?")


def _show(names: Sequence[Any], limit: int = 20) -> str:
    shown = ", ".join(repr(str(n)) for n in list(names)[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def parse_columns(value: str | Sequence[str] | None, flag: str) -> list[str] | None:
    """A column list from ``"a,b,c"`` or a sequence of names; ``None`` stays ``None``."""
    if value is None:
        return None
    names = [c.strip() for c in value.split(",")] if isinstance(value, str) \
        else [str(c).strip() for c in value]
    if not names or any(not n for n in names):
        raise FedLabelsError(f"{flag} needs comma-separated column names, got {value!r}.")
    return names


def select_columns(X: Any, features: Sequence[str] | None, drop: Sequence[str] | None,
                   target: str | None = None) -> Any:
    """``X`` restricted to ``features`` (in that order) and without ``drop``."""
    if features is None and drop is None:
        return X
    if not isinstance(X, pd.DataFrame):
        raise FedLabelsError("--features/--drop need a table with named columns; this "
                             "dataset's features are an unnamed matrix.")
    columns = [str(c) for c in X.columns]
    for flag, names in (("--features", features), ("--drop", drop)):
        if names is None:
            continue
        if target is not None and target in names:
            raise FedLabelsError(f"{flag} names the target column {target!r}; the target is "
                                 "never a feature.")
        unknown = [n for n in names if n not in columns]
        if unknown:
            raise FedLabelsError(f"{flag}: no column {_show(unknown)}; the feature columns "
                                 f"are {_show(columns)}.")
    keep = list(features) if features is not None else columns
    if drop is not None:
        keep = [c for c in keep if c not in set(drop)]
    if not keep:
        raise FedLabelsError("no feature column is left after --features/--drop.")
    return X.loc[:, [X.columns[columns.index(c)] for c in keep]]


def chosen_columns(columns: Sequence[str], features: Sequence[str] | None,
                   drop: Sequence[str] | None, split_off: str | None = None
                   ) -> list[str] | None:
    """The columns of a table's feature ``columns`` that ``features`` and ``drop`` keep
    (as :func:`drop_index_columns` and :func:`select_columns` keep them), in one form:
    ``None`` where they are the columns kept when neither is given, else sorted (an order
    lays out the same columns); ``split_off``, a ``column:NAME`` partition's column (read,
    then split off), is not listed."""
    default = [c for c in columns if not _INDEX_COLUMN.fullmatch(c)]
    kept = set(features if features is not None else default) - set(drop or ())
    return None if kept == set(default) else sorted(kept - {split_off})


def drop_index_columns(X: pd.DataFrame, keep: Sequence[str] = ()) -> pd.DataFrame:
    """Drop pandas index columns (``Unnamed: 0``) with a warning, unless listed in ``keep``."""
    index_cols = [c for c in X.columns
                  if _INDEX_COLUMN.fullmatch(str(c)) and str(c) not in set(keep)]
    if index_cols:
        warnings.warn(f"dropped column(s) {_show(index_cols)}: a pandas index written by "
                      "to_csv is row order, not a feature (name it in --features to keep it)",
                      FedLabelsWarning, stacklevel=user_stacklevel())
        X = X.drop(columns=index_cols)
    return X


def _problem(column: pd.Series) -> str | None:
    """Why one-hot encoding this non-numeric column would go wrong, or None."""
    if pd.api.types.is_datetime64_any_dtype(column) or isinstance(column.dtype,
                                                                  pd.PeriodDtype):
        return "holds dates/times, which one-hot encoding would treat as categories"
    if pd.api.types.is_timedelta64_dtype(column):  # numbers to pandas? no: not numeric
        name = str(column.name)
        return ("holds durations (timedelta64), which one-hot encoding would treat as "
                "categories; give them as numbers (Python: "
                f"X[{name!r}] = X[{name!r}].dt.total_seconds() / 86400, in days)")
    values = column.dropna()
    if values.empty or isinstance(column.dtype, pd.CategoricalDtype):
        return None
    text = values.astype(str).str.strip()
    numeric = pd.to_numeric(text, errors="coerce")
    n_bad = int(numeric.isna().sum())
    if 0 < n_bad <= max(1, len(text) // 2) and n_bad < len(text):
        stray = text[numeric.isna()].unique()[:3].tolist()
        return (f"is numeric except for {n_bad} value(s) such as {_show(stray, 3)}, which "
                "would make every number a category; clean or impute those values")
    if text.map(lambda s: bool(_DATE.fullmatch(s))).mean() > 0.9:
        return "holds dates/times, which one-hot encoding would treat as categories"
    distinct = int(values.nunique())
    if distinct > _MAX_CATEGORIES or (distinct >= _MIN_DISTINCT
                                      and distinct > _ID_FRACTION * len(values)):
        return (f"has {distinct} distinct values in {len(values)} rows (an identifier?), "
                f"which one-hot encoding would turn into {distinct} features")
    return None


def _holds_text(column: pd.Series) -> bool:
    """Whether ``column`` holds text values (not numbers, booleans or a categorical)."""
    return not (pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)
                or isinstance(column.dtype, pd.CategoricalDtype))


def _decimal_comma_example(column: pd.Series) -> str | None:
    """A value of a text column of numbers with decimal commas (``-0,5``), or None."""
    if not _holds_text(column):
        return None
    text = column.dropna().astype(str).str.strip()
    matches = text.str.fullmatch(_DECIMAL_COMMA)
    if text.empty or matches.mean() <= 0.9:
        return None
    return str(text[matches].iloc[0])


def _image_path_example(column: pd.Series) -> str | None:
    """A value of a text column whose values (90 % of them or more) are image file
    names (``imgs/cat/0.png``: a suffix that an image folder reads), or None."""
    from fedlabels.data.images import SUFFIXES

    if not _holds_text(column):
        return None
    text = column.dropna().head(200).astype(str).str.strip()
    images = text.str.lower().str.endswith(SUFFIXES)
    if text.empty or images.mean() < 0.9:
        return None
    return str(text[images].iloc[0])


def median_words(column: pd.Series) -> float:
    """The median number of words of a text column's values (0 for any other column)."""
    if not _holds_text(column):
        return 0.0
    sample = column.dropna().head(200)
    if sample.empty or not all(isinstance(v, str) for v in sample):
        return 0.0
    return float(sample.str.split().str.len().median())


def _is_row_counter(column: pd.Series) -> bool:
    """An integer column holding every value of a consecutive range once (1..n, 0..n-1, or
    any such run): row numbers or an ID, at least ``2 * _MIN_DISTINCT`` rows."""
    if not pd.api.types.is_integer_dtype(column) or pd.api.types.is_bool_dtype(column):
        return False
    n = len(column)
    if n < 2 * _MIN_DISTINCT or column.isna().any():
        return False
    low, high = int(column.min()), int(column.max())
    return high - low + 1 == n and int(column.nunique()) == n


def check_feature_columns(X: pd.DataFrame) -> None:
    """Reject duplicated column names, and non-numeric columns that one-hot encoding would
    explode, naming them."""
    duplicated = sorted({str(c) for c in X.columns[X.columns.duplicated()]})
    if duplicated:
        raise FedLabelsError(f"the data has duplicated column name(s) {_show(duplicated)}; "
                             "give every column its own name (Python: X.columns = [...]) or "
                             "drop the copies (X.loc[:, ~X.columns.duplicated()]).")
    for name in X.columns:
        path = _image_path_example(X[name])
        if path is not None:
            raise FedLabelsError(
                f"column {str(name)!r} holds image paths (e.g. {path!r}), which one-hot "
                "encoding would turn into a feature per file: to train on the images give "
                f"--image-column {name} (Python: image_column={str(name)!r}), or leave it "
                f"out with --drop {name}.")
        words = median_words(X[name])
        if words > 3:
            raise FedLabelsError(
                f"column {str(name)!r} holds free text (a median of {words:g} words a row), "
                "which one-hot encoding would turn into a feature per text: to train a text "
                f"model on it (tfidf, minilm) give --text-column {name} (Python: "
                f"text_column={str(name)!r}), or leave it out with --drop {name}.")
    commas = {str(name): ex for name in X.columns
              if (ex := _decimal_comma_example(X[name])) is not None}
    if commas:
        (first, example), = list(commas.items())[:1]
        raise FedLabelsError(
            f"column(s) {_show(list(commas))} hold numbers written with decimal commas (e.g. "
            f"{example!r} in {first!r}), which one-hot encoding would make categories; "
            "re-save the table with '.' decimals (pandas: pd.read_csv(PATH, sep=';', "
            "decimal=',').to_csv(NEW, index=False)).")
    problems = {}
    counters = [str(name) for name in X.columns if _is_row_counter(X[name])]
    if counters:
        one = len(counters) == 1
        warnings.warn(f"column{'' if one else 's'} {_show(counters)} "
                      f"hold{'s' if one else ''} the numbers of the rows (every value once, a "
                      "consecutive range): an identifier, not a feature; in a file sorted by "
                      f"label it stands for the label. Drop {'it' if one else 'them'} with "
                      f"--drop {','.join(counters)} (Python: X.drop(columns={counters!r})).",
                      FedLabelsWarning, stacklevel=user_stacklevel())
    for name in X.columns:
        col = X[name]
        if pd.api.types.is_bool_dtype(col) or (pd.api.types.is_numeric_dtype(col)
                                               and not isinstance(col.dtype,
                                                                  pd.CategoricalDtype)):
            continue
        why = _problem(col)
        if why is not None:
            problems[str(name)] = why
    if problems:
        first, why = next(iter(problems.items()))
        others = f" (also {_show(list(problems)[1:])})" if len(problems) > 1 else ""
        raise FedLabelsError(
            f"column {first!r} {why}{others}; drop it with --drop {','.join(problems)} "
            f"(Python: X.drop(columns={list(problems)!r})) or choose columns with --features.")


def check_numbers(frame: pd.DataFrame, columns: Sequence[str], what: str = "the data") -> None:
    """A one-line error naming the first cell of ``columns`` that is not a number (a
    decimal comma, a unit, a word; a gap is none), its column, data row and value: how a
    site's CSV rows and ``predict``'s new rows are read (``what`` names the rows)."""
    for column in columns:
        values = frame[column]
        if pd.api.types.is_numeric_dtype(values):
            continue
        bad = (values.notna() & pd.to_numeric(values, errors="coerce").isna()).to_numpy()
        if bad.any():
            row = int(bad.argmax())
            raise FedLabelsError(f"{what} column {column!r} holds {values.iloc[row]!r} in data "
                                 f"row {row + 1}, not a number; write the features as plain "
                                 "numbers (a decimal point, no units) and leave a missing "
                                 "value empty.")
