"""The features' names of image rows, made when read: a (C, H, W) shape, not a string per
pixel (3 x 3000 x 3000 images have 27 million features, whose names as a list took 1.7 GB).

:class:`PixelNames` is a sequence equal to the list it stands for (``row3_col5`` for grey
images, ``ch1_row3_col5`` for colour, channels first); a models file stores its shape
(:func:`names_record`, :func:`names_of_record`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, overload

from fedlabels.core.errors import FedLabelsError


class PixelNames(Sequence[str]):
    """The names of the pixels of (C, H, W) images, channels first, each made when read."""

    __slots__ = ("shape",)

    def __init__(self, shape: Sequence[int]) -> None:
        c, h, w = (int(s) for s in shape)
        if min(c, h, w) < 1:
            raise FedLabelsError(f"pixel names need a positive (C, H, W), got {tuple(shape)}.")
        self.shape = (c, h, w)

    def __len__(self) -> int:
        c, h, w = self.shape
        return c * h * w

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._name(i) for i in range(*index.indices(len(self)))]
        i = int(index) + (len(self) if int(index) < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"pixel {index} of {len(self)}")
        return self._name(i)

    def _name(self, i: int) -> str:
        c, h, w = self.shape
        k, cell = divmod(i, h * w)
        y, x = divmod(cell, w)
        return f"row{y}_col{x}" if c == 1 else f"ch{k}_row{y}_col{x}"

    def __iter__(self) -> Iterator[str]:
        c, h, w = self.shape
        for k in range(c):
            head = "" if c == 1 else f"ch{k}_"
            for y in range(h):
                for x in range(w):
                    yield f"{head}row{y}_col{x}"

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._index(name) is not None

    def index(self, name: Any, start: int = 0, stop: int | None = None) -> int:
        i = self._index(name) if isinstance(name, str) else None
        if i is None or not start <= i < (len(self) if stop is None else stop):
            raise ValueError(f"{name!r} is not a pixel name")
        return i

    def _index(self, name: str) -> int | None:
        c, h, w = self.shape
        k, cell = 0, name
        if c > 1:
            head, _, cell = name.partition("_")
            if not head.startswith("ch") or not head[2:].isdigit():
                return None
            k = int(head[2:])
        row, _, col = cell.partition("_")
        if not (row.startswith("row") and col.startswith("col") and row[3:].isdigit()
                and col[3:].isdigit()):
            return None
        y, x = int(row[3:]), int(col[3:])
        if not (k < c and y < h and x < w) or self._name((k * h + y) * w + x) != name:
            return None
        return (k * h + y) * w + x

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PixelNames):
            return self.shape == other.shape
        if isinstance(other, list | tuple):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other,
                                                                          strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(("PixelNames", self.shape))

    def __repr__(self) -> str:
        c, h, w = self.shape
        return f"PixelNames(({c}, {h}, {w}): {', '.join(self[:2])}, ..., {self[-1]})"


def names_copy(names: Sequence[str]) -> Sequence[str]:
    """``names`` as a list of their own, or the :class:`PixelNames` (nothing to copy)."""
    return names if isinstance(names, PixelNames) else list(names)


def names_record(names: Sequence[str]) -> list[str] | dict[str, list[int]]:
    """Feature names as a file records them: a list, or pixel names' ``{"pixels": [C, H,
    W]}``."""
    if isinstance(names, PixelNames):
        return {"pixels": list(names.shape)}
    return list(names)


def names_of_record(record: Any) -> Sequence[str]:
    """:func:`names_record`'s names; a malformed pixels record is a one-line error."""
    if isinstance(record, dict):
        shape = record.get("pixels")
        if set(record) != {"pixels"} or not isinstance(shape, list) or len(shape) != 3 or \
                not all(isinstance(s, int) and not isinstance(s, bool) and s > 0
                        for s in shape):
            raise FedLabelsError(f"feature names {record!r} are neither names nor "
                                 "{'pixels': [C, H, W]}.")
        return PixelNames(shape)
    return list(record)


def json_names(names: Sequence[str]) -> Iterator[str]:
    """``json.dumps(list(names))`` in pieces (its default separators), without the list."""
    if not isinstance(names, PixelNames):
        yield json.dumps(list(names))
        return
    yield "["
    chunk: list[str] = []
    first = True
    for name in names:
        chunk.append(json.dumps(name))
        if len(chunk) == 4096:
            yield ("" if first else ", ") + ", ".join(chunk)
            chunk, first = [], False
    if chunk:
        yield ("" if first else ", ") + ", ".join(chunk)
    yield "]"
