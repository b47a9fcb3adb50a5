"""A site's operator reads in its log what the site sent for each message, whether the
method's guarantee covers each value, and what its own ledger says after it.

Found walking docs/deployment.md with real processes: a site's executor log held Flower's
connection lines and nothing of fedlabels' unless a message failed. Runs the deployed
ServerApp and ClientApp in this process (:mod:`fedlabels.engines.flower.loopback`); the
oracles are the method's declared threat model and the site's ledger on disk as
``fedlabels deploy ledger`` reads it."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site_log import SITE_LOGGER
from fedlabels.engines.flower.site_privacy import key_path, ledger_dir
from fedlabels.engines.flower.site_state import site_key
from fedlabels.privacy.site_ledger import read_ledgers
from fedlabels.runs.config import RunConfig

DP = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt", rounds=2,
               period=1, seed=0, options={"epsilon": 2.0, "sensitivity": 40,
                                          "mechanism": "xor"})


def _site_lines(tmp_path: Path, cfg: RunConfig,
                caplog: pytest.LogCaptureFixture) -> tuple[Any, dict[int, list[str]]]:
    caplog.set_level(logging.INFO, logger=SITE_LOGGER)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    assert run_server(grid, server_context(prepared.spec)) is not None
    lines: dict[int, list[str]] = {}
    for record in caplog.records:
        if record.name == SITE_LOGGER:
            pid = int(re.search(r"partition-id=(\d+)", record.getMessage()).group(1))
            lines.setdefault(pid, []).append(record.getMessage())
    return prepared, lines


def test_a_dp_site_logs_each_release_its_cover_and_its_ledger(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    prepared, lines = _site_lines(tmp_path, DP, caplog)
    assert sorted(lines) == [0, 1, 2]
    for cid, said in lines.items():
        hello, *rounds = said
        assert "answered the coordinator's hello" in hello
        assert len(rounds) == DP.rounds  # one line a message: evaluation rides along
        for rnd, line in enumerate(rounds, 1):
            assert f"round {rnd}, message {rnd} " in line
            assert "bits (bit-packed one-hot rows after bitwise randomized response on U; " \
                   "covered by the method's guarantee)" in line
            assert "accuracy (test accuracy for the run record; outside the method's " \
                   "guarantee)" in line
        assert "The method states no guarantee" not in rounds[0]
        settings = prepared.node_settings(cid)
        disk = read_ledgers(ledger_dir(settings), site_key(key_path(settings)), 1e-5)[0]
        assert f"this run {disk['releases']} release(s), ε = {disk['epsilon']:.4g} " \
               f"(δ = 1e-05)" in rounds[-1]
        assert f"lifetime on this data {disk['releases']} release(s)" in rounds[-1]
        assert "(one run of its privacy-plan)" in rounds[-1]


def test_a_site_without_a_guarantee_says_so(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=3, model="dt",
                    rounds=1, period=1, seed=0)
    _, lines = _site_lines(tmp_path, cfg, caplog)
    line = lines[0][1]
    assert "labels (bit-packed hard labels on U; not protected: the method states no " \
           "guarantee)" in line
    assert "Ledger" not in line and line.endswith("The method states no guarantee.")


def test_the_site_executor_prints_the_site_lines(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # a task process of the pinned executor prints the site's INFO lines on its stderr
    # (Python's last-resort handler prints warnings and errors only)
    import flwr.supernode.runtime.run_clientapp as flower_task

    from fedlabels.deploy import site_exec

    log = logging.getLogger(SITE_LOGGER)
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "propagate", log.propagate)
    monkeypatch.setattr(log, "level", log.level)
    for name in ("install_from_fab", "get_load_client_app_fn"):  # run_task replaces them
        monkeypatch.setattr(flower_task, name, getattr(flower_task, name))
    monkeypatch.setattr(flower_task, "run_clientapp",
                        lambda **_: log.info("round 1, message 1 (fedct.train): sent labels"))
    site_exec.run_task("127.0.0.1:1", "token", None)
    site_exec.run_task("127.0.0.1:1", "token", None)  # a handler once, not once a task
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d round 1, "
                                               r"message 1 \(fedct\.train\): sent labels", line)
                                  for line in said)


def test_a_line_names_no_party_that_a_mode_changes() -> None:
    # DP-FedAvg's declared party ("not the server") is its default mode's; under
    # aggregation=secure the site is protected against the server too, so a first line that
    # named the declared party (it did, on a real secure run) told the operator the opposite
    import numpy as np

    from fedlabels.comm import Message as FLMessage
    from fedlabels.engines.flower.site_log import answered
    from fedlabels.methods import get_method

    sent = FLMessage("dpfedavg.masked", arrays={"masked": np.zeros(3, dtype=np.uint64)})
    line = answered("S", 1, 1, "dpfedavg.train", [sent], get_method("dp-fedavg").threat_model,
                    None)
    assert line == ("S: round 1, message 1 (dpfedavg.train): sent masked (the client's "
                    "clipped model update; covered by the method's guarantee).")
