"""A feature matrix whose rows convert when read (:class:`LazyRows`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError


class LazyRows:
    """A feature matrix stored compactly (e.g. uint8 pixels) whose rows convert when read.

    ``X[key]`` returns ``convert(source[key])``, a new array; ``np.asarray(X)`` converts all
    of it. :func:`make_federation` reads only the rows it puts into the federation, so a
    dataset whose runs use a third of it (Fashion-MNIST: 60,000 training images, of which
    U and the clients take 20,000 by default) is never held as one float matrix.
    ``convert`` must work element by element, so that any row gives the same values
    whichever block it is read in. ``table``: the rows' other columns where they came from a
    table (a ``csv:`` table's images: its sites for a ``column:NAME`` partition), never
    features. ``names``: the features' names (``x0``, ``x1``, ... without).
    """

    ndim = 2

    def __init__(self, source: np.ndarray, convert: Callable[[np.ndarray], np.ndarray],
                 dtype: Any = np.float32, table: Any = None,
                 names: Sequence[str] | None = None) -> None:
        if source.ndim != 2:
            raise FedLabelsError(f"LazyRows needs a 2-D source, got shape {source.shape}.")
        if names is not None and len(names) != source.shape[1]:
            raise FedLabelsError(f"LazyRows has {source.shape[1]} columns, {len(names)} names.")
        self.source = source
        self.table = table
        self.names = names
        self.convert = convert
        self.dtype = np.dtype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape)

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: Any) -> np.ndarray:
        return np.asarray(self.convert(self.source[key]), dtype=self.dtype)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)
