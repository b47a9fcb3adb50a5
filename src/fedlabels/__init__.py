"""fedlabels: federated learning that shares labels, not models.

The layers: :mod:`fedlabels.data` (federations, partitioners, datasets),
:mod:`fedlabels.learners`, :mod:`fedlabels.protocols` (one module per method),
:mod:`fedlabels.consensus`, :mod:`fedlabels.comm` (messages, wire format),
:mod:`fedlabels.engines` (in-process simulator) and :mod:`fedlabels.cli`.
"""

from fedlabels.api import run, run_config
from fedlabels.config import RunConfig, load_config
from fedlabels.data import ClientData, Federation, load_federation, make_federation
from fedlabels.errors import DatasetNotFetchedError, FedLabelsError
from fedlabels.interpret import inspect_models
from fedlabels.results import RunResult

__version__ = "0.1.0"

__all__ = [
    "ClientData",
    "DatasetNotFetchedError",
    "FedLabelsError",
    "Federation",
    "RunConfig",
    "RunResult",
    "inspect_models",
    "load_config",
    "load_federation",
    "make_federation",
    "run",
    "run_config",
]
