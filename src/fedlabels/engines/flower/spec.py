"""What a deployed run needs to know, as one JSON string in Flower's run config.

The ServerApp and every ClientApp read the same :class:`DeploySpec` from
``context.run_config["fedlabels"]``, so a run is defined in one place (the app's
``pyproject.toml``, written by ``fedlabels deploy``) and travels with the run to every
SuperNode. This module does not import Flower.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from fedlabels.api import _as_models
from fedlabels.config import RunConfig
from fedlabels.data import ClientData
from fedlabels.engines.inprocess import derive_seeds
from fedlabels.errors import FedLabelsError
from fedlabels.learners import expand_per_client
from fedlabels.protocols import Method, Settings, get_method

RUN_CONFIG_KEY = "fedlabels"
HELLO = "fedlabels.hello"


@dataclass
class DeploySpec:
    """A deployed run: the ``fedlabels run`` settings plus deployment-only settings.

    Parameters
    ----------
    run : dict
        :class:`~fedlabels.config.RunConfig` as a dict (method, model, rounds, seed, ...).
    output : str
        Where the ServerApp writes the result JSON (a path on the SuperLink's machine);
        rewritten atomically after every round. Empty: no result file.
    status : str
        Where the ServerApp writes its status JSON (running / completed / failed, the
        error, the lost clients). Empty: none.
    truth : str
        Optional ``.npz`` with ``y_public``, the true labels of U, for the consensus-accuracy
        diagnostic (only ``deploy local`` has them; a real deployment does not).
    reply_timeout : float
        Seconds to wait for a client's reply before declaring it lost.
    node_timeout : float
        Seconds to wait at start-up until all ``clients`` SuperNodes are connected.
    poll_interval : float
        Seconds between pulls of replies from the SuperLink.
    """

    run: dict[str, Any]
    output: str = ""
    status: str = ""
    truth: str = ""
    reply_timeout: float = 300.0
    node_timeout: float = 120.0
    poll_interval: float = 0.2
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> RunConfig:
        return RunConfig(**self.run)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_run_config(cls, run_config: dict[str, Any]) -> DeploySpec:
        """Read the spec from a Flower ``context.run_config``."""
        text = run_config.get(RUN_CONFIG_KEY)
        if not isinstance(text, str) or not text:
            raise FedLabelsError(
                f"the Flower run config has no {RUN_CONFIG_KEY!r} entry; start the run with "
                "an app written by `fedlabels deploy app` / `fedlabels deploy local`.")
        return cls(**json.loads(text))


@dataclass
class RoleSetup:
    """What both sides derive identically from the run config (mirrors ``simulate``)."""

    method: Method
    specs: list[Any]
    client_seeds: list[int]
    server_seed: int
    settings: Settings


def role_setup(cfg: RunConfig, n_classes: int, n_features: int) -> RoleSetup:
    """Method, per-client model specs, seeds and settings, exactly as the simulator makes them."""
    method = get_method(cfg.method)
    specs = expand_per_client(_as_models(cfg.model), cfg.clients)[:cfg.clients]
    client_seeds, server_seed = derive_seeds(cfg.seed, cfg.clients)
    # keep in step with fedlabels.engines.inprocess.simulate
    settings = Settings(n_classes=n_classes, period=cfg.period, quorum=cfg.quorum,
                        extra={"total_rounds": cfg.rounds, **cfg.options,
                               "n_features": n_features})
    return RoleSetup(method, specs, client_seeds, server_seed, settings)


def site_datasets(method: Method, clients: list[ClientData]) -> list[ClientData]:
    """What each site holds for ``method`` (its ``client_datasets``), one per site.

    Methods whose client roles are not the sites (``centralized`` pools all private data into
    one role) cannot be deployed: every SuperNode keeps its own data.
    """
    datasets = method.client_datasets(clients)
    if len(datasets) != len(clients):
        raise FedLabelsError(
            f"method {method.name!r} turns {len(clients)} clients' private data into "
            f"{len(datasets)} client role(s) ({type(method).__name__}.client_datasets), which "
            "no deployment can do: every SuperNode keeps its own data. Deploy a federated "
            "method (e.g. fedct, fedavg).")
    return datasets
