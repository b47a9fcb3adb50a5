"""The Flower ``ServerApp``: the method's server role, driving real SuperNodes.

:func:`run_server` runs the one run loop (:mod:`fedlabels.engines.runner`, as the simulator
does) on a :class:`FlowerGrid` instead of the in-process grid:

1. wait until the run's ``clients`` SuperNodes are connected, then ask each who it is
   (partition id, data shape, a fingerprint of U) and stop with a clear error naming the
   node if a site has no usable data or data that does not match U;
2. ``plan_run`` (the same method, options, settings, model specs and seeds as the
   simulator), the server role, then ``run_rounds``;
3. after every round (the ``on_round`` hook), write the result JSON, the server's
   ``final_arrays()`` and the status file atomically, so a run that stops keeps everything
   up to its last complete round.

A client that dies (its SuperNode leaves, stops sending heartbeats, its ClientApp fails or it
does not answer within ``reply_timeout``) is reported and dropped; the run goes on with the
rest if the method still accepts that many clients (``Method.tolerates_lost_clients`` and
``Method.validate``; FedCT's majority vote needs 3), otherwise it stops with a message saying
which clients were lost and why.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context
from flwr.app import Message as FlowerMessage
from flwr.serverapp import Grid as FlowerGridABC
from flwr.serverapp import ServerApp

from fedlabels.comm import Message, encode_message
from fedlabels.engines.flower.convert import flower_message_type, from_record_dict, to_record_dict
from fedlabels.engines.flower.spec import HELLO, DeploySpec, deploy_plan
from fedlabels.engines.runner import (
    WIRE_FORMAT,
    CommMeter,
    RunPlan,
    build_result,
    rounds_to_run,
    run_rounds,
    uses_iterative,
)
from fedlabels.errors import FedLabelsError
from fedlabels.protocols import ServerRole
from fedlabels.results import RoundRecord, RunResult, write_atomic

FLOWER_WIRE_FORMAT = (WIRE_FORMAT + " (counted as in the simulator; on Flower the same arrays "
                      "travel as an ArrayRecord in protobuf)")


class ClientsLost(FedLabelsError):
    """Too few clients remain for the method to continue."""


class FlowerGrid:
    """Our :class:`~fedlabels.protocols.Grid` on a Flower ``Grid``.

    ``exchange`` converts each message to a Flower ``Message`` for its client's SuperNode,
    pushes them all, then pulls replies every ``poll_interval`` seconds (Flower's own
    ``send_and_receive`` sleeps a fixed 3 s between pulls). Clients whose reply is an error,
    whose SuperNode is no longer connected, or who do not answer within ``reply_timeout`` are
    moved to :attr:`lost` and left out of :attr:`client_ids` and of the returned replies;
    ``on_lost`` is called with the newly lost clients before ``exchange`` returns.

    Bytes are counted as the simulator counts them (our wire format, per round, client,
    direction and category), so both engines report the same communication.
    """

    def __init__(self, grid: FlowerGridABC, node_of: Mapping[int, int], meter: CommMeter, *,
                 reply_timeout: float = 300.0, poll_interval: float = 0.2,
                 on_lost: Callable[[dict[int, str], int], None] | None = None,
                 liveness_interval: float = 1.0) -> None:
        self.grid = grid
        self.node_of = dict(node_of)
        self.meter = meter
        self.reply_timeout = reply_timeout
        self.poll_interval = poll_interval
        self.liveness_interval = liveness_interval
        self.on_lost = on_lost
        self.lost: dict[int, dict[str, Any]] = {}

    @property
    def client_ids(self) -> list[int]:
        return sorted(c for c in self.node_of if c not in self.lost)

    def _push(self, messages: Mapping[int, Message], rnd: int) -> tuple[dict[str, int],
                                                                         dict[int, str]]:
        out: list[FlowerMessage] = []
        cids = sorted(messages)
        for cid in cids:
            msg = messages[cid]
            self.meter.add(rnd, cid, "down", msg.category, len(encode_message(msg)))
            out.append(FlowerMessage(to_record_dict(msg, cid=cid, round=rnd),
                                     dst_node_id=self.node_of[cid],
                                     message_type=flower_message_type(msg),
                                     group_id=str(rnd)))
        ids = list(self.grid.push_messages(out))
        pending = {mid: cid for mid, cid in zip(ids, cids, strict=True) if mid}
        failed = {cid: "the SuperLink refused the message" for mid, cid
                  in zip(ids, cids, strict=True) if not mid}
        return pending, failed

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        """Send one message per client and return the replies of the clients that answered."""
        unknown = sorted(set(messages) - set(self.client_ids))
        if unknown:
            raise FedLabelsError(f"round {rnd + 1}: messages for unknown or lost clients "
                                 f"{unknown}.")
        pending, failed = self._push(messages, rnd)
        replies: dict[int, Message] = {}
        deadline = time.monotonic() + self.reply_timeout
        next_liveness = time.monotonic() + self.liveness_interval
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                cid = pending.pop(reply.metadata.reply_to_message_id, None)
                if cid is None:
                    continue
                if reply.has_error():
                    failed[cid] = error_reason(reply.error.code, reply.error.reason or "")
                    continue
                ours, _ = from_record_dict(reply.content)
                self.meter.add(rnd, cid, "up", ours.category, len(encode_message(ours)))
                replies[cid] = ours
            if not pending:
                break
            now = time.monotonic()
            if now >= deadline:
                for cid in pending.values():
                    failed[cid] = f"no reply within {self.reply_timeout:g} s"
                break
            if now >= next_liveness:
                online = set(self.grid.get_node_ids())
                for mid, cid in list(pending.items()):
                    if self.node_of[cid] not in online:
                        failed[cid] = "its SuperNode is no longer connected to the SuperLink"
                        del pending[mid]
                next_liveness = now + self.liveness_interval
            time.sleep(self.poll_interval)
        if failed:
            for cid, reason in failed.items():
                self.lost[cid] = {"round": rnd + 1, "node_id": self.node_of[cid],
                                  "reason": reason}
            if self.on_lost is not None:
                self.on_lost(failed, rnd)
        return replies


_ERROR_NAMES = {1: "the ClientApp could not be loaded", 2: "the ClientApp raised",
                3: "message unavailable", 4: "reply unavailable",
                5: "its SuperNode is unavailable", 8: "the ClientApp crashed"}


def error_reason(code: int, reason: str) -> str:
    """A Flower error reply as one readable line (the exception text, without its class)."""
    match = re.fullmatch(r"<class '([\w.]+)'>:<'(.*)'>", reason, flags=re.DOTALL)
    if match:
        kind = match.group(1).rsplit(".", 1)[-1]
        text = match.group(2) if kind == "FedLabelsError" else f"{kind}: {match.group(2)}"
    else:
        text = reason
    return f"{_ERROR_NAMES.get(code, f'Flower error {code}')}: {text}"


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


def greet(grid: FlowerGridABC, nodes: list[int], n_clients: int,
          timeout: float) -> tuple[dict[int, int], dict[int, dict[str, Any]]]:
    """Ask every node who it is; map client id -> node id and check the sites agree."""
    meter = CommMeter()
    probe = FlowerGrid(grid, dict(enumerate(nodes)), meter, reply_timeout=timeout)
    replies = probe.exchange({i: Message(HELLO, category="control")
                              for i in range(len(nodes))}, -1)
    if probe.lost:
        raise FedLabelsError("SuperNode setup failed: " + "; ".join(
            f"node {info['node_id']}: {info['reason']}" for info in probe.lost.values()))
    info = {nodes[i]: dict(r.config) for i, r in replies.items()}
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
    for key in ("n_features", "n_public", "n_classes", "public_digest"):
        values = {node: hello[key] for node, hello in info.items()}
        if len(set(values.values())) > 1:
            raise FedLabelsError(
                f"the SuperNodes disagree on the shared public data ({key}: "
                + ", ".join(f"node {n} (partition-id {info[n]['partition_id']}) has {v}"
                            for n, v in values.items())
                + "); every site must hold the same shared file.")
    return by_pid, {pid: info[node] for pid, node in by_pid.items()}


class StatusFile:
    """The run's status JSON, rewritten atomically on every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {"status": "starting", "rounds_done": 0, "lost": {}}

    def update(self, **changes: Any) -> None:
        self.data.update(changes)
        if self.path:
            write_atomic(self.path, json.dumps(self.data, indent=2, default=str) + "\n")


