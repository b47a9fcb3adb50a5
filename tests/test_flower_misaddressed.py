"""A site answers only messages addressed to its own client id: a message for client 0
delivered to site 1's SuperNode (a server that mixes up its sites, or replays one site's
message to another) is refused before anything is computed, and site 1 is lost."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Message

from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.spec import HELLO
from fedlabels.runs.config import RunConfig


class Misaddressing(LoopbackGrid):
    """Every message after the hello to node 1002 (site 1) says it is for client 0."""

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        batch = list(messages)
        for msg in batch:
            header = msg.content.config_records["fedlabels"]
            if msg.metadata.dst_node_id == 1002 and header["kind"] != HELLO:
                header["cid"] = 0
        return super().push_messages(batch)


def test_a_message_for_another_client_is_refused(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    cfg = RunConfig(method="fedct", dataset="wine", clients=4, model="dt", rounds=1, seed=0,
                    options={"quorum": 1.0})
    prepared, honest = loopback_deployment(cfg, tmp_path / "sites")
    grid = Misaddressing(honest.client_app, [prepared.node_settings(c) for c in range(4)],
                         dict(honest.contexts[1001].run_config))
    with caplog.at_level(logging.ERROR, logger="fedlabels.site"):
        result = run_server(grid, server_context(prepared.spec))
    assert result is not None
    assert list(result.extra["deployment"]["lost"]) == ["1"]
    assert "partition-id=1 (node 1002) got a message for client 0" in caplog.text
