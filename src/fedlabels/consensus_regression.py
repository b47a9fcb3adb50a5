"""Consensus of real-valued predictions (FedCT for regression), and their b-bit wire format.

A regression federation maps its target to the unit interval with a *declared* range
``[lo, hi]`` (public metadata of the dataset, see :mod:`fedlabels.data.federation`), so every
prediction a client shares is a number in ``[0, 1]``. It travels quantised to ``b`` bits:

* :func:`quantise` clips to ``[0, 1]`` and rounds to one of the ``2**b`` levels
  ``k / (2**b - 1)``; :func:`dequantise` maps a level back. The round trip moves an in-range
  value by at most half a step, ``0.5 / (2**b - 1)``.
* :func:`pack_levels` / :func:`unpack_levels` bit-pack the levels with the label packer of
  :mod:`fedlabels.comm.labels` (``2**b`` "classes" take exactly ``b`` bits).

The server's consensus on each public example is the coordinate-wise :func:`median` of the
clients' predictions, or their :func:`trimmed_mean` (drop the ``trim`` fraction of the
largest and of the smallest values, average the rest). Both ignore up to (almost) half /
a ``trim`` fraction of arbitrary values per example, which is what makes them the regression
counterpart of a majority vote.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedlabels.comm.labels import pack_labels, unpack_labels
from fedlabels.core.errors import FedLabelsError

MAX_BITS = 16
AGGREGATES = ("median", "trimmed-mean")

Aggregate = Callable[[np.ndarray], np.ndarray]


def _levels(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) \
            or not 1 <= bits <= MAX_BITS:
        raise FedLabelsError(f"bits must be an integer in 1..{MAX_BITS}, got {bits!r}.")
    return (1 << int(bits)) - 1


def quantise(values: np.ndarray, bits: int) -> np.ndarray:
    """Unit-interval values -> integer levels ``0..2**b - 1`` (clipped, rounded to nearest)."""
    top = _levels(bits)
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all():
        raise FedLabelsError("cannot quantise non-finite predictions; the model produced "
                             "NaN or inf.")
    return np.rint(np.clip(v, 0.0, 1.0) * top).astype(np.int64)


def dequantise(levels: np.ndarray, bits: int) -> np.ndarray:
    """Integer levels -> their unit-interval values ``k / (2**b - 1)``."""
    return np.asarray(levels, dtype=np.float64) / _levels(bits)


def pack_levels(levels: np.ndarray, bits: int) -> np.ndarray:
    """Bit-pack levels at exactly ``bits`` bits each."""
    return pack_labels(np.asarray(levels), _levels(bits) + 1)


def unpack_levels(packed: np.ndarray, n: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_levels`."""
    return unpack_labels(packed, n, _levels(bits) + 1)


def median(values: np.ndarray) -> np.ndarray:
    """Coordinate-wise median of an ``(m, n)`` matrix of predictions (over the m clients)."""
    return np.median(np.asarray(values, dtype=np.float64), axis=0)


def trimmed_mean(values: np.ndarray, trim: float) -> np.ndarray:
    """Coordinate-wise mean after dropping ``floor(trim * m)`` largest and smallest values.

    As :func:`scipy.stats.trim_mean`; ``trim`` in ``[0, 0.5)``.
    """
    if not 0.0 <= trim < 0.5:
        raise FedLabelsError(f"trim must lie in [0, 0.5), got {trim!r}.")
    v = np.sort(np.asarray(values, dtype=np.float64), axis=0)
    cut = int(np.floor(trim * len(v)))
    return v[cut : len(v) - cut].mean(axis=0)


def aggregate_function(name: str, trim: float = 0.2) -> Aggregate:
    """The consensus named ``name`` (``median`` or ``trimmed-mean``)."""
    if name == "median":
        return median
    if name == "trimmed-mean":
        return lambda values: trimmed_mean(values, trim)
    raise FedLabelsError(f"unknown regression consensus {name!r}; use one of "
                         f"{', '.join(AGGREGATES)}.")
