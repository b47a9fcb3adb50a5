"""DP-FedAvg's secure aggregation over the Flower loopback path (the real ServerApp and
ClientApp in this process, as in test_flower_faults.py): a site answers round 1's first
attempt, then its SuperNode dies before the reply reaches the server. The server retries
with the three others under fresh masks and decodes their sum; every attempt a site answered
is charged in its own ledger on disk (the dead site's too), and the round's attempts, the
decoded groups and every client's ε are the simulator's for the same dropout. The retry is
a release beyond one a round: the sites' plans allow it with ``retries`` (their lifetime
budget, one run of the plan, then covers it); without it the server asks no retry and gives
the round up, and sites whose plan allows other retries than the coordinator's refuse its
first attempt, the run stopping in one line that names the option. DP-PATE's secure vote
is checked the same way."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Message as FlowerMessage

from fedlabels.api import load_federation
from fedlabels.comm import Message
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site_privacy import key_path, ledger_dir
from fedlabels.engines.flower.site_state import site_key
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.learners import as_models
from fedlabels.privacy.ledger import account_per_client
from fedlabels.privacy.site_ledger import read_ledgers
from fedlabels.runs.config import RunConfig
from fedlabels.runs.session import build_session

pytest.importorskip("flwr")

CFG = RunConfig(method="dp-fedavg", dataset="breast_cancer", clients=4, model="mlp(hidden=8)",
                rounds=2, period=1, seed=0,
                options={"noise": "discrete", "aggregation": "secure",
                         "noise_multiplier": 1.0, "min_group": 3, "retries": 1})
#: the site that drops out, the round and attempt whose reply it never delivers
SITE, ROUND, ATTEMPT = 3, 1, 0
#: the attempt kinds and their round (DP-PATE votes once, in round 0)
DROPPED_ROUND = {"dpfedavg.train": ROUND, "pate.secure_vote": 0}
PATE = RunConfig(method="dp-pate", dataset="breast_cancer", clients=4, model="dt", rounds=1,
                 period=1, seed=0,
                 options={"aggregation": "secure", "noise_sigma": 4.0, "queries": 30,
                          "query_selection": "random", "min_group": 3, "retries": 1})


def dropped(kind: str, config: Mapping[str, object], rnd: int | None = None) -> bool:
    return (kind in DROPPED_ROUND and int(str(config["round"] if rnd is None else rnd))
            == DROPPED_ROUND[kind] and int(str(config["attempt"])) == ATTEMPT)


class DiesAfterAnswering(LoopbackGrid):
    """Site SITE handles the dropped attempt (it trains, charges and masks), then its
    SuperNode dies before the reply is pulled: the server never sees it."""

    def push_messages(self, messages: Iterable[FlowerMessage]) -> Iterable[str]:
        batch = list(messages)
        ids = list(super().push_messages(batch))
        for msg, mid in zip(batch, ids, strict=True):
            node = msg.metadata.dst_node_id
            records = msg.content.config_records
            if node == 1001 + SITE and dropped(str(records["fedlabels"]["kind"]),
                                               records["config"]):
                assert mid in self.replies  # it answered
                del self.replies[mid]
                self.dead.add(node)
        return ids


class SimulatorDropout:
    """The simulator's grid with the same dropout: SITE's reply to the attempt is lost and
    the site gets no further message (as a lost client)."""

    def __init__(self, inner: InProcessGrid) -> None:
        self.inner, self.gone = inner, False

    @property
    def client_ids(self) -> list[int]:
        return [c for c in self.inner.client_ids if not (self.gone and c == SITE)]

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        sent = {c: m for c, m in messages.items() if not (self.gone and c == SITE)}
        replies = self.inner.exchange(sent, rnd)
        if SITE in sent and dropped(sent[SITE].kind, sent[SITE].config, rnd):
            self.gone = True
            del replies[SITE]
        return replies


def deployment(cfg: RunConfig, tmp_path: Path,
               site_options: Mapping[str, object] | None = None
               ) -> tuple[Any, DiesAfterAnswering]:
    """``cfg`` prepared over the loopback grid whose site SITE dies after answering;
    ``site_options`` replace options in every site's own privacy-plan."""
    prepared, first = loopback_deployment(cfg, tmp_path / "sites", reply_timeout=20.0)
    configs = [dict(c.node_config) for c in first.contexts.values()]
    for config in configs if site_options else ():
        path = Path(str(config["privacy-plan"]))
        plan = json.loads(path.read_text())
        plan["options"].update(site_options)
        path.write_text(json.dumps(plan))
    return prepared, DiesAfterAnswering(first.client_app, configs, dict(
        next(iter(first.contexts.values())).run_config))


