"""How a class is shown to a person: its label, with the dataset's description beside it.

A dataset whose labels are codes (Fashion-MNIST's ``0``-``9``, Breast Cancer's ``0``/``1``)
keeps them as its labels: ``predict`` returns them and every file stores them. Where a person
reads a class (a report's confusion matrix, a warning, ``fedlabels inspect``) it is shown as
``8 (Bag)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def shown_class(label: str, description: str | None) -> str:
    """``label`` with its description in brackets, or ``label`` alone where it has none."""
    if not description or description == label:
        return label
    return f"{label} ({description})"


def shown_class_names(class_names: Sequence[str],
                      descriptions: Sequence[str] | None = None) -> list[str]:
    """Each class as shown (see :func:`shown_class`); ``descriptions`` align with
    ``class_names`` and are ignored where their number differs."""
    names = [str(c) for c in class_names]
    if not descriptions or len(descriptions) != len(names):
        return names
    return [shown_class(n, str(d)) for n, d in zip(names, descriptions, strict=True)]


def shown_names_of(summary: Mapping[str, Any]) -> list[str]:
    """The shown class names of a federation's summary (a result's ``federation`` entry, or
    a models file's payload): its ``class_names`` and ``class_descriptions``."""
    return shown_class_names(summary.get("class_names") or [],
                             summary.get("class_descriptions"))
