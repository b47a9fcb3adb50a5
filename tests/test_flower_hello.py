"""The ServerApp's check of the sites' hellos (``server_app.greet``): one site of three whose
shared file differs is refused even where the other two agree, and a site's counts must be
integers at their minimum (a site with no examples, a negative size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flwr.app import Message as FlowerMessage

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.convert import from_record_dict, to_record_dict
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.runs.config import RunConfig


def _run_with_hello(tmp_path: Path, **changed: Any) -> None:
    """A loopback FedCT run whose site 1 (node 1002) says ``changed`` in its hello."""
    cfg = RunConfig(method="fedct", dataset="wine", clients=3, model="dt", rounds=1, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    honest = grid.client_app

    def site(message: Any, context: Any) -> Any:
        reply = honest(message, context)
        ours, meta = from_record_dict(reply.content)
        if context.node_id != 1002 or ours.kind != "fedlabels.hello.reply":
            return reply
        said = Message(ours.kind, config={**ours.config, **changed}, category=ours.category)
        return FlowerMessage(to_record_dict(said, None, **meta), reply_to=message)

    grid.client_app = site
    run_server(grid, server_context(prepared.spec))


def test_one_site_of_three_with_another_shared_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FedLabelsError, match=r"the SuperNodes disagree on the shared public "
                                             r"data \(public_digest: .*node 1002 "
                                             r"\(partition-id 1\) has 0123456789abcdef"):
        _run_with_hello(tmp_path, public_digest="0123456789abcdef")


@pytest.mark.parametrize("key,value,low", [("n_examples", 0, 1), ("n_features", -3, 1),
                                           ("partition_id", -1, 0)])
def test_a_count_below_its_minimum_is_refused(tmp_path: Path, key: str, value: int,
                                              low: int) -> None:
    with pytest.raises(FedLabelsError, match=rf"SuperNode 1002 answered hello with {key} = "
                                             rf"{value}; expected an integer >= {low}"):
        _run_with_hello(tmp_path, **{key: value})