def run_server(grid: FlowerGridABC, context: Context) -> RunResult | None:
    """The ServerApp main loop (see the module docstring)."""
    spec = DeploySpec.from_run_config(dict(context.run_config))
    status = StatusFile(spec.status)
    try:
        return _run(grid, spec, status)
    except ClientsLost:
        raise  # _run recorded it as "stopped"
    except Exception as exc:
        status.update(status="failed", error=str(exc))
        raise


def _run(grid: FlowerGridABC, spec: DeploySpec, status: StatusFile) -> RunResult | None:
    started = time.perf_counter()
    cfg = spec.config
    status.update(status="waiting for SuperNodes")
    nodes = wait_for_nodes(grid, cfg.clients, spec.node_timeout)
    if len(nodes) > cfg.clients:
        raise FedLabelsError(f"{len(nodes)} SuperNodes are connected but the run has "
                             f"{cfg.clients} clients; stop the extra SuperNodes or raise "
                             "--clients.")
    node_of, hello = greet(grid, nodes, cfg.clients, spec.reply_timeout)
    first = hello[0]
    plan = deploy_plan(cfg, int(first["n_classes"]), int(first["n_features"]))
    learners = plan.learners()
    plan.method.validate(cfg.clients, plan.settings, learners)
    truth = None
    if spec.truth:
        with np.load(spec.truth, allow_pickle=False) as data:
            truth = data["y_public"]
    sizes = [int(hello[c]["n_examples"]) for c in range(cfg.clients)]
    server = plan.method.make_server(plan.context(truth_public=truth), int(first["n_public"]),
                                     learners, sizes)
    meter = CommMeter()
    fgrid = FlowerGrid(grid, node_of, meter, reply_timeout=spec.reply_timeout,
                       poll_interval=spec.poll_interval)
    fgrid.on_lost = partial(check_survivors, plan, learners, fgrid, status=status)
    records: list[RoundRecord] = []
    deployment: dict[str, Any] = {
        "engine": "flower", "client_node_ids": {str(c): n for c, n in node_of.items()},
        "setup_seconds": time.perf_counter() - started, "alive_per_round": []}

    n_rounds, rounds_note = rounds_to_run(plan, learners)  # a one-shot method stops early

    def snapshot(state: str, error: str | None = None) -> RunResult | None:
        deployment.update(status=state, lost={str(c): v for c, v in fgrid.lost.items()})
        if error:
            deployment["error"] = error
        if not any(r.accuracies is not None for r in records):
            return None
        result = build_result(plan, server, records, meter, dataset=cfg.dataset,
                              seed=cfg.seed, config=cfg.to_dict(),
                              federation=dict(spec.extra.get("federation", {})),
                              started=started, wire_format=FLOWER_WIRE_FORMAT,
                              extra={"deployment": dict(deployment),
                                     **({"rounds_run": rounds_note} if rounds_note else {})})
        if spec.output:
            result.save_json(spec.output)
            save_final_arrays(server, spec.output)
        return result

    def on_round(record: RoundRecord) -> None:
        record.server["clients_alive"] = float(len(fgrid.client_ids))
        deployment["alive_per_round"].append(fgrid.client_ids)
        snapshot("running")
        status.update(rounds_done=record.round)
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
    result = snapshot("completed")
    status.update(status="completed", error=None)
    return result


