"""Flower's simulation engine on Ray (``--engine flower-simulation``): the deployed ServerApp
and ClientApp, run by ``flwr.simulation.run_simulation``.

1. The run's sites are written as ``fedlabels deploy`` writes them
   (:func:`~.prepare.prepare_run`) into a work directory (a temporary one under ``$TMPDIR``;
   on a cluster it must be a directory every Ray node sees at the same path).
2. Flower's virtual SuperNodes know only their ``partition-id``; :class:`SiteClientApp` gives
   each the node config of its site and then calls the deployed ClientApp.
3. The ServerApp's main loop (:func:`~.server_app.run_server`) runs in this process; the
   ClientApps run on Ray actors: a Ray started for the run (``workers`` CPUs, by default
   one per core, at most one per client) or the cluster at ``$RAY_ADDRESS``.
4. After the last round the clients' final models are rebuilt from their sites' last
   snapshots, so the result holds them and their clinical metrics as the simulator's does.

The result equals the simulator's for the same seed (records, bytes, final models); it
adds ``provenance.engine`` and ``deployment``, and its ``wire_format`` says Flower.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid as FlowerGridABC
from flwr.serverapp import ServerApp
from flwr.supercore.run import Run

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower import snapshots
from fedlabels.engines.flower.client_app import FedLabelsClientApp, build_role
from fedlabels.engines.flower.loopback import server_context
from fedlabels.engines.flower.prepare import prepare_run
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site import load_site
from fedlabels.engines.flower.site_privacy import key_path
from fedlabels.engines.flower.site_state import site_key
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY, DeploySpec, deploy_plan
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.config import RunConfig
from fedlabels.runs.progress import VERBOSE, RoundProgress, verbosity

ENGINE = "flower-simulation"
#: Ray's own variable: the address of a running cluster (``ray start --head`` prints it)
ADDRESS_VARIABLE = "RAY_ADDRESS"
_CLIENT_APP_RAISED_EXCEPTION = 2  # flwr.common.constant.ErrorCode


class SiteClientApp(FedLabelsClientApp):
    """The deployed ClientApp, each virtual SuperNode given its site's node config.

    Parameters
    ----------
    nodes : list of dict
        Client ``i``'s node config (:meth:`~.prepare.PreparedRun.node_settings`) at index i.
    run_config : dict
        The run config of every ClientApp (the run's :class:`~.spec.DeploySpec`).
    """

    def __init__(self, nodes: list[dict[str, Any]], run_config: dict[str, Any]) -> None:
        super().__init__()
        self.nodes = nodes
        self.run_config = run_config

    def __call__(self, message: Message, context: Context) -> Message:
        site = Context(run_id=context.run_id, node_id=context.node_id,
                       node_config=dict(self.nodes[int(context.node_config["partition-id"])]),
                       state=context.state,  # the node's own: changes persist
                       run_config=dict(self.run_config))
        details = _SiteErrors()
        logging.getLogger("fedlabels.site").addHandler(details)
        try:
            return super().__call__(message, site)
        except FedLabelsError as exc:
            # an error reply, as flwr-clientapp gives (Ray would add its remote traceback);
            # the sites are this run's own, so it carries what the site logged
            text = "; ".join(details.lines) or str(exc)
            return Message(Error(code=_CLIENT_APP_RAISED_EXCEPTION,
                                 reason=f"{type(exc)}:<'{text}'>"), reply_to=message)
        finally:
            logging.getLogger("fedlabels.site").removeHandler(details)


class _SiteErrors(logging.Handler):
    """The error lines a site's ClientApp logs (a deployed site keeps them to itself)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class StoppableGrid(FlowerGridABC):
    """Flower's grid, whose SuperNodes all leave once ``stopped`` is set: the ServerApp's
    thread then stops (its clients lost, after the spec's ``node_timeout``) instead of
    waiting for replies from a simulation runtime that is gone."""

    def __init__(self, grid: FlowerGridABC, stopped: threading.Event) -> None:
        self.grid, self.stopped = grid, stopped

    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return [] if self.stopped.is_set() else self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:
        return self.grid.send_and_receive(messages, timeout=timeout)


def backend_config(clients: int, workers: int | None,
                   address: str | None) -> dict[str, Any]:
    """Flower's Ray backend settings: one CPU per ClientApp; a local Ray gets ``workers``
    CPUs (default: one per core, at most one per client), a cluster its own."""
    init: dict[str, Any] = {"logging_level": "ERROR", "include_dashboard": False,
                            "log_to_driver": verbosity() >= VERBOSE}
    if address:
        if workers is not None:
            raise FedLabelsError(
                f"workers sets the CPUs of the Ray this run starts; with a cluster "
                f"(${ADDRESS_VARIABLE}={address}) its nodes' `ray start --num-cpus` decide. "
                f"Remove workers, or unset {ADDRESS_VARIABLE}.")
        init["address"] = address
    else:
        init["num_cpus"] = workers or max(1, min(os.cpu_count() or 1, clients))
    return {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": init}


@contextmanager
def _flower_logs_quiet() -> Iterator[None]:
    """Flower logs a client's error with its traceback (and a deprecation warning); the run
    reports errors as one line, so Flower's log and Ray's warnings show only with ``-v``."""
    logger = logging.getLogger("flwr")
    level = logger.level
    with warnings.catch_warnings():
        if verbosity() < VERBOSE:
            logger.setLevel(logging.CRITICAL)
            # Ray's notice that a future version changes num_gpus=0 (on every ray.init)
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
        try:
            yield
        finally:
            logger.setLevel(level)


def run_on_ray(cfg: RunConfig, *, progress: bool | None = None,
               on_round: Callable[[RoundRecord], None] | None = None) -> RunResult:
    """Run ``cfg`` on Flower's simulation engine (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="fedlabels-ray-") as root:
        return _run(cfg, Path(root), progress, on_round)


def _run(cfg: RunConfig, root: Path, progress: bool | None,
         on_round: Callable[[RoundRecord], None] | None) -> RunResult:
    from flwr.simulation import run_simulation

    address = os.environ.get(ADDRESS_VARIABLE) or None
    backend = backend_config(cfg.clients, cfg.workers, address)
    # node_timeout: the virtual SuperNodes register at once; it is also how long a lost
    # client may take to come back, so a stopped run ends that soon
    prepared = prepare_run(cfg, root / "sites", reply_timeout=600.0, node_timeout=10.0,
                           poll_interval=0.01)
    nodes = [prepared.node_settings(c) for c in range(cfg.clients)]
    spec = prepared.spec
    done: dict[str, RunResult | None] = {}
    cluster: dict[str, dict[str, Any]] = {}
    server = ServerApp()

    with RoundProgress(cfg.rounds, f"{cfg.method} on {cfg.dataset}", progress) as shown:
        def record_round(record: RoundRecord) -> None:
            cluster.setdefault("seen", cluster_resources())  # Ray is up once a round ran
            shown.update(record)
            if on_round is not None:
                on_round(record)

        stopped = threading.Event()

        @server.main()
        def main(grid: FlowerGridABC, context: Context) -> None:
            done["result"] = run_server(StoppableGrid(grid, stopped), server_context(spec),
                                        on_round=record_round)

        try:
            with _flower_logs_quiet():
                run_simulation(server_app=server,
                               client_app=SiteClientApp(nodes,
                                                        {RUN_CONFIG_KEY: spec.to_json()}),
                               num_supernodes=cfg.clients, backend_config=backend)
        finally:
            stopped.set()  # Ctrl-C or a crashed runtime: the ServerApp's thread ends too
    result = done.get("result")
    if result is None:
        raise FedLabelsError("the Flower simulation ended before its first evaluated round; "
                             "nothing to report.")
    return finish_result(result, cfg, spec, nodes, {
        "name": ENGINE, "ray": address or "local", **cluster.get("seen", {}),
        "cpus_per_client": backend["client_resources"]["num_cpus"]})


def finish_result(result: RunResult, cfg: RunConfig, spec: DeploySpec,
                  nodes: list[dict[str, Any]], engine: dict[str, Any]) -> RunResult:
    """The ServerApp's ``result`` completed with what the simulator records beside its
    rounds: ``engine`` as ``provenance.engine``, the device settings, and the clients'
    final models with their clinical metrics (:func:`attach_final_models`)."""
    result.extra.setdefault("provenance", {})["engine"] = engine
    device = result.extra.setdefault("device", {})
    device.setdefault("batched_clients", False)  # as the simulator records its settings
    device.setdefault("cuda_graphs", {"asked": cfg.cuda_graphs, "graphed_calls": 0})  # off
    device.setdefault("offload", {"asked": cfg.offload, "offloaded_clients": []})  # auto
    attach_final_models(result, cfg, spec, nodes)
    return result


def cluster_resources() -> dict[str, Any]:
    """The Ray cluster the run uses: its live nodes and their CPUs."""
    import ray

    alive = [node for node in ray.nodes() if node.get("Alive")]
    return {"nodes": len(alive),
            "cpus": sum(float(node.get("Resources", {}).get("CPU", 0)) for node in alive)}


def attach_final_models(result: RunResult, cfg: RunConfig, spec: DeploySpec,
                        nodes: list[dict[str, Any]]) -> None:
    """The clients' final models (from each site's last snapshot) into ``result``, with
    their clinical metrics, as the simulator records them."""
    from fedlabels.engines.inprocess import final_clinical, no_models_clinical
    from fedlabels.runs.federation import federation_for

    lost = {int(c) for c in result.extra.get("deployment", {}).get("lost", {})}
    note = result.extra.get("no_models")
    if note:  # its clients train none (label propagation): why, and their shares' baseline
        if not result.rounds:
            result.extra["clinical"] = {"unavailable": note}
            return
        federation = federation_for(cfg)
        plan = deploy_plan(cfg, federation.n_classes, federation.n_features)
        result.extra["clinical"] = no_models_clinical(
            plan, federation, [c for c in range(len(nodes)) if c not in lost])
        return
    clients = {}
    for cid, node in enumerate(nodes):
        if cid in lost:  # as the simulator keeps the models of the clients still there
            continue
        folder = snapshots.run_dir(node, spec)
        seq = snapshots.last_seq(folder)
        if seq is None:
            return  # a client never answered: its model is at no site
        role = build_role(spec, load_site(node), node)
        role.load_state_dict(snapshots.load_snapshot(folder, seq, cid,
                                                     site_key(key_path(node))))
        clients[cid] = role
    cids = sorted(clients)
    federation = federation_for(cfg)
    result.client_models = [clients[c].model() for c in cids]
    if federation.task != "regression" and result.rounds:
        result.extra["clinical"] = final_clinical(clients, cids, federation,
                                                  result.rounds[-1].accuracies)
    from fedlabels.data.pixel_names import names_copy

    result.feature_names = names_copy(federation.feature_names)
    result.preprocessing = federation.preprocessing

