"""A process-free Flower ``Grid``: the real ServerApp loop and ClientApp, in one process.

:class:`LoopbackGrid` implements Flower's ``Grid`` by calling the ClientApp directly, with one
``Context`` (node config and persistent ``state``) per fake SuperNode. Message content goes
through Flower's protobuf serialisation both ways, and a ClientApp exception becomes an error
reply, as in deployment. It exists to test the adapters (conversion, state in
``context.state``, lost clients) in milliseconds instead of Flower's seconds per round.

It sets Flower's process-level ``TaskIdentity`` and a message's private ``_message_id``, the
same semi-private API Flower's own in-memory grid uses; hence the narrow ``flwr`` pin.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from fedlabels.engines.flower.client_app import app as deployed_client_app
from fedlabels.engines.flower.prepare import PreparedRun, prepare_run
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY, DeploySpec
from fedlabels.runs.config import RunConfig

SERVER_NODE_ID = 1
_RUN_IDS = itertools.count(42)
_CLIENT_APP_RAISED_EXCEPTION = 2  # flwr.common.constant.ErrorCode


def _wire(content: RecordDict) -> RecordDict:
    return recorddict_from_proto(recorddict_to_proto(content))


class LoopbackGrid(Grid):
    """Flower ``Grid`` over ClientApp calls in this process.

    Parameters
    ----------
    client_app : callable
        The ClientApp (``client_app(message, context) -> Message``).
    node_configs : list of dict
        One node config per fake SuperNode (node ids are 1001, 1002, ...).
    run_config : dict
        The run config every context carries.
    die_after : dict of int to int, optional
        ``{node_index: k}``: that node answers ``k`` messages, then vanishes from
        ``get_node_ids`` and never replies (a crashed SuperNode).
    hang_after : dict of int to int, optional
        Like ``die_after`` but the node stays listed as connected (only the reply timeout
        can detect it).
    run_id : int, optional
        The Flower run id every context carries; default a new one per grid, as a new
        deployed run has.
    """

    def __init__(self, client_app: Any, node_configs: list[dict[str, Any]],
                 run_config: dict[str, Any], *, die_after: dict[int, int] | None = None,
                 hang_after: dict[int, int] | None = None, run_id: int | None = None) -> None:
        run_id = next(_RUN_IDS) if run_id is None else run_id  # a new Flower run, as deployed
        TaskIdentity.run_id = run_id
        TaskIdentity.task_id = 1
        TaskIdentity.node_id = SERVER_NODE_ID
        self.client_app = client_app
        self.run_id = run_id
        self.contexts = {1001 + i: Context(run_id=run_id, node_id=1001 + i,
                                           node_config=dict(cfg), state=RecordDict(),
                                           run_config=dict(run_config))
                         for i, cfg in enumerate(node_configs)}
        self.budget = {1001 + i: k for i, k in (die_after or {}).items()}
        self.hang = {1001 + i: k for i, k in (hang_after or {}).items()}
        self.dead: set[int] = set()
        self.replies: dict[str, Message] = {}
        self.counter = 0

    # the abstract Grid API -------------------------------------------------------
    def set_run(self, run: Run) -> None:  # pragma: no cover - not used in loopback
        self.run_id = run.run_id

    @property
    def run(self) -> Any:  # pragma: no cover
        return None

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:  # pragma: no cover
        return Message(content, dst_node_id=dst_node_id, message_type=message_type,
                       group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return [n for n in self.contexts if n not in self.dead]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            self.counter += 1
            msg.metadata.__dict__["_message_id"] = f"m{self.counter}"
            ids.append(msg.metadata.message_id)
            node = msg.metadata.dst_node_id
            if node in self.dead or self.hang.get(node, 1) <= 0:
                continue
            if node in self.budget:
                if self.budget[node] <= 0:
                    self.dead.add(node)
                    continue
                self.budget[node] -= 1
            if node in self.hang:
                self.hang[node] -= 1
            inbound = Message(_wire(msg.content), dst_node_id=node,
                              message_type=msg.metadata.message_type,
                              group_id=msg.metadata.group_id)
            inbound.metadata.__dict__["_message_id"] = msg.metadata.message_id
            try:
                reply = self.client_app(inbound, self.contexts[node])
                reply = Message(_wire(reply.content), reply_to=inbound)
            except Exception as exc:  # what flwr-clientapp does with a raising ClientApp
                reason = str(type(exc)) + ":<'" + str(exc) + "'>"
                reply = Message(Error(code=_CLIENT_APP_RAISED_EXCEPTION, reason=reason),
                                reply_to=inbound)
            self.replies[msg.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(mid) for mid in list(message_ids) if mid in self.replies]

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def server_context(spec: DeploySpec, run_id: int = 42) -> Context:
    """A ServerApp ``Context`` of Flower run ``run_id`` carrying ``spec`` in its run
    config."""
    return Context(run_id=run_id, node_id=SERVER_NODE_ID, node_config={},
                   state=RecordDict(), run_config={RUN_CONFIG_KEY: spec.to_json()})


def loopback_deployment(cfg: RunConfig, root: str | Path, *, reply_timeout: float = 5.0,
                        die_after: dict[int, int] | None = None,
                        hang_after: dict[int, int] | None = None,
                        ) -> tuple[PreparedRun, LoopbackGrid]:
    """Prepare ``cfg``'s sites under ``root``, and a grid of the real ClientApp over them.

    ``run_server(grid, server_context(prepared.spec))`` then runs the deployed run in this
    process (replies are pulled without waiting: ``poll_interval`` is 0). Its app is written
    with ``overwrite``: a test may run it again from scratch, as a coordinator that means to.
    ``reply_timeout`` is the spec's; ``die_after`` and ``hang_after`` make sites crash or
    hang, as :class:`LoopbackGrid`'s.
    """
    prepared = prepare_run(cfg, root, reply_timeout=reply_timeout, node_timeout=2.0,
                           poll_interval=0.0, overwrite=True)
    nodes = [prepared.node_settings(c) for c in range(cfg.clients)]
    grid = LoopbackGrid(deployed_client_app, nodes, {RUN_CONFIG_KEY: prepared.spec.to_json()},
                        die_after=die_after, hang_after=hang_after)
    return prepared, grid
