"""A Flower result shows what each site's own ledger enforced, beside the coordinator's
accounting: every DP site reports its ledger's figures in its replies, the result's
``privacy.site_ledgers`` keeps them marked as the sites' word (not verified by the
coordinator) and flags a disagreement, and ``fedlabels report`` shows both.

Runs the deployed ServerApp and ClientApp in this process (:mod:`fedlabels.engines.flower
.loopback`, as the other Flower tests do); the independent oracle of a site's figures is
its ledger on disk as ``fedlabels deploy ledger`` reads it (:func:`read_ledgers`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Message

from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site_ledgers import (
    RUN_KEYS,
    SITE_LEDGER,
    SOURCE,
    read_report,
    site_ledgers_block,
)
from fedlabels.engines.flower.site_plan import load_site_plan
from fedlabels.engines.flower.site_privacy import REPORT_LIFETIME, key_path, ledger_dir
from fedlabels.engines.flower.site_state import site_key
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY
from fedlabels.privacy.site_ledger import read_ledgers
from fedlabels.results import RunResult, site_ledgers_line
from fedlabels.results.caveats import run_warnings
from fedlabels.runs.config import RunConfig

CFG = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                rounds=2, period=1, seed=0,
                options={"epsilon": 2.0, "sensitivity": 40, "mechanism": "xor"})


def _edited(edit: dict[int, Any]) -> Any:
    """The ClientApp, with the ``site_ledger`` header of partition ``i``'s replies passed
    through ``edit[i]`` (None: dropped, a site that reports nothing)."""
    def app(message: Message, context: Any) -> Message:
        reply = client_app(message, context)
        pid = int(context.node_config["partition-id"])
        header = reply.content.config_records["fedlabels"]
        if pid in edit and SITE_LEDGER in header:
            text = edit[pid] and edit[pid](header[SITE_LEDGER])
            del header[SITE_LEDGER]
            if text:
                header[SITE_LEDGER] = text
        return reply
    return app


def _run(tmp_path: Path, *, edit: dict[int, Any] | None = None,
         node: dict[str, Any] | None = None, runs: int = 1) -> tuple[Any, RunResult]:
    prepared, _ = loopback_deployment(CFG, tmp_path / "sites")
    nodes = [{**prepared.node_settings(c), **(node or {})} for c in range(CFG.clients)]
    for _ in range(runs):  # each a new Flower run of the same sites
        grid = LoopbackGrid(_edited(edit or {}), nodes,
                            {RUN_CONFIG_KEY: prepared.spec.to_json()})
        result = run_server(grid, server_context(prepared.spec))
    assert result is not None
    return prepared, result


def _on_disk(prepared: Any, cid: int) -> dict[str, Any]:
    """Site ``cid``'s ledger as ``fedlabels deploy ledger`` reads it (every entry checked)."""
    settings = prepared.node_settings(cid)
    rows = read_ledgers(ledger_dir(settings), site_key(key_path(settings)), 1e-5)
    assert len(rows) == 1
    return rows[0]


LIFETIME = {REPORT_LIFETIME: "true"}


