"""A site that declines evaluation (node config ``evaluate=false``): its test scores, which
the privacy guarantee may not cover and whose test set the coordinator ships, never leave
it; the run goes on and the result says how many sites declined."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flwr.app import Context, Message

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.convert import attached_message, from_record_dict
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY
from fedlabels.runs.config import RunConfig

CFG = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt", rounds=2,
                seed=0, options={"epsilon": 1.0, "mechanism": "xor"})


def _run(tmp_path: Path, declining: set[int], value: Any = False,
         cfg: RunConfig = CFG) -> tuple[Any, list[Any]]:
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [{**c.node_config, **({"evaluate": value} if c.node_config["partition-id"]
                                    in declining else {})} for c in first.contexts.values()]
    sent: list[tuple[int, Any]] = []

    def recording(message: Message, context: Context) -> Message:
        reply = client_app(message, context)
        part = int(context.node_config["partition-id"])
        ours, _ = from_record_dict(reply.content)
        sent.append((part, ours))
        answer = attached_message(reply.content)
        if answer is not None:
            sent.append((part, answer))
        return reply

    grid = LoopbackGrid(recording, configs, {RUN_CONFIG_KEY: prepared.spec.to_json()})
    return run_server(grid, server_context(prepared.spec)), sent


def test_a_declining_site_sends_no_score_and_the_run_goes_on(tmp_path: Path) -> None:
    result, sent = _run(tmp_path, {1})
    assert result is not None and len(result.rounds) == CFG.rounds
    evaluations = [(p, m) for p, m in sent if m.category == "evaluation"]
    assert {p for p, _ in evaluations} == {0, 1, 2}
    for part, message in evaluations:
        if part == 1:
            assert dict(message.config) == {"declined": True} and not message.arrays
        else:
            assert 0.0 <= message.config["accuracy"] <= 1.0
    evaluated = [r for r in result.rounds if r.accuracies is not None]
    assert evaluated and all(len(r.accuracies) == 2 for r in evaluated)
    assert all(r.server["evaluation_declined"] == 1.0 for r in evaluated)
    from fedlabels.results.caveats import run_warnings

    assert any("1 of 3 site(s) declined evaluation" in w for w in run_warnings(result))


def test_every_site_declining_still_gives_a_result(tmp_path: Path) -> None:
    result, sent = _run(tmp_path, {0, 1, 2}, value="false")
    assert result is not None and len(result.rounds) == CFG.rounds
    assert not [m for _, m in sent if "accuracy" in m.config]
    assert all(r.accuracies is None for r in result.rounds)  # not evaluated: no scores
    assert result.final is None and result.rounds[-1].server["evaluation_declined"] == 3
    assert "not evaluated" in repr(result)
    result.to_dict()  # a result file can be written
    from fedlabels.results.caveats import run_warnings

    assert any("every site (3) declined evaluation" in w for w in run_warnings(result))
    from fedlabels.results.run_result import format_table

    assert "declined by the sites" in format_table([result.summary_row()])


def test_a_bad_evaluate_value_is_refused_by_the_site(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(FedLabelsError):
        _run(tmp_path, {0, 1, 2}, value="sometimes")
    assert "node config evaluate must be true or false, got 'sometimes'" in caplog.text


@pytest.mark.parametrize("aggregation", ["plain", "secure"])
def test_a_declining_site_sends_no_teacher_accuracy_in_its_votes(
        tmp_path: Path, aggregation: str) -> None:
    """DP-PATE's vote reply carries the teachers' test accuracy (on the test set the
    coordinator ships): a protocol reply, not an evaluation, so it left a site with
    evaluate=false, and a coordinator with a test set of chosen records learnt, noiseless,
    whether the site's teachers label them right."""
    cfg = RunConfig(method="dp-pate", dataset="breast_cancer", clients=3, model="dt",
                    rounds=1, seed=0, options={"epsilon": 8.0, "aggregation": aggregation})
    result, sent = _run(tmp_path, {1}, cfg=cfg)
    assert result is not None and len(result.rounds) == 1
    votes = [(p, m) for p, m in sent if m.kind in ("pate.votes", "pate.masked")]
    assert {p for p, _ in votes} == {0, 1, 2}
    for part, message in votes:
        assert ("teacher_accuracy" in message.config) == (part != 1)
    assert 0.0 <= result.rounds[0].server["teacher_mean_accuracy"] <= 1.0
