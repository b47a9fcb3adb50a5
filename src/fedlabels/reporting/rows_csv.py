"""A table of rows (dicts) as CSV text, as ``pandas.DataFrame(rows).to_csv(index=False)``
writes it, without pandas: ``fedlabels report``'s summary table (importing pandas took
0.35 s of a report's 1.3 s).

The columns are the rows' keys in the order they first appear; a missing key, ``None`` and
NaN are empty cells. A column's cells are written as pandas writes the column's dtype:
booleans only (no empty cell) as ``True``/``False``; integers only as integers; numbers (an
integer among floats, or with an empty cell) as floats (``3.0``, shortest repr); any other
mix as ``str`` of each value.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

_MISSING = object()


def rows_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` as CSV text (see the module docstring), lines ending in ``\\n``."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [_cells([row.get(name, _MISSING) for row in rows]) for name in columns]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(zip(*cells, strict=True))
    return out.getvalue()


def _empty(value: Any) -> bool:
    return value is None or value is _MISSING or (
        isinstance(value, float | np.floating) and math.isnan(value))


def _cells(values: list[Any]) -> list[str]:
    """One column's cells, as pandas writes the dtype it infers for ``values``."""
    given = [v for v in values if not _empty(v)]
    whole = len(given) == len(values)
    if given and all(isinstance(v, bool | np.bool_) for v in given):
        if whole:
            return [str(bool(v)) for v in values]
    elif given and all(_integer(v) for v in given):
        if whole:
            return [str(int(v)) for v in values]
        return ["" if _empty(v) else repr(float(v)) for v in values]
    elif given and all(_integer(v) or isinstance(v, float | np.floating) for v in given):
        return ["" if _empty(v) else repr(float(v)) for v in values]
    return ["" if _empty(v) else str(v) for v in values]


def _integer(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


__all__ = ["rows_csv"]
