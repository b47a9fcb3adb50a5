"""Flower's own payload sizes, reported next to fedlabels' encoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.serde import recorddict_to_proto

from fedlabels.engines.flower.convert import flower_bytes
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.runs.config import RunConfig


def _message(content: RecordDict) -> Message:
    LoopbackGrid(lambda m, c: m, [], {})  # sets Flower's process-level run identity
    return Message(content, dst_node_id=7, message_type="train.x", group_id="0")


def test_flower_bytes_is_the_protobuf_payload_plus_small_headers() -> None:
    big = np.random.default_rng(0).integers(0, 255, size=2**20, dtype=np.uint8)
    content = RecordDict({"arrays": ArrayRecord({"a": Array(big)}),
                          "config": ConfigRecord({"kind": "x", "n": 3})})
    size = flower_bytes(_message(content))
    proto = recorddict_to_proto(content).ByteSize()  # the same content as one protobuf
    assert big.nbytes < proto <= size <= proto + 2_000
    twice = RecordDict({"arrays": ArrayRecord({"a": Array(big), "b": Array(big.copy())})})
    # Flower pushes an object once: the same array under two names costs one copy
    assert flower_bytes(_message(twice)) < size + 1_000


def test_deployment_reports_flower_bytes_next_to_ours(tmp_path: Path) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt", rounds=2,
                    seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None
    report = result.extra["deployment"]["flower_bytes"]
    assert [r["round"] for r in report["per_round"]] == [1, 2]
    assert report["fedlabels_down"] == sum(sum(r.bytes_down) for r in result.rounds)
    assert report["fedlabels_up"] == sum(sum(r.bytes_up) for r in result.rounds)
    messages = 3 * 2  # one exchange per round and client at most (evaluation rides along)
    for way in ("down", "up"):
        ours, flower = report[f"fedlabels_{way}"], report[f"flower_{way}"]
        assert ours > 0 and ours <= flower <= ours + 3_000 * 2 * messages, (way, ours, flower)


def test_an_evaluation_served_with_a_reply_is_encoded_once_and_counted_as_encoded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation answered with the client's last protocol reply is counted at its
    encoded size: the request sent and the one it answered encoded once each (it was
    encoded twice, to compare and to count), the answer once; a request other than the one
    answered is not served."""
    from fedlabels.comm import Message as Ours
    from fedlabels.comm import encode_message
    from fedlabels.engines.flower import grid as grid_module
    from fedlabels.runs.loop import CommMeter

    def evaluation(n: int) -> Ours:
        return Ours("evaluate", arrays={"rows": np.arange(n)}, category="evaluation")

    meter = CommMeter()
    grid = grid_module.FlowerGrid(None, {0: 5, 1: 6}, meter)
    answer = Ours("score", config={"accuracy": 0.5}, category="evaluation")
    grid._evaluated = {0: (3, evaluation(4), answer), 1: (3, evaluation(4), answer)}
    encoded: list[int] = []
    monkeypatch.setattr(grid_module, "encode_message",
                        lambda m: (encoded.append(id(m)), encode_message(m))[1])
    sent = {0: evaluation(4), 1: evaluation(5)}  # client 1's is not the one it answered
    assert grid._answered(sent, 3) == {0: answer}
    assert encoded.count(id(sent[0])) == 1 and encoded.count(id(sent[1])) == 1
    assert encoded.count(id(answer)) == 1 and len(encoded) == 5  # and the 2 answered
    assert meter.bytes == {(3, 0, "down", "evaluation"): len(encode_message(sent[0])),
                           (3, 0, "up", "evaluation"): len(encode_message(answer))}
