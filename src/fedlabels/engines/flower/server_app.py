"""The Flower ``ServerApp``: the method's server role, driving real SuperNodes.

:func:`run_server` runs the one run loop (:mod:`fedlabels.runs.loop`, as the simulator
does) on a :class:`FlowerGrid` instead of the in-process grid:

1. wait until the run's ``clients`` SuperNodes are connected, then ask each who it is
   (partition id, data shape, a fingerprint of U) and stop with a clear error naming the
   node if a site has no usable data or data that does not match U (a node that leaves
   before it answers may be replaced by one that connects within ``node_timeout``:
   :class:`HelloGrid`);
2. ``plan_run`` (the same method, options, settings, model specs and seeds as the
   simulator), the server role (:func:`~fedlabels.runs.session.build_server`), then
   ``run_rounds``;
3. after every round (the ``on_round`` hook), write a checkpoint beside the result (the
   engine's format, :mod:`fedlabels.runs.checkpoint`: the server role's state, the
   records, the meter, lost clients and message counts; the client states stay at the
   sites), then, paced (:data:`RESULT_SHARE` of the run's time at most), the result JSON
   and the server's ``final_arrays()``, and the status file, all atomically; the result is
   also written at the end, and on a stop, an error or an interrupt (a ServerApp killed
   outright leaves the last paced one; the checkpoint holds every complete round). A run
   whose spec says ``resume`` continues from that checkpoint, in a new
   Flower run (after a ServerApp or SuperLink crash), with the sites restoring their own
   saved state (:mod:`.snapshots`).

The status file says ``running``, ``completed``, ``stopped`` (too few clients left),
``failed`` (an error) or ``interrupted`` (SIGTERM, e.g. ``flwr stop``, or Ctrl-C); a
ServerApp killed outright cannot write it, which ``deploy local`` does for it.

A client that dies (its SuperNode leaves, stops sending heartbeats, its ClientApp fails or it
does not answer within ``reply_timeout``) is reported and dropped; the run goes on with the
rest if the method still accepts that many clients (``Capabilities.tolerates_lost_clients`` and
``Method.validate``; FedCT's majority vote needs 3), otherwise it stops with a message saying
which clients were lost and why.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid as FlowerGridABC
from flwr.serverapp import ServerApp
from flwr.supercore.exit import ExitCode, flwr_exit

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError, show_warnings_in_one_line
from fedlabels.core.files import write_atomic
from fedlabels.core.private_files import write_private_with
from fedlabels.engines.flower.grid import FlowerGrid
from fedlabels.engines.flower.site_ledgers import site_ledgers_block
from fedlabels.engines.flower.spec import HELLO, DeploySpec, deploy_plan, refuse_existing_output
from fedlabels.method import ServerRole
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.checkpoint import (
    Keeper,
    check_extension,
    checkpoint_path,
    load_checkpoint,
)
from fedlabels.runs.config import RunConfig
from fedlabels.runs.loop import (
    WIRE_FORMAT,
    CommMeter,
    RunPlan,
    build_result,
    evaluation_due,
    rounds_to_run,
    run_rounds,
    terminate_as_interrupt,
    uses_iterative,
)
from fedlabels.runs.lost import ClientsLost as ClientsLost
from fedlabels.runs.lost import check_survivors as survivors
from fedlabels.runs.paced import PacedWrite
from fedlabels.runs.session import build_server

#: the engine a result of these apps names (``config.engine``, ``deployment.engine``) when
#: they ran on real SuperLink and SuperNode processes; on Ray, ``flower-simulation``
DEPLOYED_ENGINE = "flower"
#: the share of a deployed run's time its result writes may take (:mod:`fedlabels.runs.paced`):
#: one write holds every round (0.3-0.5 s at 3,000 rounds), so after every round it cost
#: O(T) a round; the result is also written at the end, on a stop and on an error or interrupt
RESULT_SHARE = 0.05

FLOWER_WIRE_FORMAT = (WIRE_FORMAT + " (counted as in the simulator; on Flower the same arrays "
                      "travel as an ArrayRecord in protobuf)")


def result_config(cfg: RunConfig) -> dict[str, Any]:
    """The run's configuration as the result records it, ``engine`` naming the engine that
    ran: a deployment's spec carries ``fedlabels run``'s settings with their default engine,
    ``simulator``, which did not run (``flower-simulation`` did, when it says so)."""
    config = cfg.to_dict()
    if config["engine"] == "simulator":
        config["engine"] = DEPLOYED_ENGINE
    return config


def wait_for_nodes(grid: FlowerGridABC, n: int, timeout: float) -> list[int]:
    """Node ids once ``n`` SuperNodes are connected (fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes
        if time.monotonic() >= deadline:
            raise FedLabelsError(
                f"only {len(nodes)} of {n} SuperNodes connected within {timeout:g} s; start one "
                "`flower-supernode` per client (or lower --clients).")
        time.sleep(0.5)


def greet(grid: FlowerGridABC, nodes: list[int], n_clients: int, timeout: float,
          rejoin_timeout: float = 0.0,
          ) -> tuple[dict[int, int], dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Ask every node who it is; map client id -> node id and check the sites agree. A node
    that leaves before it answers (a SuperNode restarted during the hello) may be replaced,
    within ``rejoin_timeout`` seconds, by a node that connects meanwhile (:class:`HelloGrid`);
    the third value lists those replacements (``round`` 0, ``client``, ``node_id``,
    ``replaced``)."""
    probe = HelloGrid(grid, dict(enumerate(nodes)), CommMeter(), reply_timeout=timeout)
    probe.rejoin_timeout = rejoin_timeout
    replies = probe.exchange({i: Message(HELLO, category="control")
                              for i in range(len(nodes))}, -1)
    if probe.lost:
        raise FedLabelsError("SuperNode setup failed: " + "; ".join(
            f"node {info['node_id']}: {info['reason']}" for info in probe.lost.values())
            + HELLO_LOST_HINT)
    info = {probe.node_of[i]: dict(r.config) for i, r in replies.items()}
    for node, hello in info.items():
        _check_hello(node, hello)
    by_pid: dict[int, int] = {}
    for node, hello in info.items():
        pid = int(hello["partition_id"])
        if pid in by_pid:
            raise FedLabelsError(f"SuperNodes {by_pid[pid]} and {node} both have "
                                 f"partition-id={pid}; give each site its own index 0..m-1.")
        by_pid[pid] = node
    expected = set(range(n_clients))
    if set(by_pid) != expected:
        raise FedLabelsError(f"the SuperNodes have partition-ids {sorted(by_pid)}, the run "
                             f"needs exactly {sorted(expected)}.")
    for key in ("n_features", "n_public", "n_classes", "public_digest", "image_shape"):
        values = {node: hello[key] for node, hello in info.items()}
        if len(set(values.values())) > 1:
            raise FedLabelsError(
                f"the SuperNodes disagree on the shared public data ({key}: "
                + ", ".join(f"node {n} (partition-id {info[n]['partition_id']}) has {v}"
                            for n, v in values.items())
                + "); every site must hold the same shared file.")
    rejoined = [{"round": 0, "client": int(info[r["node_id"]]["partition_id"]),
                 "node_id": r["node_id"], "replaced": nodes[r["client"]]}
                for r in probe.rejoined]
    for r in (r for r in rejoined if r["node_id"] != r["replaced"]):
        print(f"fedlabels: hello: SuperNode {r['replaced']} left before it answered; "
              f"SuperNode {r['node_id']}, connected meanwhile, answered as partition-id "
              f"{r['client']}", flush=True)
    return by_pid, {pid: info[node] for pid, node in by_pid.items()}, rejoined


#: what the coordinator reads when a SuperNode was lost at the hello
HELLO_LOST_HINT = (". A site whose SuperNode left during the hello may start it again "
                   "within --node-timeout; otherwise start the run again once every site's "
                   "SuperNode is connected.")


class HelloGrid(FlowerGrid):
    """The hello's exchange, whose clients are the connected nodes (not yet sites): a node
    that leaves before it answers (Flower's "node unavailable", or gone from the node list)
    waits ``rejoin_timeout`` seconds for its node id to come back (a restart with the same
    key) or for a node that connected meanwhile (a restart without authentication: a new
    node id), which is asked the hello in its place.

    Nothing is taken on trust from the node replaced: before the hello no node is a site
    yet, so the new node's answer goes through every check the others' do (its own
    partition id, exactly 0..m-1, the same U). Once rounds run, a node's place is its
    partition's (:meth:`FlowerGrid._rejoined`)."""

    def _rejoined(self, waiting: Mapping[int, float], online: set[int], rnd: int) -> list[int]:
        if self.rejoin_timeout <= 0:
            return []
        back = [c for c in waiting if self.node_of[c] in online]
        new = sorted(online - set(self.node_of.values()) - self._probed)
        for cid, node in zip([c for c in waiting if c not in back], new, strict=False):
            self._probed.update((node, self.node_of[cid]))  # neither stands in again
            self.node_of[cid] = node
            back.append(cid)
        for cid in back:
            self.rejoined.append({"round": rnd + 1, "client": cid, "node_id": self.node_of[cid]})
        return back


#: what a site's hello must give: integers >= the minimum, and text
_HELLO_COUNTS = {"partition_id": 0, "n_examples": 1, "n_features": 1, "n_public": 1,
                 "n_classes": 1}
_HELLO_TEXT = ("public_digest",)


def _check_hello(node: int, hello: dict[str, Any]) -> None:
    """A site's hello is its own word on its data: refuse one the run cannot use, naming the
    node (a missing or non-integer value was a bare KeyError or int() error; a negative
    size was taken as it came)."""
    for key, low in _HELLO_COUNTS.items():
        value = hello.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise FedLabelsError(f"SuperNode {node} answered hello with {key} = {value!r}; "
                                 f"expected an integer >= {low} (is it running this "
                                 "version of fedlabels' ClientApp?).")
    for key in _HELLO_TEXT:
        if not isinstance(hello.get(key), str):
            raise FedLabelsError(f"SuperNode {node} answered hello without {key}.")


class StatusFile:
    """The run's status JSON, rewritten atomically on every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {"status": "starting", "rounds_done": 0, "lost": {}}

    def update(self, **changes: Any) -> None:
        self.data.update(changes)
        if self.path:
            write_atomic(self.path, json.dumps(self.data, indent=2, default=str) + "\n")


def run_server(grid: FlowerGridABC, context: Context, *,
               on_round: Callable[[RoundRecord], None] | None = None) -> RunResult | None:
    """The ServerApp main loop (see the module docstring) over Flower's ``grid``, the run
    described by ``context``'s run config (a :class:`DeploySpec`); ``on_round`` is called with each
    finished round's record in place of the per-round line."""
    spec = DeploySpec.from_run_config(dict(context.run_config))
    refuse_existing_output(spec)  # before the status file, which is the earlier run's too
    status = StatusFile(spec.status)
    try:
        with terminate_as_interrupt():  # SIGTERM (e.g. `flwr stop`) as Ctrl-C
            return _run(grid, spec, status, on_round)
    except ClientsLost:
        raise  # _run recorded it as "stopped"
    except KeyboardInterrupt:
        status.update(status="interrupted", error="stopped by SIGTERM or Ctrl-C; resume it "
                                                  "from the last completed round")
        raise
    except SystemExit:  # Flower ends the task: `flwr stop` (the heartbeat raises SIGINT,
        # Flower's own handler exits), or Flower's handlers of another signal
        status.update(status="interrupted", error="stopped by Flower (flwr stop, or a "
                      "signal Flower handles); resume it from the last completed round")
        raise
    except Exception as exc:
        status.update(status="failed", error=str(exc))
        raise


def hello_image_shape(text: object, n_features: int) -> tuple[int, int, int] | None:
    """The image shape (C, H, W) the sites' hello names as ``C-H-W`` (empty: U is not
    images), checked here too: three positive whole numbers whose product is U's width."""
    value = str(text or "")
    if not value:
        return None
    parts = value.split("-")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise FedLabelsError(f"the SuperNodes' hello names the image shape {value!r}; "
                             "expected C-H-W with three positive integers (the sites' "
                             "shared.npz image_shape).")
    c, h, w = (int(p) for p in parts)
    if c * h * w != n_features:
        raise FedLabelsError(f"the SuperNodes' hello names the image shape {value} "
                             f"({c * h * w} values) for rows of {n_features} features; the "
                             "sites' shared.npz is inconsistent: prepare it again.")
    return c, h, w


def _run(grid: FlowerGridABC, spec: DeploySpec, status: StatusFile,
         announce: Callable[[RoundRecord], None] | None = None) -> RunResult | None:
    started = time.perf_counter()
    cfg = spec.config
    status.update(status="waiting for SuperNodes")
    nodes = wait_for_nodes(grid, cfg.clients, spec.node_timeout)
    if len(nodes) > cfg.clients:
        raise FedLabelsError(f"{len(nodes)} SuperNodes are connected but the run has "
                             f"{cfg.clients} clients; stop the extra SuperNodes (a site started "
                             "twice, or a SuperNode of another federation), or, if every one "
                             "is a site of this run, raise --clients.")
    node_of, hello, hello_rejoined = greet(grid, nodes, cfg.clients, spec.reply_timeout,
                                           spec.node_timeout)
    first = hello[0]
    plan = deploy_plan(cfg, int(first["n_classes"]), int(first["n_features"]),
                       hello_image_shape(first.get("image_shape", ""),
                                         int(first["n_features"])))
    truth = None
    if spec.truth:
        with np.load(spec.truth, allow_pickle=False) as data:
            truth = data["y_public"]
    learners, server = build_server(
        plan, n_public=int(first["n_public"]), truth_public=truth,
        client_sizes=[int(hello[c]["n_examples"]) for c in range(cfg.clients)])
    meter = CommMeter()
    fgrid = FlowerGrid(grid, node_of, meter, reply_timeout=spec.reply_timeout,
                       poll_interval=spec.poll_interval)
    fgrid.on_lost = partial(check_survivors, plan, learners, fgrid, status=status)
    fgrid.check_reply = server.check_reply  # a malformed reply loses its site
    fgrid.rejoin_timeout, fgrid.public_digest = spec.node_timeout, str(first["public_digest"])
    fgrid.rejoined = hello_rejoined  # round 0: at the hello
    deployment: dict[str, Any] = {
        "engine": DEPLOYED_ENGINE, "client_node_ids": {str(c): n for c, n in node_of.items()},
        "setup_seconds": time.perf_counter() - started, "alive_per_round": []}
    keeper, records = checkpointed(spec, plan, learners, server, meter, fgrid, started)
    deployment["alive_per_round"] = keeper.engine.get("alive_per_round", [])

    n_rounds, rounds_note = rounds_to_run(plan, learners)  # a one-shot method stops early
    if not server.evaluation_after_round:  # a request known before the round
        fgrid.evaluation = server.evaluation_message
        fgrid.eval_due = partial(evaluation_due, rounds=n_rounds, eval_every=cfg.eval_every)

    def snapshot(state: str, error: str | None = None) -> RunResult | None:
        deployment.update(status=state, lost={str(c): v for c, v in fgrid.lost.items()},
                          client_node_ids={str(c): n for c, n in fgrid.node_of.items()},
                          rejoined=list(fgrid.rejoined),
                          flower_bytes=flower_bytes_report(fgrid.flower_bytes, records))
        if error:
            deployment["error"] = error
        if not any(r.accuracies is not None or r.server.get("evaluation_declined")
                   for r in records):  # nothing evaluated, and no site declined to be
            return None
        result = build_result(plan, server, records, meter, dataset=cfg.dataset,
                              seed=cfg.seed, config=result_config(cfg),
                              federation=spec.federation(),
                              started=started, wire_format=FLOWER_WIRE_FORMAT,
                              extra={"deployment": dict(deployment),
                                     **({"rounds_run": rounds_note} if rounds_note else {})})
        sites = site_ledgers_block(result.extra["privacy"], result.config, fgrid.site_ledgers,
                                   fgrid.lost, cfg.clients)
        if sites is not None:  # the sites' own word, beside the coordinator's accounting
            result.extra["privacy"]["site_ledgers"] = sites
        keeper.stamp(result)
        if spec.output:
            result.save_json(spec.output, overwrite=True)
            save_final_arrays(server, spec.output)
        return result

    checkpoint = keeper.hook(None)
    written = PacedWrite(RESULT_SHARE)  # the result grows with the rounds: paced

    def on_round(record: RoundRecord) -> None:
        record.server["clients_alive"] = float(len(fgrid.client_ids))
        deployment["alive_per_round"].append(fgrid.client_ids)
        keeper.engine = {"lost": {str(c): v for c, v in fgrid.lost.items()},
                         "seq": {str(c): n for c, n in fgrid.seq.items()},
                         "site_ledgers": {str(c): r for c, r in fgrid.site_ledgers.items()},
                         "alive_per_round": deployment["alive_per_round"]}
        checkpoint(record)  # then the result: a resume redoes at most this round
        written(partial(snapshot, "running"))
        status.update(rounds_done=record.round)
        if announce is not None:
            announce(record)
            return
        print(f"fedlabels: round {record.round}/{n_rounds} done in {record.seconds:.1f} s"
              + (f", mean accuracy {np.mean(record.accuracies):.4f}"
                 if record.accuracies else ""), flush=True)

    status.update(status="running")
    try:
        run_rounds(server, fgrid, meter, rounds=n_rounds, period=cfg.period,
                   eval_every=cfg.eval_every, iterative=uses_iterative(learners),
                   all_cids=sorted(node_of), on_round=on_round, records=records)
    except ClientsLost as exc:
        snapshot("stopped", str(exc))
        status.update(status="stopped", error=str(exc))
        raise
    except (Exception, KeyboardInterrupt, SystemExit):  # an error, SIGTERM, flwr stop
        with contextlib.suppress(Exception):  # the run's own error is the one to report
            written.flush()  # the last complete round's result, if the pacing put it off
        raise
    result = snapshot("completed")
    status.update(status="completed", error=None)
    return result


def checkpointed(spec: DeploySpec, plan: RunPlan, learners: list[Any], server: ServerRole,
                 meter: CommMeter, fgrid: FlowerGrid,
                 started: float) -> tuple[Keeper, list[RoundRecord]]:
    """The run's checkpoint keeper (beside ``spec.output``) and the rounds already done: none
    for a new run; for ``spec.resume``, those of the checkpoint, restored into the server
    role, the meter and the grid (lost clients, message counts)."""
    cfg = spec.config
    path = checkpoint_path(spec.output) if spec.output else None
    keeper = Keeper(path, spec.run_identity(plan), cfg.to_dict(), plan.settings.rounds,
                    server, {}, meter, started)
    if not spec.resume:
        return keeper, keeper.fresh()
    if path is None:
        raise FedLabelsError("resume needs the run's output path (its checkpoint is beside "
                             "it); this app has none.")
    saved = load_checkpoint(path)
    check_extension(plan, learners, saved)
    records = keeper.restore(saved, plan.settings.rounds)
    fgrid.lost = {int(c): v for c, v in keeper.engine.get("lost", {}).items()}
    fgrid.seq.update({int(c): int(n) for c, n in keeper.engine.get("seq", {}).items()})
    fgrid.site_ledgers = {int(c): dict(r) for c, r in
                          keeper.engine.get("site_ledgers", {}).items()}
    print(f"fedlabels: resuming after round {len(records)} from {path}", flush=True)
    return keeper, records


def flower_bytes_report(flower: dict[int, list[int]],
                        records: list[RoundRecord]) -> dict[str, Any]:
    """Flower's own message bytes (``convert.flower_bytes``) next to fedlabels' encoding
    (the result's ``bytes_up``/``bytes_down``), in total and per round, for the rounds this
    ServerApp process ran (after a resume: since it started)."""
    ours = {r.round: (sum(r.bytes_down), sum(r.bytes_up)) for r in records}
    rounds = [{"round": rnd + 1, "flower_down": down, "flower_up": up,
               "fedlabels_down": ours.get(rnd + 1, (0, 0))[0],
               "fedlabels_up": ours.get(rnd + 1, (0, 0))[1]}
              for rnd, (down, up) in sorted(flower.items()) if rnd >= 0]
    return {"what": "flower_* = the Flower Message object trees as sent (protobuf and object "
                    "headers, deflated); fedlabels_* = fedlabels' own encoding of the same "
                    "messages",
            **{key: sum(r[key] for r in rounds) for key in
               ("flower_down", "flower_up", "fedlabels_down", "fedlabels_up")},
            "per_round": rounds}


#: what a coordinator reads when every site refused for its budget
BUDGET_SPENT_HINT = (
    " Every site's privacy budget is spent: a site's lifetime ledger keeps what it released "
    "in earlier runs on the same data (without ledger-epsilon, one run of its privacy-plan). "
    "Run on new data, or have the sites set ledger-epsilon in their node config "
    "(docs/deployment.md, 'The site's ledger'); with deploy local, a --workdir used before "
    "keeps its sites' ledgers: give a new one, --site-config ledger-epsilon=E, or --resume "
    "the interrupted run.")


#: added where the method retries attempts of secure aggregation: a retry is a release
RETRY_HINT = (
    " Under aggregation secure a retried attempt after a dropout is one more release: a "
    "site answers one attempt a round (dp-pate: one vote) plus the option retries of its "
    "own privacy-plan (ledger-epsilon does not raise that count), so a coordinator "
    "allowed more retries than its sites is refused (with epsilon, which calibrates σ for "
    "those releases, any other number of retries is); give the run and every site's plan "
    "the same --opt retries=A (deploy prepare writes it into each client_<i>.plan.json; "
    "docs/privacy.md, 'Dropouts').")


def check_survivors(plan: RunPlan, learners: list[Any], fgrid: FlowerGrid,
                    failed: dict[int, str], rnd: int, status: StatusFile) -> None:
    """After clients were lost: go on if the method accepts the rest, else stop."""
    status.update(lost=dict(fgrid.lost))
    hint = BUDGET_SPENT_HINT if failed and all(
        "refused: budget" in why for why in failed.values()) else ""
    retries = any("the site's retries is" in why for why in failed.values())
    if (hint or retries) and getattr(plan.settings.options, "aggregation", None) == "secure":
        hint += RETRY_HINT
    line = survivors(plan, learners, fgrid.client_ids, failed, rnd,
                     lambda c: f"client {c} (SuperNode {fgrid.node_of[c]})", hint)
    print(f"fedlabels: {line}", flush=True)


def server_state_path(output: str | Path) -> Path:
    """Where the server role's final arrays go (e.g. FedCT's consensus ``labels``)."""
    output = Path(output)
    return output.with_name(output.stem + ".server.npz")


def save_final_arrays(server: ServerRole, output: str | Path) -> None:
    """``server.final_arrays()`` beside the result (nothing if it has none): atomically,
    durably and owner-only (0600), as the models file of a simulator run is: FedAvg's global
    weights and FedCT's consensus labels are computed from the sites' private data. (It was
    world-readable, written through one fixed temporary name, without fsync.)"""
    arrays = server.final_arrays()
    if not arrays:
        return
    write_private_with(server_state_path(output),
                       lambda fh: np.savez(fh, allow_pickle=False, **arrays), tighten=False)


app = ServerApp()


@app.main()
def main(grid: FlowerGridABC, context: Context) -> None:
    """The deployed ServerApp (its own ``flwr-serverapp`` process; the simulation engine
    runs :func:`run_server` itself): its warnings print as the CLI's, one line each, and a
    run that stops on a :class:`FedLabelsError` (every site lost or refusing, a site's data
    error at the hello) ends as a failed Flower run with that one line, not a traceback."""
    show_warnings_in_one_line()
    try:
        run_server(grid, context)
    except FedLabelsError as exc:  # run_server recorded it in the status file
        flwr_exit(ExitCode.SERVERAPP_EXCEPTION, f"fedlabels: error: {exc}")
