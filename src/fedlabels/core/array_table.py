"""Arrays to be written to an ``.npz`` by name (``a0``, ``a1``, ...), each distinct array
once: an array equal in dtype, shape and bytes to one already held is named by its index
(FedAvg's clients end a round on the same global weights). Used by the checkpoint and the
models file; their readers build a fresh array for every reference. Each array held keeps
the SHA-256 of its bytes (:func:`array_digest`), which the checkpoint's HMAC covers."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def raw_bytes(array: np.ndarray) -> bytes | memoryview:
    """A C-contiguous array's bytes for hashing, without copying them where its dtype
    allows (checkpoint arrays are tens of MB; the digest is the same either way)."""
    try:
        return memoryview(array).cast("B")  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a dtype the buffer protocol cannot export
        return array.tobytes()


def array_digest(array: np.ndarray) -> bytes:
    """SHA-256 of an array's bytes in C order (its dtype and shape not included)."""
    return hashlib.sha256(_bytes_of(array)).digest()


class ArrayTable:
    """``arrays`` (filled in place), each distinct array stored once; ``digests`` the
    :func:`array_digest` of each array added, by name (computed once, for both uses)."""

    def __init__(self, arrays: dict[str, np.ndarray] | None = None) -> None:
        self.arrays: dict[str, np.ndarray] = {} if arrays is None else arrays
        self.digests: dict[str, bytes] = {}
        self._seen: dict[tuple[str, tuple[int, ...], bytes], int] = {}

    def add(self, value: np.ndarray) -> int:
        """The index of ``value`` (named ``a{index}``): a new one, or that of an equal array
        already held (compared byte for byte after the digest; object arrays never)."""
        raw = _bytes_of(value)
        digest = hashlib.sha256(raw).digest()
        key = (value.dtype.str, value.shape, digest)
        index = self._seen.get(key)
        if index is not None and not value.dtype.hasobject \
                and _bytes_of(self.arrays[f"a{index}"]) == raw:
            return index
        index = len(self.arrays)
        self.arrays[f"a{index}"] = value
        self.digests[f"a{index}"] = digest
        self._seen.setdefault(key, index)
        return index


def _bytes_of(value: Any) -> bytes | memoryview:
    return raw_bytes(np.ascontiguousarray(value))
