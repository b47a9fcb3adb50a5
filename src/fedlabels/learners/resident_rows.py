"""A run's data kept on the device between rounds, for clients that train together.

Without it, every round copies FedCT's U, the clients' private rows and the test set from
host memory to the GPU again (on Fashion-MNIST at the paper's scale about 0.3 GB a round,
two thirds of a batched round's GPU time, measured on an H200). :class:`ResidentRows`
keeps the device tensor built from a tuple of arrays and returns it while the same arrays
come back.

Arrays are recognised by their memory (address, shape, strides, dtype), and the cache holds
a reference to them so that memory cannot be freed and reused while an entry lives. That is
only valid while nobody writes into the arrays between calls, so a cache belongs to one
simulated run (:class:`fedlabels.engines.together.TogetherGrid` owns one): a run trains and
predicts on its federation's arrays and never writes them. The public learners never
cache: their ``train_steps`` and ``predict_proba`` copy what they are given every call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import torch

#: at most this many bytes of device tensors are kept (least recently used dropped first)
DEFAULT_MAX_BYTES = 4 << 30


def memory_key(a: np.ndarray) -> tuple[object, ...]:
    """What identifies an array's rows: its memory's address and its layout."""
    return (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)


class ResidentRows:
    """Device tensors built from host arrays, kept while the same arrays are asked for."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[tuple[object, ...],
                                   tuple[tuple[np.ndarray, ...], torch.Tensor]] = OrderedDict()
        self.builds = 0  # tensors built (copies made); a hit builds nothing
        self.hits = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors kept now."""
        return sum(t.numel() * t.element_size() for _, t in self._entries.values())

    def get(self, arrays: Sequence[np.ndarray], device: torch.device | str,
            build: Callable[[], torch.Tensor],
            keys: Sequence[tuple[object, ...]] | None = None) -> torch.Tensor:
        """The tensor ``build()`` makes of ``arrays`` on ``device``: built on the first call,
        then the kept one while the same arrays (same memory) come back. A tensor larger than
        ``max_bytes`` is built and returned, not kept. ``keys``: the arrays' ``memory_key``
        where the caller has them."""
        if keys is None:
            keys = [memory_key(a) for a in arrays]
        key = (str(torch.device(device)), *keys)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]
        tensor = build()
        self.builds += 1
        size = tensor.numel() * tensor.element_size()
        if size <= self.max_bytes:
            self._entries[key] = (tuple(arrays), tensor)
            while self.nbytes > self.max_bytes:
                self._entries.popitem(last=False)
        return tensor

    def clear(self) -> None:
        """Drop every kept tensor (and the references to its arrays)."""
        self._entries.clear()