def ledgers_on_disk(prepared: Any, answered: Mapping[int, int]) -> dict[int, float]:
    """Each site's ε from its own ledger on disk, which holds one run of ``answered[cid]``
    releases (every attempt it answered, the dead site's too)."""
    on_disk = {}
    for cid, n in answered.items():
        settings = prepared.node_settings(cid)
        rows = read_ledgers(ledger_dir(settings), site_key(key_path(settings)), 1e-5)
        assert len(rows) == 1 and rows[0]["releases"] == n, (cid, rows)
        on_disk[cid] = rows[0]["epsilon"]
    return on_disk


def simulated(cfg: RunConfig) -> tuple[Any, SimulatorDropout]:
    """The simulator's session of ``cfg`` and its grid where SITE drops out as on Flower."""
    fed = load_federation(cfg.dataset, clients=cfg.clients, seed=cfg.seed)
    session = build_session(cfg.method, fed, as_models(cfg.model), rounds=cfg.rounds,
                            period=cfg.period, seed=cfg.seed, options=dict(cfg.options))
    return session, SimulatorDropout(InProcessGrid(session.clients, CommMeter()))


def same_ledgers(session: Any, answered: Mapping[int, int], on_disk: Mapping[int, float]
                 ) -> None:
    """The simulator's clients answered as the sites did and spent what their files say."""
    for cid, n in answered.items():
        ledger = session.clients[cid].ledger
        assert len(ledger.events) == n
        assert ledger.spent().epsilon == pytest.approx(on_disk[cid], rel=1e-9)