def check_survivors(plan: RunPlan, learners: list[Any], fgrid: FlowerGrid,
                    failed: dict[int, str], rnd: int, status: StatusFile) -> None:
    """After clients were lost: go on if the method accepts the rest, else stop."""
    status.update(lost=dict(fgrid.lost))
    alive = fgrid.client_ids
    detail = "; ".join(f"client {c} (SuperNode {fgrid.node_of[c]}): {why}"
                       for c, why in failed.items())
    if not alive:
        raise ClientsLost(f"round {rnd + 1}: every client was lost ({detail}).")
    method = plan.method
    if not method.tolerates_lost_clients:
        raise ClientsLost(f"round {rnd + 1}: lost {detail}; method {method.name!r} cannot go "
                          "on without all its clients.")
    try:
        method.validate(len(alive), plan.settings, [learners[c] for c in alive])
    except FedLabelsError as exc:
        raise ClientsLost(f"round {rnd + 1}: lost {detail}. Only {len(alive)} client(s) "
                          f"remain ({alive}), too few to go on: {exc}") from None
    print(f"fedlabels: round {rnd + 1}: lost {detail}; continuing with clients {alive}.",
          flush=True)


def server_state_path(output: str | Path) -> Path:
    """Where the server role's final arrays go (e.g. FedCT's consensus ``labels``)."""
    output = Path(output)
    return output.with_name(output.stem + ".server.npz")


def save_final_arrays(server: ServerRole, output: str | Path) -> None:
    """``server.final_arrays()`` beside the result, atomically (nothing if it has none)."""
    arrays = server.final_arrays()
    if not arrays:
        return
    path = server_state_path(output)
    tmp = path.with_name(f".{path.name}.tmp.npz")
    np.savez(tmp, allow_pickle=False, **arrays)
    tmp.replace(path)


app = ServerApp()


@app.main()
def main(grid: FlowerGridABC, context: Context) -> None:
    run_server(grid, context)
