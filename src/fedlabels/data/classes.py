"""The class list of a classification federation: declared, or the classes its clients hold.

Every party receives the class list (``class_names``), so it is task metadata, not a
statistic of the test set or of U's hidden labels. It is *declared* where it can be: the
``classes`` a run names (``--classes a,b,c``), a pandas ``Categorical`` label's categories
(an mlbench table's R factor levels), or a registered dataset's documented classes
(scikit-learn's ``target_names``, Fashion-MNIST's ten). Otherwise it is the classes the
clients' rows hold, which the sites would declare to one another: a class that only the
test set or U holds is a one-line error naming it and the fix, never a class of its own.
Either way the classes are in sorted order (numbers in numeric order), as scikit-learn's
``LabelEncoder`` orders them, so declaring the classes a table holds changes no code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError


def parse_classes(value: str | Sequence[Any] | None) -> list[str] | None:
    """A class list from ``"a,b,c"`` or a sequence of labels, as text, each once and in
    sorted order (numbers in numeric order); ``None`` stays ``None``."""
    if value is None:
        return None
    names = [c.strip() for c in value.split(",")] if isinstance(value, str) \
        else [_as_text(c) for c in value]
    if any(not n for n in names):
        raise FedLabelsError(f"classes needs comma-separated class labels, got {value!r}.")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FedLabelsError(f"classes names {', '.join(map(repr, twice))} more than once; "
                             "name each class once.")
    if len(names) < 2:
        raise FedLabelsError(f"classes declares {len(names)} class; classification needs at "
                             "least two.")
    return sorted_classes(names)


def _as_text(label: Any) -> str:
    """A label as ``encode_labels`` writes it: ``1.0`` and ``np.int64(1)`` as ``1``."""
    if isinstance(label, float | np.floating) and float(label).is_integer():
        return str(int(label))
    return str(label.item() if isinstance(label, np.generic) else label).strip()


def sorted_classes(names: Sequence[str]) -> list[str]:
    """``names`` in numeric order where every one is an integer, else in text order."""
    try:
        return [str(n) for n in sorted(names, key=int)]
    except ValueError:
        return sorted(names)


def declared_classes(y: Any, classes: str | Sequence[Any] | None) -> list[str] | None:
    """The declared class list: ``classes``, else a pandas ``Categorical`` label's
    categories; ``None``: none declared."""
    if classes is not None:
        return parse_classes(classes)
    import sys

    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(y, pd.Series) and isinstance(y.dtype,
                                                                  pd.CategoricalDtype):
        return sorted_classes([_as_text(c) for c in y.cat.categories])
    return None


def as_declared(codes: np.ndarray, found: list[str], declared: list[str]
                ) -> np.ndarray:
    """Codes into ``found`` (the labels' own classes) as codes into ``declared``; a label
    the declaration lacks is a one-line error naming it."""
    index = {c: i for i, c in enumerate(declared)}
    unknown = [c for c in found if c not in index]
    if unknown:
        shown = ", ".join(map(repr, unknown[:5])) + (" ..." if len(unknown) > 5 else "")
        raise FedLabelsError(f"y has label(s) {shown} that the declared classes "
                             f"({', '.join(declared)}) lack; add them to classes "
                             "(--classes) or drop those rows.")
    return np.asarray([index[c] for c in found], dtype=np.int64)[codes]


def check_clients_hold(class_names: list[str], client_codes: np.ndarray) -> None:
    """Without a declared class list, every class must be one the clients' rows hold: a
    class that only the test set or U holds would be named to every party from rows that
    are not the clients' (and no client could learn it)."""
    held = set(np.unique(client_codes).tolist())
    only = [c for k, c in enumerate(class_names) if k not in held]
    if not only:
        return
    shown = ", ".join(map(repr, only[:5])) + (" ..." if len(only) > 5 else "")
    every = ",".join(class_names) if len(class_names) <= 10 else "A,B,... (every class)"
    raise FedLabelsError(f"class(es) {shown} occur in no client's rows, only in the test "
                         "set or U; the class list is the classes the clients hold unless "
                         f"declared: declare it (--classes {every}; Python: classes=[...]) "
                         "to keep them, give the clients more rows (--private), or drop "
                         "those rows.")