def test_a_dp_result_shows_what_each_sites_ledger_enforced(tmp_path: Path) -> None:
    prepared, result = _run(tmp_path, node=LIFETIME)
    privacy = result.extra["privacy"]
    block = privacy["site_ledgers"]
    assert block["source"] == SOURCE == "reported by the site, not verified by the coordinator"
    assert block["disagreements"] == []
    assert sorted(block["sites"]) == ["0", "1", "2"]
    for cid, site in block["sites"].items():
        disk = _on_disk(prepared, int(cid))
        assert site["ledger_epsilon"] == pytest.approx(disk["epsilon"], rel=1e-9)
        assert site["ledger_releases"] == disk["releases"] == site["releases"] == CFG.rounds
        assert site["ledger_delta"] == disk["delta"] == site["delta"] == privacy["delta"]
        # the site's budget is one run of its plan, as its ledger recorded it
        assert site["budget"] == pytest.approx(disk["plan_budget"], rel=1e-12)
        assert site["budget_from"] == "privacy-plan" and site["round"] == CFG.rounds
        assert site["plan"] == load_site_plan(prepared.node_settings(int(cid))["privacy-plan"])
        # this run alone: its ε is the coordinator's per-client ε (the same releases)
        assert site["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-9)
    # functions of the plan and the number of releases, not of the data: three sites with
    # different private rows report the same figures
    figures = [{k: v for k, v in s.items() if k != "plan"} for s in block["sites"].values()]
    assert figures[0] == figures[1] == figures[2]
    line = site_ledgers_line(privacy)
    assert line is not None and "3 of 3 sites reported" in line and SOURCE in line
    assert "no disagreement" in line
    assert not any("ledgers" in w for w in run_warnings(result))
    saved = json.loads(Path(prepared.spec.output).read_text())
    assert saved["privacy"]["site_ledgers"] == json.loads(json.dumps(block))


def test_the_lifetime_stays_at_the_site_unless_it_says_otherwise(tmp_path: Path) -> None:
    """By default a site reports this run's figures and its plan only: its ledger's lifetime
    (releases, ε, budget) would tell this coordinator about the site's other runs."""
    prepared, result = _run(tmp_path, node={"ledger-epsilon": 100.0}, runs=2)
    privacy = result.extra["privacy"]
    block = privacy["site_ledgers"]
    assert block["disagreements"] == []
    for cid, site in block["sites"].items():
        assert set(site) == RUN_KEYS | {"round"}
        assert site["releases"] == CFG.rounds < _on_disk(prepared, int(cid))["releases"]
        assert site["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-9)
    line = site_ledgers_line(privacy)
    assert line is not None and "3 of 3 sites reported" in line and "lifetime" not in line
    from fedlabels.reporting.report import write_report

    written, _ = write_report([result], tmp_path / "page.html")
    page = written["report"].read_text()
    assert "<h2>Sites' own ledgers</h2>" in page and "report-lifetime=true" in page


def test_a_later_run_shows_the_sites_lifetime_beside_the_run(tmp_path: Path) -> None:
    """Sites whose operators allow more runs (ledger-epsilon): the second run's result shows
    this run's ε (the coordinator's) and the ledger's lifetime ε over both runs."""
    prepared, result = _run(tmp_path, node={"ledger-epsilon": 100.0, **LIFETIME}, runs=2)
    privacy = result.extra["privacy"]
    block = privacy["site_ledgers"]
    assert block["disagreements"] == []
    for cid, site in block["sites"].items():
        disk = _on_disk(prepared, int(cid))
        assert site["releases"] == CFG.rounds and site["ledger_releases"] == 2 * CFG.rounds
        assert site["ledger_releases"] == disk["releases"]
        assert site["ledger_epsilon"] == pytest.approx(disk["epsilon"], rel=1e-9)
        assert site["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-9)
        assert site["ledger_epsilon"] > 1.2 * site["epsilon"]
        assert (site["budget"], site["budget_from"]) == (100.0, "ledger-epsilon")


def test_a_site_that_reports_nothing_or_more_than_planned_is_flagged(tmp_path: Path) -> None:
    def more(text: str) -> str:
        return json.dumps({**json.loads(text), "epsilon": 7.5, "releases": 5})

    _, result = _run(tmp_path, edit={1: None, 2: more})
    block = result.extra["privacy"]["site_ledgers"]
    assert block["sites"]["1"] == {"reported": False}
    assert block["sites"]["2"]["epsilon"] == 7.5
    flags = block["disagreements"]
    assert flags[0] == "site 1 reported no ledger figures"
    assert flags[1].startswith("site 2's ledger spent ε = 7.5 in this run (5 release(s)), "
                               "more than the coordinator's ε = 2")
    assert len(flags) == 2
    warning = [w for w in run_warnings(result) if "ledgers" in w]
    assert len(warning) == 1 and "not verified by the coordinator" in warning[0]
    assert "site 1 reported no ledger figures" in warning[0]
    line = site_ledgers_line(result.extra["privacy"])
    assert line is not None and "2 of 3 sites reported" in line and "2 disagreement(s)" in line


def test_fedlabels_report_shows_the_sites_figures_beside_the_coordinators(
        tmp_path: Path) -> None:
    from fedlabels.reporting.report import write_report

    _, result = _run(tmp_path, edit={1: None})
    written, warnings = write_report([result], tmp_path / "page.html")
    page = written["report"].read_text()
    assert "<h2>Sites' own ledgers</h2>" in page and "not verified by the coordinator" in page
    # site, the coordinator's ε, the site's own this run, its δ, its releases
    assert page.count("<td>2.00</td><td>2.00</td><td>1e-05</td><td>2</td>") == 2
    assert "<td>1</td><td>2.00</td><td>—</td>" in page  # site 1 reported nothing
    assert any("site 1 reported no ledger figures" in w for _, w in warnings)


@pytest.mark.parametrize("text, why", [
    ("{", "Expecting"), (json.dumps([1]), "not the keys"), ("x" * 20_000, "at most"),
    (None, "not text")])
def test_an_unreadable_report_is_flagged_not_trusted(text: Any, why: str) -> None:
    got = read_report(text, 0)
    assert why in got["malformed"] and got["round"] == 1
    block = site_ledgers_block({"epsilon": 1.0, "delta": 1e-5}, {}, {0: got}, {}, 1)
    assert block is not None and block["disagreements"][0].startswith(
        "site 0 sent an unreadable ledger report")


def _report(**changes: Any) -> dict[str, Any]:
    good = {"epsilon": 1.0, "delta": 1e-5, "releases": 2, "ledger_epsilon": 1.0,
            "ledger_delta": 1e-5, "ledger_releases": 2, "budget": 1.0,
            "budget_from": "privacy-plan",
            "plan": {"method": "dp-fedct", "rounds": 2, "period": 1,
                     "options": {"epsilon": 1.0}}}
    return read_report(json.dumps({**good, **changes}), 1)


def test_each_disagreement_is_named() -> None:
    privacy = {"epsilon": 1.0, "delta": 1e-5}
    config = {"method": "dp-fedct", "rounds": 2, "period": 1, "options": {"epsilon": 1.0}}
    assert site_ledgers_block(privacy, config, {}, {}, 2) is None  # no site charges
    sites = {0: _report(), 1: _report(delta=1e-6), 2: _report(ledger_epsilon=3.0),
             3: _report(plan={"method": "dp-fedct", "rounds": 4, "period": 1,
                              "options": {"epsilon": 8.0}}),
             4: _report(epsilon=1.0 + 1e-12)}  # within the ledgers' relative tolerance
    block = site_ledgers_block(privacy, config, sites, {5: {"round": 1}}, 6)
    assert block is not None
    assert block["sites"]["5"] == {"reported": False, "lost": True}  # the lost are listed
    assert block["disagreements"] == [
        "site 1 states its ε at δ = 1e-06, the coordinator at δ = 1e-05: not compared",
        "site 2's ledger spent ε = 3 in its lifetime, more than its own budget ε = 1",
        "site 3's privacy-plan is not the run's: rounds 4 (the run's 2); option epsilon "
        "8.0 (the run's 1.0)"]
    run_only = {k: v for k, v in _report().items() if k in RUN_KEYS}
    assert "malformed" not in read_report(json.dumps(run_only), 1)  # report-lifetime false
    assert "malformed" in read_report(json.dumps({**run_only, "budget": 1.0}), 1)  # part of it
    for bad in ({"epsilon": math.inf}, {"epsilon": "1"}, {"releases": 1.5},
                {"budget_from": "coordinator"}, {"plan": [1]}, {"budget": -1}):
        assert "malformed" in _report(**bad), bad


def test_a_resumed_run_shows_the_reports_of_the_replies_given_again(tmp_path: Path) -> None:
    """The ServerApp dies pulling round 3's replies (the sites answered and charged it); the
    resumed run re-sends round 3 and each site gives its recorded reply again, with the
    report recorded with it: the result shows 3 releases, not round 2's report."""
    from dataclasses import replace

    from test_flower_faults import Crash, CrashingGrid

    cfg = replace(CFG, rounds=3)
    prepared, _ = loopback_deployment(cfg, tmp_path / "sites")
    spec = prepared.spec
    nodes = [{**prepared.node_settings(c), **LIFETIME} for c in range(cfg.clients)]
    crashing = CrashingGrid(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()}, crash_at=4)
    with pytest.raises(Crash):  # exchanges: hello, rounds 1, 2, 3 <- dies pulling
        run_server(crashing, server_context(spec))
    resumed = replace(spec, resume=True)
    grid = LoopbackGrid(client_app, nodes, {RUN_CONFIG_KEY: resumed.to_json()})
    result = run_server(grid, server_context(resumed, run_id=43))
    assert result is not None
    privacy = result.extra["privacy"]
    block = privacy["site_ledgers"]
    assert block["disagreements"] == []
    for cid, site in block["sites"].items():
        assert (site["round"], site["releases"], site["ledger_releases"]) == (3, 3, 3)
        assert site["ledger_releases"] == _on_disk(prepared, int(cid))["releases"]
        assert site["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-9)


def test_deploy_local_passes_report_lifetime_as_the_site_reads_it() -> None:
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.deploy.launcher import check_site_settings

    assert check_site_settings({REPORT_LIFETIME: "yes"}) == {REPORT_LIFETIME: True}
    with pytest.raises(FedLabelsError, match="report-lifetime must be true or false"):
        check_site_settings({REPORT_LIFETIME: "sometimes"})