def test_a_site_dying_after_answering_is_retried_without_it_and_charged(
        tmp_path: Path) -> None:
    # no ledger-epsilon: each site's lifetime budget is one run of its plan, whose
    # retries = 1 covers the retry (a third release)
    prepared, grid = deployment(CFG, tmp_path)
    deployed = run_server(grid, server_context(prepared.spec))
    assert deployed is not None
    privacy = deployed.extra["privacy"]
    # round 1: attempt 0 lacks the dead site's masked vector, attempt 1 decodes the others
    assert privacy["attempts_per_round"] == [1, 2]
    assert privacy["decoded_group_per_round"] == [4, 3]
    assert [r.server["attempts"] for r in deployed.rounds] == [1.0, 2.0]

    # every site's own ledger on disk: each attempt it answered, the dead site's too
    answered = {0: 3, 1: 3, 2: 3, SITE: 2}
    on_disk = ledgers_on_disk(prepared, answered)

    # the simulator's retry after the same dropout
    session, sim = simulated(CFG)
    metrics = [session.server.run_round(r, sim) for r in range(CFG.rounds)]
    assert [m["attempts"] for m in metrics] == [1.0, 2.0]
    sim_privacy = session.server.result_extra()["privacy"]
    assert sim_privacy["decoded_group_per_round"] == privacy["decoded_group_per_round"]
    assert sim_privacy["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-12)
    same_ledgers(session, answered, on_disk)
    _worst, each = account_per_client(session.server.events, 1e-5)
    assert {c: e.epsilon for c, e in each.items()} == pytest.approx(on_disk, rel=1e-9)


def test_without_retries_the_round_is_given_up_and_the_run_goes_on(tmp_path: Path) -> None:
    """The same dropout where neither the run nor the sites allow a retry: the coordinator
    asks none (each site would refuse it), round 2 decodes no sum and the run completes
    with the three others; each site answered one attempt a round."""
    options = {k: v for k, v in CFG.options.items() if k != "retries"}
    prepared, grid = deployment(replace(CFG, options=options), tmp_path)
    deployed = run_server(grid, server_context(prepared.spec))
    assert deployed is not None
    privacy = deployed.extra["privacy"]
    assert privacy["attempts_per_round"] == [1, 1]
    assert privacy["decoded_group_per_round"] == [4, 0]
    for cid in range(CFG.clients):
        settings = prepared.node_settings(cid)
        rows = read_ledgers(ledger_dir(settings), site_key(key_path(settings)), 1e-5)
        assert rows[0]["releases"] == 2, (cid, rows)


@pytest.mark.parametrize(("cfg", "site_options", "named"), [
    (replace(CFG, options={**{k: v for k, v in CFG.options.items() if k != "noise_multiplier"},
                           "epsilon": 8.0}), {"retries": 0}, "the site's retries is 0"),
    (replace(PATE, options={**{k: v for k, v in PATE.options.items() if k != "noise_sigma"},
                            "epsilon": 8.0}), {"retries": 2}, "the site's retries is 2"),
    (CFG, {"noise_multiplier": 1.5}, "the site's noise_multiplier is 1.5"),
    # σ given: a coordinator allowing more retries than the sites was refused only at the
    # retry ('refused: budget'), after every site had answered its first attempts
    (CFG, {"retries": 0}, "the site's retries is 0"),
    (PATE, {"retries": 0}, "the site's retries is 0")],
    ids=["dp-fedavg-retries", "dp-pate-retries", "dp-fedavg-sigma",
         "dp-fedavg-given-sigma-retries", "dp-pate-given-sigma-retries"])
def test_a_coordinator_with_other_retries_is_refused_naming_them(
        tmp_path: Path, cfg: RunConfig, site_options: dict[str, object], named: str) -> None:
    """A coordinator whose retries differ from the sites' plans (under epsilon it asks for
    another σ too, calibrated for rounds + retries releases): every site refuses the first
    attempt before anything is charged, and the coordinator's one line names the option
    and the site's own value (as for σ itself), with the hint on retries. Before, under
    epsilon it said 'refused: parameters' without naming retries (the ring's bits
    differed), and with a given σ the sites answered until the first retry."""
    from fedlabels.runs.lost import ClientsLost

    prepared, grid = deployment(cfg, tmp_path, site_options=site_options)
    with pytest.raises(ClientsLost) as err:
        run_server(grid, server_context(prepared.spec))
    line = str(err.value)
    assert "\n" not in line and f"refused: parameters ({named})" in line
    assert ("option retries of its own privacy-plan" in line) == ("retries" in named)
    for cid in range(cfg.clients):  # refused before anything was charged
        settings = prepared.node_settings(cid)
        rows = read_ledgers(ledger_dir(settings), site_key(key_path(settings)), 1e-5)
        assert sum(r["releases"] for r in rows) == 0, (cid, rows)


def test_a_dp_pate_site_dying_after_voting_is_retried_as_in_the_simulator(
        tmp_path: Path) -> None:
    """DP-PATE's secure vote with the same dropout and retries=1 in every site's plan: the
    vote is retried with the three others and decoded; each site's ledger on disk, the
    attempts and ε are the simulator's (same σ: the plans are the run's)."""
    prepared, grid = deployment(PATE, tmp_path)
    deployed = run_server(grid, server_context(prepared.spec))
    assert deployed is not None
    privacy = deployed.extra["privacy"]
    assert (privacy["attempts"], privacy["decoded_group"]) == (2, 3)
    answered = {0: 2, 1: 2, 2: 2, SITE: 1}
    on_disk = ledgers_on_disk(prepared, answered)
    session, sim = simulated(PATE)
    session.server.run_round(0, sim)
    sim_privacy = session.server.result_extra()["privacy"]
    assert (sim_privacy["attempts"], sim_privacy["decoded_group"]) == (2, 3)
    assert sim_privacy["noise_sigma"] == privacy["noise_sigma"]
    assert sim_privacy["epsilon"] == pytest.approx(privacy["epsilon"], rel=1e-12)
    same_ledgers(session, answered, on_disk)
