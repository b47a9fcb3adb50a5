"""The declarations carried in a dataclass's field metadata, read once per class.

Run parameters (:func:`fedlabels.runs.spec.param`) and method options
(:func:`fedlabels.method.options.option`) store a frozen info object in each field's
metadata; validation, flags and docs ask for them at every run, so they are read once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# (class, metadata key) -> the infos, each with its field's name; a class's fields are
# fixed once it exists
_FOUND: dict[tuple[type, str], tuple[Any, ...]] = {}


def field_infos(cls: type, key: str, declared_with: str) -> tuple[Any, ...]:
    """The ``key`` metadata of every field of the dataclass ``cls``, in field order, each
    with ``name`` set to its field's; a field without it is a ``TypeError`` naming
    ``declared_with`` (e.g. ``option()``)."""
    found = _FOUND.get((cls, key))
    if found is None:
        infos = []
        for f in dataclasses.fields(cls):
            info = f.metadata.get(key)
            if info is None:
                raise TypeError(f"{cls.__name__}.{f.name} is not declared with {declared_with}")
            infos.append(dataclasses.replace(info, name=f.name))
        found = _FOUND[(cls, key)] = tuple(infos)
    return found
