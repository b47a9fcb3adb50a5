"""The table settings a federation was loaded with, in one canonical form, recorded in its
``info`` (``loaded_with``) so that a run on a :class:`~fedlabels.data.Federation` and the
same run by dataset name read as one configuration (``fl.report``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedlabels.data.targets import TargetRangeLike

#: the settings recorded, named as the run parameters
LOADED_KEYS = ("sep", "features", "drop", "text_column", "task", "target_range", "public",
               "image_size", "image_column", "classes", "image_mode", "image_peak")


def loaded_with(dataset: str, *, sep: str | None, features: str | Sequence[str] | None,
                drop: str | Sequence[str] | None, text_column: str | None, task: str,
                target_range: TargetRangeLike, public: str | os.PathLike[str] | None,
                image_size: str | None, image_column: str | None,
                classes: str | Sequence[str] | None = None, image_mode: str | None = None,
                image_peak: float | None = None) -> dict[str, Any]:
    """The settings as one value each: a ``csv:`` table's separator (``,`` when not given;
    ``None`` for other datasets), ``features`` and ``drop`` as lists (``'a,b'`` and
    ``['a', 'b']`` alike; the loader, once it has read the table, records instead the
    columns they keep, in one form: :func:`fedlabels.data.columns.chosen_columns`), the
    task resolved (the dataset's own when not given), ``target_range`` as ``[lo, hi]``,
    ``public`` as an absolute path, ``image_size`` as ``HxW`` and the declared
    ``classes`` as a sorted list, ``image_mode`` as ``grey`` or ``rgb`` and ``image_peak``
    as a float; ``text_column`` and ``image_column`` as given."""
    from fedlabels.data.classes import parse_classes
    from fedlabels.data.columns import parse_columns
    from fedlabels.data.csv_table import normalise_sep
    from fedlabels.data.images import parse_mode, parse_peak, parse_size
    from fedlabels.data.targets import parse_target_range

    keep, remove = parse_columns(features, "--features"), parse_columns(drop, "--drop")
    size = parse_size(image_size)
    bounds = parse_target_range(target_range)
    return {"sep": (normalise_sep(sep) or ",") if dataset.startswith("csv:") else None,
            "features": keep, "drop": None if remove is None else sorted(remove),
            "text_column": text_column, "task": task,
            "target_range": None if bounds is None else [float(b) for b in bounds],
            "public": None if public is None else str(Path(public).expanduser().resolve()),
            "image_size": None if size is None else f"{size[0]}x{size[1]}",
            "image_column": image_column, "classes": parse_classes(classes),
            "image_mode": {"L": "grey", "RGB": "rgb", None: None}[parse_mode(image_mode)],
            "image_peak": parse_peak(image_peak)}
