"""A site's reply is untrusted input: an evaluation answer attached to a reply whose message
asked for none (the hello, a training message of a round without evaluation) is ignored by
the ServerApp, which once looked up the request it never made (``KeyError``: a site could
stop the run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flwr.app import Message as FlowerMessage

from fedlabels.comm import Message
from fedlabels.engines.flower.convert import attached_message, from_record_dict, to_record_dict
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.runs.config import RunConfig


def test_an_answer_nobody_asked_for_is_ignored(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="wine", clients=3, model="dt", rounds=2, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    honest = grid.client_app
    unasked = Message("evaluate.reply", config={"accuracy": 1.0}, category="evaluation")
    attached: list[str] = []

    def site(message: Any, context: Any) -> Any:
        reply = honest(message, context)
        if context.node_id != 1002 or attached_message(message.content) is not None:
            return reply
        ours, meta = from_record_dict(reply.content)
        attached.append(ours.kind)
        return FlowerMessage(to_record_dict(ours, unasked, **meta), reply_to=message)

    grid.client_app = site
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None and len(result.rounds) == cfg.rounds
    assert "fedlabels.hello.reply" in attached
    assert result.extra["deployment"]["lost"] == {}
