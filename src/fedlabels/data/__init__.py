"""Federations, partitioners and the dataset registry."""

from fedlabels.data.federation import ClientData, Federation, make_federation
from fedlabels.data.loading import load_federation
from fedlabels.data.partition import parse_partition, partition
from fedlabels.data.registry import REGISTRY, DatasetInfo, fetch_dataset, get_dataset

__all__ = [
    "REGISTRY",
    "ClientData",
    "DatasetInfo",
    "Federation",
    "fetch_dataset",
    "get_dataset",
    "load_federation",
    "make_federation",
    "parse_partition",
    "partition",
]
