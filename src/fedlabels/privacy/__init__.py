"""Differential privacy for fedlabels: mechanisms, events, accountants, sensitivity.

Mechanisms and accountants live apart from the algorithms (dp-accounting style): protocols
record :mod:`~fedlabels.privacy.events` and :mod:`~fedlabels.privacy.accounting` (label
mechanisms, DP-FedAvg) or :mod:`~fedlabels.privacy.vote_accounting` (GNMax, Laplace
noisy-max) turns them into (ε, δ). Mechanisms: :mod:`~fedlabels.privacy.mechanisms` (XOR,
k-ary RR), :mod:`~fedlabels.privacy.gnmax` (PATE's GNMax), :mod:`~fedlabels.privacy.noisy_max`
(LNMax), :mod:`~fedlabels.privacy.discrete_gaussian` (DP-FedAvg's discrete Gaussian on a
fixed-point sum, accounted by :mod:`~fedlabels.privacy.discrete_accounting`; a sum of
clients' discrete Gaussian shares under secure aggregation by
:mod:`~fedlabels.privacy.distributed_discrete`). dp-accounting
is imported lazily (the ``dp`` extra). The convergence bound (Prop. 1) is not a privacy
result: :mod:`fedlabels.analysis.convergence`.
"""

from fedlabels.privacy.events import (
    CLIENT_LEVEL,
    DISJOINT_TEACHERS,
    RECORD_LEVEL,
    DiscreteGaussianEvent,
    DistributedDiscreteGaussianEvent,
    GNMaxEvent,
    KaryRREvent,
    LaplaceNoisyMaxEvent,
    SampledGaussianEvent,
    Sensitivity,
    XorEvent,
)
from fedlabels.privacy.gnmax import gnmax_aggregate, gnmax_event
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
from fedlabels.privacy.noisy_max import laplace_noisy_max, laplace_scale
from fedlabels.privacy.vote_accounting import account_gnmax, account_laplace

__all__ = [
    "CLIENT_LEVEL",
    "DISJOINT_TEACHERS",
    "RECORD_LEVEL",
    "DiscreteGaussianEvent",
    "DistributedDiscreteGaussianEvent",
    "GNMaxEvent",
    "KaryRREvent",
    "LaplaceNoisyMaxEvent",
    "SampledGaussianEvent",
    "Sensitivity",
    "XorEvent",
    "account_gnmax",
    "account_laplace",
    "bit_count_consensus",
    "flip_probability",
    "gnmax_aggregate",
    "gnmax_event",
    "kary_keep_probability",
    "kary_release",
    "laplace_noisy_max",
    "laplace_scale",
    "one_hot",
    "pack_rows",
    "unpack_rows",
    "xor_epsilon",
    "xor_release",
]
