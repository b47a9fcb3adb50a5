"""Differential privacy for fedlabels: mechanisms, events, accountants, sensitivity, bounds.

Mechanisms and accountants live apart from the algorithms (dp-accounting style): protocols
record :mod:`~fedlabels.privacy.events` and :mod:`~fedlabels.privacy.accounting` turns them
into (ε, δ). dp-accounting is imported lazily (the ``dp`` extra).
"""

from fedlabels.privacy.events import (
    CLIENT_LEVEL,
    RECORD_LEVEL,
    KaryRREvent,
    SampledGaussianEvent,
    Sensitivity,
    XorEvent,
)
from fedlabels.privacy.mechanisms import (
    bit_count_consensus,
    flip_probability,
    kary_keep_probability,
    kary_release,
    one_hot,
    pack_rows,
    unpack_rows,
    xor_epsilon,
    xor_release,
)

__all__ = [
    "CLIENT_LEVEL",
    "RECORD_LEVEL",
    "KaryRREvent",
    "SampledGaussianEvent",
    "Sensitivity",
    "XorEvent",
    "bit_count_consensus",
    "flip_probability",
    "kary_keep_probability",
    "kary_release",
    "one_hot",
    "pack_rows",
    "unpack_rows",
    "xor_epsilon",
    "xor_release",
]
