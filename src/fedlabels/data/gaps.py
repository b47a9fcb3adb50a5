"""Feature gaps filled after the split with U's medians (``missing="public-median"``).

A table is encoded before it is split into the test set, U and the clients' rows, so a fill
fitted on the whole table (a column median) would carry the test rows' and every client's
values into the rows of the others. Here each gap (NaN) is filled with the median of U's
observed values of its column (0 where U has none), which every party holds, as it holds
U's mean and std for the z-scoring; the fill travels with the models
(:class:`~fedlabels.data.preprocessing.Preprocessing`), so ``predict`` fills new rows alike.
Flag the gaps first if they may mean something (a ``name_missing`` 0/1 column, as the
mlbench loader does): the fill alone hides them.
"""

from __future__ import annotations

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


def public_medians(X_public: np.ndarray, *others: np.ndarray) -> np.ndarray | None:
    """Per column, the median of U's observed values where U or any of ``others`` has a gap
    (0 where U observed none), NaN where no set has one; None: no gap anywhere."""
    sets = (X_public, *others)
    if any(a.ndim != 2 for a in sets):  # text: no numeric gaps
        return None
    gapped = np.zeros(X_public.shape[1], dtype=bool)
    for a in sets:
        gapped |= np.isnan(a).any(axis=0)
    if not gapped.any():
        return None
    fill = np.full(X_public.shape[1], np.nan)
    for c in np.flatnonzero(gapped):
        seen = X_public[:, c][~np.isnan(X_public[:, c])]
        fill[c] = float(np.median(seen.astype(np.float64))) if len(seen) else 0.0
    return fill


def fill_gaps(a: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """``a`` with each NaN of a column that has a fill replaced by it (same dtype)."""
    gaps = np.isnan(a) & ~np.isnan(fill)
    if not gaps.any():
        return a
    return np.where(gaps, fill.astype(a.dtype), a)
