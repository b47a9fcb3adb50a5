"""Checks of privacy parameters, each failing with a :class:`FedLabelsError` that says what
is wrong, the value given and how to fix it."""

from __future__ import annotations

import math
from typing import Any

from fedlabels.core.errors import FedLabelsError


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """ε must be a finite number > 0."""
    if not _is_number(epsilon) or not math.isfinite(epsilon) or epsilon <= 0:
        raise FedLabelsError(f"{name} must be a finite number > 0, got {epsilon!r}. Smaller ε "
                             "means more privacy; e.g. --epsilon 1.0.")
    return float(epsilon)


def check_delta(delta: Any, name: str = "delta") -> float:
    """δ must lie strictly between 0 and 1."""
    if not _is_number(delta) or not 0.0 < delta < 1.0:
        raise FedLabelsError(f"{name} must lie in the open interval (0, 1), got {delta!r}; "
                             "a common choice is 1e-5 (well below 1/number of records).")
    return float(delta)


def check_sensitivity_bits(bits: Any, n_unlabeled: int) -> int:
    """s* (bits of the one-hot matrix) must be an integer in [1, 2|U|]."""
    worst = 2 * int(n_unlabeled)
    if not _is_number(bits) or not math.isfinite(bits) or bits <= 0:
        raise FedLabelsError(f"sensitivity s* must be > 0 bits, got {bits!r}. Use "
                             "--sensitivity empirical|prop2|worst or a positive number of bits.")
    if bits > worst:
        raise FedLabelsError(f"sensitivity s* = {bits!r} bits exceeds the worst case 2|U| = "
                             f"{worst} (|U| = {n_unlabeled}; one changed label flips 2 bits of "
                             "its one-hot row). Use at most 2|U| (--sensitivity worst).")
    return math.ceil(bits)


def check_stability_rate(rate: Any) -> float:
    """The on-average-replace-one stability rate ε(n) must lie in (0, 1)."""
    if not _is_number(rate) or not 0.0 < rate < 1.0:
        raise FedLabelsError(f"stability rate ε(n) must lie in the open interval (0, 1) (an "
                             f"expected change of the 0-1 loss), got {rate!r}.")
    return float(rate)


def check_sampling_rate(rate: Any) -> float:
    """The Poisson client-sampling rate q must lie in (0, 1]."""
    if not _is_number(rate) or not 0.0 < rate <= 1.0:
        raise FedLabelsError(f"client sampling rate q must lie in (0, 1], got {rate!r}.")
    return float(rate)


def check_noise_multiplier(sigma: Any) -> float:
    """The noise multiplier σ must be a finite number > 0."""
    if not _is_number(sigma) or not math.isfinite(sigma) or sigma <= 0:
        raise FedLabelsError(f"noise multiplier σ must be a finite number > 0, got {sigma!r}; "
                             "or give --epsilon (and --delta) to calibrate it.")
    return float(sigma)
