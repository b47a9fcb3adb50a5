"""Bit-packing of hard labels: ceil(log2 C) bits per label, as FedCT sends them."""

from __future__ import annotations

import math

import numpy as np

from fedlabels.core.errors import LearnerOutputError


def bits_per_label(n_classes: int) -> int:
    """Number of bits needed to encode one label out of ``n_classes`` (at least 1)."""
    if n_classes < 1:
        raise ValueError(f"n_classes must be >= 1, got {n_classes}")
    return max(1, math.ceil(math.log2(n_classes)))


def packed_size(n_labels: int, n_classes: int) -> int:
    """Bytes of :func:`pack_labels` for ``n_labels`` labels of ``n_classes`` classes."""
    return -(-n_labels * bits_per_label(n_classes) // 8)


def pack_labels(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """Pack integer labels in ``[0, n_classes)`` into a uint8 array of ceil(n*bits/8) bytes."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError("labels must be one-dimensional")
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise LearnerOutputError(f"labels must lie in [0, {n_classes}); got range "
                         f"[{labels.min()}, {labels.max()}]")
    bits = bits_per_label(n_classes)
    shifts = np.arange(bits - 1, -1, -1, dtype=np.uint32)
    bit_matrix = (labels.astype(np.uint32)[:, None] >> shifts) & 1
    return np.packbits(bit_matrix.astype(np.uint8).ravel())


def unpack_labels(packed: np.ndarray, n_labels: int, n_classes: int) -> np.ndarray:
    """Inverse of :func:`pack_labels`; returns int64 labels."""
    bits = bits_per_label(n_classes)
    flat = np.unpackbits(np.asarray(packed, dtype=np.uint8), count=n_labels * bits)
    weights = (1 << np.arange(bits - 1, -1, -1)).astype(np.int64)
    return flat.reshape(n_labels, bits).astype(np.int64) @ weights


def pack_mask(mask: np.ndarray) -> np.ndarray:
    """Pack a boolean mask into bits (1 bit per entry)."""
    return np.packbits(np.asarray(mask, dtype=bool))


def unpack_mask(packed: np.ndarray, n: int) -> np.ndarray:
    """Inverse of :func:`pack_mask`."""
    return np.unpackbits(np.asarray(packed, dtype=np.uint8), count=n).astype(bool)
