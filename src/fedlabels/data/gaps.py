"""Feature gaps filled after the split with U's medians (``missing="public-median"``).

A table is encoded before it is split into the test set, U and the clients' rows, so a fill
fitted on the whole table (a column median) would carry the test rows' and every client's
values into the rows of the others. Here each gap (NaN) is filled with the median of U's
observed values of its column (0 where U has none), which every party holds, as it holds
U's mean and std for the z-scoring. The fill has a value for every column, so it depends on
U alone (not on which rows elsewhere have gaps); it travels with the models
(:class:`~fedlabels.data.preprocessing.Preprocessing`), so ``predict`` fills new rows alike,
and in ``shared.npz`` on Flower, so a site fills its own rows alike.
Flag the gaps first if they may mean something (a ``name_missing`` 0/1 column, as the
mlbench loader does): the fill alone hides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError

#: make_federation's policies for gaps: refuse them (the default), or fill them from U
MISSING = ("refuse", "public-median")


def check_missing(missing: object) -> str:
    """``missing`` if it is one of :data:`MISSING`, else a one-line error naming them."""
    if missing not in MISSING:
        raise FedLabelsError(f"missing must be one of {', '.join(map(repr, MISSING))}, got "
                             f"{missing!r}.")
    return str(missing)


def refuse_fill(features: str, dataset: str = "the data") -> None:
    """The error for ``missing="public-median"`` where the features are ``"text"`` or
    ``"images"``, which have no numeric column to take a median of."""
    why = ("a missing text is an empty cell, refused on its own: drop those rows"
           if features == "text" else "an image has every pixel, so there is no gap to fill")
    raise FedLabelsError(f"missing 'public-median' fills the gaps of numeric table columns "
                         f"with U's medians, but the features of {dataset} are {features} "
                         f"({why}): leave missing out.")


def check_fill_applies(dataset: str, text_column: str | None,
                       image_column: str | None) -> None:
    """Refuse ``missing="public-median"`` before any data loads where the settings make the
    features text or images (a registered text or image dataset is refused once loaded)."""
    if text_column is not None:
        refuse_fill("text", f"{dataset} with text_column {text_column!r}")
    if image_column is not None:
        refuse_fill("images", f"{dataset} with image_column {image_column!r}")
    if dataset.startswith("imagefolder:"):
        refuse_fill("images", dataset)


def public_medians(X_public: np.ndarray) -> np.ndarray:
    """Per column, the median of U's observed values (0 where U observed none)."""
    fill = np.zeros(X_public.shape[1])
    for c in range(X_public.shape[1]):
        seen = X_public[:, c][~np.isnan(X_public[:, c])]
        if len(seen):
            fill[c] = float(np.median(seen.astype(np.float64)))
    return fill


def gapped_columns(names: Sequence[str], *sets: np.ndarray) -> list[str]:
    """The names of the columns with a gap in any of ``sets`` (a statistic of their rows)."""
    gapped = np.zeros(len(names), dtype=bool)
    for a in sets:
        gapped |= np.isnan(a).any(axis=0)
    return [names[int(c)] for c in np.flatnonzero(gapped)]


def fill_gaps(a: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """``a`` with each NaN of a column that has a fill replaced by it (same dtype)."""
    gaps = np.isnan(a) & ~np.isnan(fill)
    if not gaps.any():
        return a
    return np.where(gaps, fill.astype(a.dtype), a)


def check_frame_gaps(frame: Any, categorical: Sequence[str], fills: bool, what: str = "X",
                     source: str | None = None) -> None:
    """A table's empty feature cells as one line, before its rows are read: gaps of a
    ``categorical`` column (one-hot encoded) always, as the fill takes numeric columns only
    and the encoding would read a gap as no category, silently; and, for a ``csv:`` table
    (``source``, its file), numeric gaps where the run fills none (``fills`` False). A CSV
    file's line names the file, the columns with gaps and how many, and the first gap's data
    row, with the fixes as flags; a Python table's (``what``) gives the pandas fix, and its
    numeric gaps are :func:`~fedlabels.data.federation.as_feature_matrix`'s finite check's,
    as an array's. The one check of both."""
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        return
    gaps = frame.isna()
    if not gaps.to_numpy().any():
        return
    numeric = source is not None and not fills
    cols = [c for c in frame.columns if gaps[c].any() and (c in categorical or numeric)]
    if not cols:
        return
    counts = {c: int(gaps[c].sum()) for c in cols}
    first = cols[0]
    if source is None:
        named = ", ".join(f"{c!r} ({n} row{'s' * (n > 1)})" for c, n in counts.items())
        fill = (".cat.add_categories('unknown').fillna('unknown')"
                if isinstance(frame[first].dtype, pd.CategoricalDtype) else ".fillna('unknown')")
        shown = str(first)
        raise FedLabelsError(
            f"{what} has missing values in categorical column(s) {named}, which --missing "
            "public-median does not fill (it fills numeric columns); give them a category of "
            f"their own in the table (pandas: {what}[{shown!r}] = {what}[{shown!r}]{fill}) "
            "or drop those rows.")
    row = int(np.flatnonzero(gaps[first].to_numpy())[0])
    named = ", ".join(f"{str(c)!r} ({n})" for c, n in list(counts.items())[:5]) + (
        " ..." if len(cols) > 5 else "")
    if first in categorical:
        fix = (f"write a category of its own (such as unknown) in the empty cells of column "
               f"{str(first)!r} or drop those rows: --missing public-median fills numeric "
               "columns only")
    else:
        fix = ("drop those rows, fill each gap after the split with the median of U's values "
               "of its column (--missing public-median; Python: missing=\"public-median\"), "
               "or write a constant in them beside a 0/1 column (such as "
               f"{first!s}_missing) that flags them; a median or "
               "mean of the whole table would carry the test rows' and the other clients' "
               "values into training")
    raise FedLabelsError(f"CSV file {source} has empty cells in column(s) {named} (the first "
                         f"in column {str(first)!r}, data row {row + 1}); {fix}.")
