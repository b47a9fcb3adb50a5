"""What a deployed run needs to know, as one JSON string in Flower's run config.

The ServerApp and every ClientApp read the same :class:`DeploySpec` from
``context.run_config["fedlabels"]``, so a run is defined in one place (the app's
``pyproject.toml``, written by ``fedlabels deploy``) and travels with the run to every
SuperNode. This module does not import Flower.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.data import ClientData
from fedlabels.learners import as_models
from fedlabels.method import Method
from fedlabels.runs.config import RunConfig
from fedlabels.runs.loop import RunPlan, plan_run

RUN_CONFIG_KEY = "fedlabels"
HELLO = "fedlabels.hello"


@dataclass
class DeploySpec:
    """A deployed run: the ``fedlabels run`` settings plus deployment-only settings.

    Parameters
    ----------
    run : dict
        :class:`~fedlabels.runs.config.RunConfig` as a dict (method, model, rounds, seed, ...).
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
    threads : int
        Torch threads per ClientApp (``--threads``; a site's node config ``threads``
        overrides it). One by default: a SuperNode may run several ClientApps at once.
    resume : bool
        Continue the run of the checkpoint beside ``output`` (after a ServerApp or SuperLink
        crash) instead of starting afresh.
    overwrite : bool
        A new run may replace a result (and checkpoint) at ``output``: ``--overwrite`` given
        to ``deploy prepare`` or ``deploy local``. Otherwise the ServerApp of a new run
        refuses to start where one exists (:func:`refuse_existing_output`).
    extra : dict
        What ``deploy prepare`` adds for the result: ``federation``, the public summary of
        the federation, and ``federation_record``, the path of the coordinator's record of
        the sites' statistics (:meth:`federation` reads both).
    """

    run: dict[str, Any]
    output: str = ""
    status: str = ""
    truth: str = ""
    reply_timeout: float = 300.0
    node_timeout: float = 120.0
    poll_interval: float = 0.2
    threads: int = 1
    resume: bool = False
    overwrite: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def federation(self) -> dict[str, Any]:
        """The federation summary the result records: the public part in the run config
        (every site receives it), the statistics of the sites' private rows (sizes, class
        counts, U-vs-private distances) from the coordinator's own record file where the
        ServerApp can read it (``deploy prepare`` writes it)."""
        summary = dict(self.extra.get("federation", {}))
        record = self.extra.get("federation_record")
        if record and Path(record).is_file():
            for key, value in json.loads(Path(record).read_text()).items():
                mine = summary.get(key)  # "public": its other keys are in the run config
                summary[key] = {**mine, **value} if isinstance(mine, dict) and \
                    isinstance(value, dict) else value
        return summary

    def run_identity(self, plan: RunPlan) -> dict[str, Any]:
        """What a resumed deployment must share with its checkpoint (as the simulator's
        :func:`~fedlabels.runs.checkpoint.run_identity`, engine ``flower``), without the
        digest of the data before the split (``data_sha256``: a checkpoint of an earlier
        version has none; the sizes and U's fingerprint tie it to its data)."""
        from fedlabels.runs.checkpoint import run_identity

        cfg = self.config
        federation = self.federation()
        federation.pop("data_sha256", None)
        return run_identity(plan, seed=cfg.seed, eval_every=cfg.eval_every,
                            federation=federation, engine="flower")

    @property
    def config(self) -> RunConfig:
        unknown = sorted(set(self.run) - {f.name for f in fields(RunConfig)})
        if unknown:
            raise FedLabelsError(
                f"the deployed run config has unknown key(s) {unknown}; valid keys: "
                f"{', '.join(f.name for f in fields(RunConfig))}. Re-write the app with "
                "this version's `fedlabels deploy`.")
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
        data = json.loads(text)
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise FedLabelsError(f"the {RUN_CONFIG_KEY!r} run config has unknown key(s) "
                                 f"{unknown}; valid keys: "
                                 f"{', '.join(f.name for f in fields(cls))}.")
        return cls(**data)


def refuse_existing_output(spec: DeploySpec) -> None:
    """A new run (not a resume) does not replace the result or checkpoint an earlier run of
    the same app left at ``spec.output``, unless the app was written with ``--overwrite``:
    submitting an app twice (``flwr run`` again) replaced the first run's result, status
    and checkpoint without a word."""
    if spec.resume or spec.overwrite or not spec.output:
        return
    from fedlabels.runs.checkpoint import checkpoint_path

    for found in (Path(spec.output), checkpoint_path(spec.output)):
        if found.exists():
            raise FedLabelsError(
                f"{found} exists: an earlier run of this app wrote it, and this new run "
                "would replace it. Resume that run (`fedlabels deploy resume <this app> "
                "--out-dir DIR` writes its app; deploy local --resume), move its files away, "
                "or write the app again with "
                "another --output (or --overwrite to replace them).")


def reject_reproducible_noise(cfg: RunConfig) -> None:
    """A deployment never runs with reproducible (seed-derived) noise."""
    if cfg.insecure_reproducible_noise:
        raise FedLabelsError("insecure_reproducible_noise is for the in-process simulator "
                             "only (fedlabels run / fl.run); a Flower deployment always draws "
                             "its secret randomness from each party's OS entropy.")


def deploy_plan(cfg: RunConfig, n_classes: int, n_features: int,
                input_shape: tuple[int, ...] | None = None) -> RunPlan:
    """The run plan every party derives from ``cfg``, as ``simulate`` derives it;
    ``input_shape``: the federation's image shape (C, H, W), as the simulator gives it to
    the learners (a site reads it from the shared file, the server from the sites' hello)."""
    reject_reproducible_noise(cfg)
    from fedlabels.data.targets import refuse_regression_deployment

    refuse_regression_deployment(cfg.dataset, cfg.task, cfg.sep)
    return plan_run(cfg.method, n_roles=cfg.clients, n_classes=n_classes,
                    n_features=n_features, rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, models=as_models(cfg.model), options=cfg.options,
                    device=cfg.device, precision=cfg.precision, input_shape=input_shape)


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
