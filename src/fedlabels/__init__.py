"""fedlabels: federated learning that shares labels, not models.

The layers, top to bottom, are drawn in ``docs/architecture.md``: the CLI and this API;
audit, reporting and deployment; the engines; a run (:mod:`fedlabels.runs`); the methods
(:mod:`fedlabels.methods`) and their plug-in interface (:mod:`fedlabels.method`); results;
data, learners, privacy, secure computation and messages; downloads; small leaves
(:mod:`fedlabels.core`).

The public names below are imported on first use, so ``import fedlabels`` (and
``fedlabels --help``) stays fast: scikit-learn, scipy, pandas and torch load only when a run,
a dataset or a model needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from fedlabels.core.version import __version__ as __version__

_LAZY = {
    "ClientData": "fedlabels.data",
    "DatasetNotFetchedError": "fedlabels.core.errors",
    "FedLabelsError": "fedlabels.core.errors",
    "FedLabelsWarning": "fedlabels.core.errors",
    "Federation": "fedlabels.data",
    "RunCaveatWarning": "fedlabels.core.errors",
    "RunConfig": "fedlabels.runs.config",
    "RunResult": "fedlabels.results",
    "TorchModel": "fedlabels.learners.torch_net",
    "inspect_models": "fedlabels.reporting.inspect",
    "load_config": "fedlabels.runs.config",
    "load_federation": "fedlabels.data",
    "load_run": "fedlabels.api",
    "make_federation": "fedlabels.data",
    "plot": "fedlabels.api",
    "privacy_plan": "fedlabels.api",
    "report": "fedlabels.api",
    "resume": "fedlabels.api",
    "run": "fedlabels.api",
    "run_config": "fedlabels.api",
}

if TYPE_CHECKING:
    from fedlabels.api import load_run, plot, privacy_plan, report, resume, run, run_config
    from fedlabels.core.errors import (
        DatasetNotFetchedError,
        FedLabelsError,
        FedLabelsWarning,
        RunCaveatWarning,
    )
    from fedlabels.data import ClientData, Federation, load_federation, make_federation
    from fedlabels.learners.torch_net import TorchModel
    from fedlabels.reporting.inspect import inspect_models
    from fedlabels.results import RunResult
    from fedlabels.runs.config import RunConfig, load_config


if not TYPE_CHECKING:  # a checker sees the imports above: ``fl.rnu(...)`` is its error, not Any

    def __getattr__(name: str) -> Any:
        """Import a public name, or a subpackage (``fedlabels.data``), on first access (PEP
        562)."""
        module = _LAZY.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
        elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            value = importlib.import_module(f"{__name__}.{name}")
        else:
            raise AttributeError(f"module 'fedlabels' has no attribute {name!r}")
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names (and the subpackages imported so far), not this module's helpers."""
    loaded = {k for k, v in globals().items() if getattr(v, "__name__", "").startswith(
        f"{__name__}.")}
    return sorted({*_LAZY, "__version__", *loaded})


__all__ = [
    "ClientData",
    "DatasetNotFetchedError",
    "FedLabelsError",
    "FedLabelsWarning",
    "Federation",
    "RunCaveatWarning",
    "RunConfig",
    "RunResult",
    "TorchModel",
    "inspect_models",
    "load_config",
    "load_federation",
    "load_run",
    "make_federation",
    "plot",
    "privacy_plan",
    "report",
    "resume",
    "run",
    "run_config",
]
