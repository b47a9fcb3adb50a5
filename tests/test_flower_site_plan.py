"""On Flower a site follows its own privacy plan (``privacy-plan`` in its node config), not
the coordinator's run config: a run that asks for less noise is refused, the server learns
only the refusal's category and the option it concerns, and the site's log has the reason."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from fedlabels.core.errors import FedLabelsError, ParameterRefusal
from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site_plan import load_site_plan, plan_of, site_config
from fedlabels.engines.flower.spec import HELLO, RUN_CONFIG_KEY
from fedlabels.runs.config import RunConfig

SITE = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                 rounds=2, period=1, seed=0,
                 options={"epsilon": 2.0, "sensitivity": 40, "mechanism": "xor"})


def _deviating_run(tmp_path: Path, run: RunConfig) -> tuple[LoopbackGrid, object]:
    """Sites prepared with plan ``SITE``; the coordinator's run config says ``run``."""
    prepared, _ = loopback_deployment(SITE, tmp_path / "sites")
    spec = replace(prepared.spec, run=run.to_dict())
    nodes = [prepared.node_settings(c) for c in range(SITE.clients)]
    grid = LoopbackGrid(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()})
    return grid, spec


def test_sites_refuse_a_run_that_lowers_their_noise(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    lowered = replace(SITE, options={"epsilon": 2000.0, "sensitivity": 40, "mechanism": "xor"})
    grid, spec = _deviating_run(tmp_path, lowered)
    with caplog.at_level(logging.ERROR, logger="fedlabels.site"), \
            pytest.raises(FedLabelsError):  # every client lost: the server stops
        run_server(grid, server_context(spec))
    status = json.loads(Path(spec.status).read_text())
    text = json.dumps(status)
    assert "refused: parameters" in text, text
    # the option is named, not the site's value (sensitivity=empirical computes it from
    # the site's data), nor the site's reason
    assert "less noise than the site's flip_probability" in text, text
    assert "0.4857" not in text and "client 0:" not in text
    assert "flip_probability" in caplog.text and "refused: parameters" in caplog.text


def test_sites_refuse_more_rounds_than_their_plan(tmp_path: Path) -> None:
    grid, spec = _deviating_run(tmp_path, replace(SITE, rounds=4))
    with pytest.raises(FedLabelsError):
        run_server(grid, server_context(spec))
    text = Path(spec.status).read_text()
    assert "refused: budget" in text, text


def test_sites_refuse_more_local_steps_than_their_plan(tmp_path: Path) -> None:
    """The plan's period is the site's steps a round: a coordinator whose run config said
    period 25 had the sites train 25 times their plan's steps before each release."""
    grid, spec = _deviating_run(tmp_path, replace(SITE, period=25))
    with pytest.raises(FedLabelsError):
        run_server(grid, server_context(spec))
    text = Path(spec.status).read_text()
    assert "refused: parameters" in text, text


def test_honest_run_with_site_plans_equals_the_plain_deployment(tmp_path: Path) -> None:
    prepared, grid = loopback_deployment(SITE, tmp_path / "sites")
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None and len(result.rounds) == SITE.rounds
    assert result.extra["privacy"]["rounds_accounted"] == SITE.rounds


def test_site_plan_file_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"method": "dp-fedct", "rounds": 2}))
    with pytest.raises(FedLabelsError, match="exactly the keys"):
        load_site_plan(path)
    path.write_text(json.dumps({"method": "fedct", "rounds": 2, "period": 1, "options": {}}))
    with pytest.raises(ParameterRefusal, match="privacy-plan says 'fedct'"):
        site_config(SITE, {"privacy-plan": str(path)})
    assert site_config(SITE, {"trust-coordinator": True}) is SITE
    with pytest.raises(ParameterRefusal, match="names no privacy-plan"):
        site_config(SITE, {})  # neither a plan nor the opt-in
    with pytest.raises(FedLabelsError, match="privacy-plan and trust-coordinator=true"):
        site_config(SITE, {"privacy-plan": str(path), "trust-coordinator": "true"})
    with pytest.raises(FedLabelsError, match="trust-coordinator must be true or false"):
        site_config(SITE, {"trust-coordinator": "sure"})
    from fedlabels.engines.flower.site import check_node_keys

    with pytest.raises(FedLabelsError, match=r"'trust_coordinator' \(did you mean "
                                             r"'trust-coordinator'\?\); a site reads .*"
                                             r"privacy-plan, trust-coordinator, "):
        check_node_keys({"trust_coordinator": True}, "site 0")


def test_a_site_without_dp_refuses_rounds_beyond_its_plan_too(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture
                                                               ) -> None:
    plain = replace(SITE, method="fedct", options={})
    prepared, _ = loopback_deployment(plain, tmp_path / "sites")
    spec = replace(prepared.spec, run=replace(plain, rounds=3).to_dict())
    nodes = [prepared.node_settings(c) for c in range(plain.clients)]
    grid = LoopbackGrid(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()})
    with caplog.at_level(logging.ERROR, logger="fedlabels.site"), \
            pytest.raises(FedLabelsError):  # every client refuses round 3: the server stops
        run_server(grid, server_context(spec))
    status = json.loads(Path(spec.status).read_text())
    assert status["rounds_done"] == 2 and "refused: budget" in json.dumps(status)
    assert "round 3 is beyond this site's privacy-plan of 2 round(s)" in caplog.text


def test_a_misspelt_node_config_key_is_refused_before_any_release(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``privacy_plan`` for ``privacy-plan`` once left the site obeying the coordinator (and
    ``ledger_epsilon`` without its budget), silently; now the site refuses to join."""
    prepared, _ = loopback_deployment(SITE, tmp_path / "sites")
    lowered = replace(SITE, options={"epsilon": 2000.0, "sensitivity": 40, "mechanism": "xor"})
    spec = replace(prepared.spec, run=lowered.to_dict())
    nodes = [prepared.node_settings(c) for c in range(SITE.clients)]
    nodes[2]["privacy_plan"] = nodes[2].pop("privacy-plan")
    nodes[2]["ledger_epsilon"] = 0.5
    grid = LoopbackGrid(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()})
    with caplog.at_level(logging.ERROR, logger="fedlabels.site"), \
            pytest.raises(FedLabelsError):
        run_server(grid, server_context(spec))
    assert "unknown node config key 'privacy_plan' (did you mean 'privacy-plan'?)" \
        in caplog.text
    ledger = Path(nodes[2]["ledger-dir"])
    assert not ledger.exists() or not any(p.is_file() and p.stat().st_size
                                          for p in ledger.rglob("*"))  # nothing released


_PROBE = '''
import inspect

import torch.nn as nn

SITE_CALLS = []


def make(n_features, n_classes, **kwargs):
    SITE_CALLS.append(any(f.filename.endswith("client_app.py") for f in inspect.stack()))
    return nn.Sequential(nn.Linear(n_features, n_classes))
'''


@pytest.mark.parametrize("plan_names_model", [True, False])
def test_a_site_never_runs_a_network_only_the_coordinator_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan_names_model: bool) -> None:
    """The coordinator's run config named ``module:PKG:FACTORY`` and every site imported
    and called it (code of the coordinator's choosing, run on the site). A site refuses a
    model other than its plan's, and without a ``model`` in its plan (plans written before
    it) still refuses a ``module:`` network: its factory is never called on a site."""
    import importlib
    import sys

    (tmp_path / "coordinator_named_net.py").write_text(_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("coordinator_named_net")
    monkeypatch.setitem(sys.modules, "coordinator_named_net", probe)
    prepared, _ = loopback_deployment(SITE, tmp_path / "sites")
    for cid in range(SITE.clients):
        path = Path(prepared.node_settings(cid)["privacy-plan"])
        plan = json.loads(path.read_text())
        assert plan["model"] == "decision_tree"  # deploy prepare writes the run's model
        if not plan_names_model:
            del plan["model"]
            path.write_text(json.dumps(plan))
    run = replace(SITE, model="module:coordinator_named_net:make")
    spec = replace(prepared.spec, run=run.to_dict())
    grid = LoopbackGrid(client_app, [prepared.node_settings(c) for c in range(SITE.clients)],
                        {RUN_CONFIG_KEY: spec.to_json()})
    with pytest.raises(FedLabelsError):  # every site refuses: the server stops
        run_server(grid, server_context(spec))
    assert "refused: parameters" in Path(spec.status).read_text()
    assert not any(probe.SITE_CALLS), "a site called the coordinator's factory"


def test_site_model_rules(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    plan = {"method": "dp-fedct", "rounds": 2, "period": 1, "options": dict(SITE.options)}
    path.write_text(json.dumps({**plan, "model": "dt"}))
    assert site_config(SITE, {"privacy-plan": str(path)}).model == "decision_tree"
    with pytest.raises(ParameterRefusal, match="privacy-plan says 'dt'"):
        site_config(replace(SITE, model="rf"), {"privacy-plan": str(path)})
    own = replace(SITE, model="module:user_nets:tiny_mlp")  # importable, never called here
    with pytest.raises(ParameterRefusal, match="named by the coordinator only"):
        site_config(own, {"trust-coordinator": True})  # follows the run, but runs no module
    path.write_text(json.dumps({**plan, "model": "module:user_nets:tiny_mlp"}))
    assert site_config(own, {"privacy-plan": str(path)}).model == own.model
    path.write_text(json.dumps({**plan, "model": 3}))
    with pytest.raises(FedLabelsError, match="model must be a model spec"):
        load_site_plan(path)
    path.write_text(json.dumps({**plan, "models": "dt"}))
    with pytest.raises(FedLabelsError, match="exactly the keys"):
        load_site_plan(path)


def test_a_site_counts_rounds_itself(tmp_path: Path) -> None:
    """The plan's round limit read the coordinator's round number: a coordinator that
    numbered every message round 0 had a site with a 2-round plan answer 5 rounds of a
    non-DP method. The site now refuses a second message of one kind in a round, and a
    round that goes back, so it answers one round's worth."""
    from fedlabels.engines.flower.convert import (
        attached_message,
        from_record_dict,
        to_record_dict,
    )

    class RoundZero(LoopbackGrid):
        def push_messages(self, messages):  # type: ignore[no-untyped-def]
            batch = list(messages)
            for m in batch:
                ours, meta = from_record_dict(m.content)
                if "round" in meta:
                    meta["round"] = 0
                    m.content = to_record_dict(ours, attached_message(m.content), **meta)
            return super().push_messages(batch)

    plain = replace(SITE, method="fedct", options={})
    prepared, _ = loopback_deployment(plain, tmp_path / "sites")
    spec = replace(prepared.spec, run=replace(plain, rounds=5).to_dict())
    grid = RoundZero(client_app, [prepared.node_settings(c) for c in range(plain.clients)],
                     {RUN_CONFIG_KEY: spec.to_json()})
    with pytest.raises(FedLabelsError, match="every client was lost"):
        run_server(grid, server_context(spec))
    status = json.loads(Path(spec.status).read_text())
    assert status["rounds_done"] == 1 and "refused: message" in json.dumps(status)


def test_the_sequence_guard_keeps_rounds_and_kinds(tmp_path: Path) -> None:
    from fedlabels.comm import Message
    from fedlabels.core.errors import RefusedError
    from fedlabels.engines.flower.sequence import SequenceGuard

    key, path = b"k" * 32, tmp_path / "runs" / "r.json"
    guard = SequenceGuard.load(path, key)
    reply = Message("x.reply")
    for seq, (rnd, kind) in enumerate([(0, "a.train"), (0, "a.eval"), (1, "a.train")], 1):
        assert guard.admit(7, False, seq, rnd, f"d{seq}") is None
        guard.check_round(rnd, kind, frozenset())
        guard.accept(seq, rnd, f"d{seq}", reply, None, kind)
    again = SequenceGuard.load(path, key)  # kept, under the site's key
    with pytest.raises(RefusedError, match=r"a second a\.train in round 1"):
        again.check_round(1, "a.train", frozenset())
    again.check_round(1, "a.train", frozenset({"a.train"}))  # a multi-step kind
    with pytest.raises(RefusedError, match="round 0 goes back"):
        again.check_round(0, "a.other", frozenset())
    again.check_round(2, "a.train", frozenset())
    assert again.admit(8, False, 1, 0, "d1") is None  # a new run from scratch: reset
    again.check_round(0, "a.train", frozenset())


def test_a_plan_nested_too_deep_is_one_line(tmp_path):
    """json's RecursionError on ``[[[[...]]]]`` was a traceback in the site's ClientApp."""
    from fedlabels.engines.flower.site_plan import load_site_plan

    plan = tmp_path / "plan.json"
    plan.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FedLabelsError, match="cannot be read as JSON"):
        load_site_plan(plan)


class _Holding(LoopbackGrid):
    """The loopback grid, keeping every reply the server pulled: what the coordinator
    actually holds."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.held: list = []

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        out = list(super().pull_messages(message_ids))
        self.held.extend(out)
        return out


#: what a coordinator asks of sites that joined a labels-only DP-FedCT federation (``SITE``)
_ASKS = {
    "fedavg": replace(SITE, method="fedavg", model="mlp(hidden=4)", options={}),
    "less_noise": replace(SITE, options={"epsilon": 2000.0, "sensitivity": 40,
                                         "mechanism": "xor"}),
    "more_rounds": replace(SITE, rounds=4),
}


def _sites(tmp_path: Path, **extra: object) -> tuple[object, list[dict[str, object]]]:
    """``SITE``'s prepared sites, each node config without its privacy-plan, plus ``extra``."""
    prepared, _ = loopback_deployment(SITE, tmp_path)
    nodes = []
    for cid in range(SITE.clients):
        node = dict(prepared.node_settings(cid))
        del node["privacy-plan"]
        nodes.append({**node, **extra})
    return prepared, nodes


@pytest.mark.parametrize("ask", sorted(_ASKS))
def test_a_site_without_a_plan_or_opt_in_follows_no_coordinator(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, ask: str) -> None:
    """A site that names no privacy-plan followed the coordinator's run config: FedAvg (its
    model's parameters, to a site that joined a labels-only federation), less noise, more
    rounds. Now it refuses every message, the hello and (replayed from a run the
    coordinator made with sites that trust it) every protocol message, and nothing but
    the refusal's category reaches the coordinator; nothing enters its ledger."""
    run = _ASKS[ask]
    prepared, nodes = _sites(tmp_path / "sites")
    spec = replace(prepared.spec, run=run.to_dict())
    grid = _Holding(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()})
    with caplog.at_level(logging.ERROR, logger="fedlabels.site"), \
            pytest.raises(FedLabelsError, match="setup failed"):
        run_server(grid, server_context(spec))
    assert len(grid.held) == SITE.clients
    for reply in grid.held:  # what the coordinator holds: refusals, no content
        assert reply.has_error() and not reply.has_content()
        assert "refused: parameters" in reply.error.reason
        assert "privacy-plan" not in reply.error.reason  # the reason stays at the site
    assert caplog.text.count("names no privacy-plan") == SITE.clients
    assert "trust-coordinator=true" in caplog.text

    # the protocol messages themselves, sent without a hello: recorded from the same run
    # with sites that trust the coordinator, then sent to the sites that do not
    sent: list = []

    def recording(message, context):  # type: ignore[no-untyped-def]
        sent.append((context.node_id, _wire_copy(message)))
        return client_app(message, context)

    _, trusting = _sites(tmp_path / "trusting", **{"trust-coordinator": True})
    honest = LoopbackGrid(recording, trusting, {RUN_CONFIG_KEY: spec.to_json()})
    result = run_server(honest, server_context(spec))
    assert result is not None and len(result.rounds) == run.rounds  # they follow it
    protocol = [(n, m) for n, m in sent if _kind(m) != HELLO]
    assert protocol
    for node, message in protocol:
        with pytest.raises(FedLabelsError, match=r"^refused: parameters"):
            client_app(message, grid.contexts[node])
    for node in nodes:
        ledger = Path(str(node["ledger-dir"]))
        assert not ledger.exists() or not any(p.is_file() for p in ledger.rglob("*"))


def _wire_copy(message):  # type: ignore[no-untyped-def]
    from flwr.app import Message
    from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

    out = Message(recorddict_from_proto(recorddict_to_proto(message.content)),
                  dst_node_id=message.metadata.dst_node_id,
                  message_type=message.metadata.message_type, group_id="replay")
    out.metadata.__dict__["_message_id"] = f"replay-{id(out)}"
    return out


def _kind(message) -> str:  # type: ignore[no-untyped-def]
    from fedlabels.engines.flower.convert import from_record_dict

    return from_record_dict(message.content)[0].kind


def test_a_site_that_opts_in_follows_the_coordinator_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``trust-coordinator=true``: the site follows the coordinator's run config (here
    FedAvg) as before, its log says so at the run's hello, and ``fedlabels deploy ledger``
    shows the run and the plan it followed."""
    from fedlabels.cli import main
    from fedlabels.engines.flower.site_plan import plan_of

    run = _ASKS["fedavg"]
    prepared, nodes = _sites(tmp_path / "sites", **{"trust-coordinator": "true"})
    spec = replace(prepared.spec, run=run.to_dict())
    grid = LoopbackGrid(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()})
    with caplog.at_level(logging.WARNING, logger="fedlabels.site"):
        result = run_server(grid, server_context(spec))
    assert result is not None and len(result.rounds) == run.rounds
    assert caplog.text.count("follows the coordinator's run config") == SITE.clients
    node = nodes[1]
    capsys.readouterr()  # the server's round lines
    assert main(["deploy", "ledger", "--ledger-dir", str(node["ledger-dir"]), "--state-key",
                 str(node["state-key"]), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["datasets"]
    assert row["coordinator_runs"] == 1 and row["releases"] == 0
    assert [p["plan"] for p in row["coordinator_plans"]] == [
        json.loads(json.dumps(plan_of(spec.config)))]
    assert main(["deploy", "ledger", "--ledger-dir", str(node["ledger-dir"]), "--state-key",
                 str(node["state-key"])]) == 0
    assert "coordinator" in capsys.readouterr().out


def _trusting_run(tmp_path: Path, run: RunConfig, **node: object) -> tuple[LoopbackGrid, object]:
    """Sites with ``trust-coordinator=true`` (no plan) and node config ``node``; the
    coordinator's run config says ``run``."""
    prepared, _ = loopback_deployment(replace(run, period=1), tmp_path / "sites")
    spec = replace(prepared.spec, run=run.to_dict())
    nodes = [{**{k: v for k, v in prepared.node_settings(c).items() if k != "privacy-plan"},
              "trust-coordinator": True, **node} for c in range(run.clients)]
    return LoopbackGrid(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()}), spec


def _outcome(grid: LoopbackGrid, spec: object) -> str:
    """``answered`` where the run completed, else the sites' categories in its status."""
    try:
        run_server(grid, server_context(spec))
    except FedLabelsError:
        return Path(spec.status).read_text()  # type: ignore[attr-defined]
    return "answered"


@pytest.mark.parametrize(("run", "node", "named"), [
    # the coordinator's period, up to the run config's limit (10⁶ a round) until 2026-11-30
    (replace(SITE, period=10**6), {}, "period is above the site's max-steps 10000"),
    (replace(SITE, method="fedct", options={}, period=3), {"max-steps": "2"},
     "period is above the site's max-steps 2"),
    # a count the site derives from the period, named in a message: PATE's teachers' 20
    (replace(SITE, method="pate", options={}, period=1), {"max-steps": 19},
     "steps is above the site's max-steps 19"),
    (replace(SITE, method="pate", options={"teacher_steps": 50}, period=1), {"max-steps": 49},
     "teacher_steps is above the site's max-steps 49"),
])
def test_a_trusting_site_refuses_more_steps_than_its_max_steps(
        tmp_path: Path, run: RunConfig, node: dict[str, object], named: str) -> None:
    """With ``trust-coordinator=true`` the site takes the coordinator's run config, but no
    step count above its own ``max-steps`` (default 10,000): refused before it trains,
    naming the count and its bound; a run within the bound is answered."""
    seen = _outcome(*_trusting_run(tmp_path / "over", run, **node))
    assert f"refused: parameters ({named})" in seen, seen
    bound = {"max-steps": int(str(named.rsplit(" ", 1)[1])) + 1} if node else {}
    if run.period < 10**6:
        assert _outcome(*_trusting_run(tmp_path / "within", run, **bound)) == "answered"


@pytest.mark.parametrize(("key", "within"), [("max-steps", 1), ("max-rounds", 2)])
def test_a_site_bound_is_checked_and_only_beside_trust_coordinator(
        tmp_path: Path, key: str, within: int) -> None:
    """``max-steps`` and ``max-rounds``: keys the site reads, integers >= 1, refused beside a
    privacy plan (which bounds both); ``within``: SITE's period and rounds."""
    from fedlabels.engines.flower.site import check_node_keys

    check_node_keys({key: 5}, "site 0")  # a key the site reads
    for bad in ("x", 0, -3, True, 2.5):
        with pytest.raises(FedLabelsError, match=f"{key} must be an integer >= 1"):
            site_config(SITE, {"trust-coordinator": True, key: bad})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_of(SITE)))
    with pytest.raises(FedLabelsError, match=rf"privacy-plan and {key}.*drop {key}"):
        site_config(SITE, {"privacy-plan": str(path), key: 5})
    assert site_config(SITE, {"trust-coordinator": True, key: within}) is SITE


@pytest.mark.parametrize(("run", "node", "named"), [
    # the coordinator's rounds, up to the run config's limit (10⁶) until 2026-11-30
    (replace(SITE, method="fedct", options={}, rounds=1001), {},
     "rounds is above the site's max-rounds 1000"),
    (replace(SITE, method="fedct", options={}, rounds=3), {"max-rounds": "2"},
     "rounds is above the site's max-rounds 2"),
])
def test_a_trusting_site_refuses_more_rounds_than_its_max_rounds(
        tmp_path: Path, run: RunConfig, node: dict[str, object], named: str) -> None:
    """With ``trust-coordinator=true`` the site takes the coordinator's rounds, but not
    more than its own ``max-rounds`` (default 1,000): refused before it trains, naming the
    bound; a run within it is answered."""
    seen = _outcome(*_trusting_run(tmp_path / "over", run, **node))
    assert f"refused: parameters ({named})" in seen, seen
    if run.rounds < 1000:
        within = {"max-rounds": run.rounds}
        assert _outcome(*_trusting_run(tmp_path / "within", run, **within)) == "answered"


def test_max_rounds_bounds_every_message_of_a_trusting_site() -> None:
    from fedlabels.core.errors import BudgetRefusal
    from fedlabels.engines.flower.site_plan import check_planned_round

    # a message's round (0-based) beyond max-rounds, whatever the run config said
    trusting = {"trust-coordinator": True, "max-rounds": 3}
    check_planned_round(trusting, 2, 5)
    with pytest.raises(BudgetRefusal, match="round 4 is beyond this site's max-rounds 3"):
        check_planned_round(trusting, 3, 5)
    with pytest.raises(BudgetRefusal, match="max-rounds 1000"):
        check_planned_round({"trust-coordinator": True}, 1000, 2000)
    # and beyond the run config's rounds, below max-rounds
    with pytest.raises(BudgetRefusal, match=r"round 3 is beyond the coordinator's run "
                                            r"config of 2 round\(s\)"):
        check_planned_round(trusting, 2, 2)


def test_a_site_counts_the_rounds_it_answers_itself(tmp_path: Path) -> None:
    """The site's own count of a run's rounds, not the messages' numbers, bounds how many
    it answers: round numbers 0 and 5 are two rounds (kept in its sealed record), a third
    is refused under a 2-round plan although its number 1 is within the plan."""
    from fedlabels.comm import Message
    from fedlabels.core.errors import BudgetRefusal
    from fedlabels.engines.flower.sequence import SequenceGuard
    from fedlabels.engines.flower.site_plan import check_planned_round

    path, key = tmp_path / "runs" / "r.json", b"k" * 32
    guard, reply = SequenceGuard(path, key), Message("x.reply")
    for seq, rnd in ((1, 0), (2, 0), (3, 5)):
        assert guard.admit(7, False, seq, rnd, f"d{seq}") is None
        guard.accept(seq, rnd, f"d{seq}", reply, None, f"kind{seq}")
    guard = SequenceGuard.load(path, key)
    assert guard.rounds_answered == 2 and guard.rounds_with(5) == 2
    assert guard.rounds_with(6) == 3
    planned = {"method": "fedct", "rounds": 2, "period": 1, "options": {}}
    plan_site = {"privacy-plan": "unread"}  # the pinned plan is the site's
    check_planned_round(plan_site, 1, 2, planned, guard.rounds_with(5))
    with pytest.raises(BudgetRefusal, match=r"has answered 2 round\(s\) of this run \(its "
                                            r"own count\); another is beyond this site's "
                                            r"privacy-plan of 2 round\(s\)"):
        check_planned_round(plan_site, 1, 2, planned, 3)
    with pytest.raises(BudgetRefusal, match="another is beyond the coordinator's run config"):
        check_planned_round({"trust-coordinator": True}, 0, 2, None, 3)


def test_a_trusting_site_answers_no_round_beyond_the_run_configs(tmp_path: Path) -> None:
    """A trusting site's bound on a message's round was its ``max-rounds`` (1,000), not the
    run config's ``rounds``: a coordinator whose ServerApp ran a third round of a 2-round
    run config had it answered by a method whose client never reads the round (FedAvg).
    Now the third round is refused (``refused: budget``) after two answered."""
    run = replace(SITE, method="fedavg", model="mlp", options={}, rounds=2)
    grid, spec = _trusting_run(tmp_path, run)
    longer = replace(spec, run=replace(run, rounds=3).to_dict())  # the ServerApp's own
    with pytest.raises(FedLabelsError):  # every site refuses round 3: the server stops
        run_server(grid, server_context(longer))
    status = json.loads(Path(spec.status).read_text())  # type: ignore[attr-defined]
    assert status["rounds_done"] == 2 and "refused: budget" in json.dumps(status), status


def test_a_site_reads_its_plan_once_a_run_and_keeps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan file was read again for every message (three times and more: the role, the
    round check, the ledger report), so a file changed under a running site changed the
    plan in mid-run. Each site reads it once a run, at its first message, and keeps it in
    its message record: here every file is rewritten to 1 round right after that read,
    and the 2-round run is still answered to its end (the next run takes the new file)."""
    from fedlabels.engines.flower import site_plan

    reads: list[str] = []
    real = site_plan.load_site_plan

    def read_then_change(path: str | Path) -> dict[str, object]:
        plan = real(path)
        reads.append(str(path))
        Path(path).write_text(json.dumps({**plan, "rounds": 1}))
        return plan

    monkeypatch.setattr(site_plan, "load_site_plan", read_then_change)
    prepared, grid = loopback_deployment(SITE, tmp_path / "sites")
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None and len(result.rounds) == SITE.rounds
    assert sorted(reads) == sorted(prepared.node_settings(c)["privacy-plan"]
                                   for c in range(SITE.clients))


def test_a_site_keeps_the_plan_of_a_run_whose_first_message_it_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan was pinned with the run's first *answered* reply: a site that refused the
    first message (here: less noise than its plan) read the file again at the next, so a
    file changed in between (here: to the coordinator's lowered ε) was the site's plan in
    mid-run. It is pinned at the first message, answered or refused: the coordinator's next
    try in the same Flower run is refused again, and no site reads its file twice."""
    from fedlabels.engines.flower import site_plan

    lowered = replace(SITE, options={"epsilon": 2000.0, "sensitivity": 40, "mechanism": "xor"})
    reads: list[str] = []
    real = site_plan.load_site_plan

    def read_then_lower(path: str | Path) -> dict[str, object]:
        plan = real(path)
        reads.append(str(path))
        Path(path).write_text(json.dumps(plan_of(lowered)))
        return plan

    monkeypatch.setattr(site_plan, "load_site_plan", read_then_lower)
    grid, spec = _deviating_run(tmp_path, lowered)
    for attempt in range(2):  # the same Flower run (its contexts, a restarted ServerApp)
        again = grid if attempt == 0 else LoopbackGrid(
            client_app, [dict(c.node_config) for c in grid.contexts.values()],
            {RUN_CONFIG_KEY: spec.to_json()}, run_id=grid.run_id)
        with pytest.raises(FedLabelsError):  # every site refuses: the server stops
            run_server(again, server_context(spec))
        text = Path(spec.status).read_text()
        assert "refused: parameters (less noise than the site's flip_probability)" \
            in text, text  # (unpinned, the lowered file was read: the ledger refused)
    assert len(reads) == len(set(reads)) == SITE.clients, reads


@pytest.mark.parametrize(("method", "model", "key", "named"), [
    ("ds-fl", "mlp", "public_subset", "subset_size is not the site's own"),
    ("fedmd", "mlp", "public_subset", "subset_size is not the site's own"),
    ("pate", "dt", "queries", "the site's queries is 20"),
    # under a total ε DP-PATE's default queries are Q clusters of U
    ("dp-pate", "dt", "queries", "clusters is not the site's own")])
def test_sites_refuse_labels_on_more_rows_than_their_plan(
        tmp_path: Path, method: str, model: str, key: str, named: str) -> None:
    """The rows of U a DS-FL or FedMD site scores (``subset_size``) and a PATE teacher votes
    on (``queries``) were the server's (any up to |U|): a coordinator whose run config said
    60 had soft labels or votes on 60 rows released by sites whose plan said 20. The count
    is the site's own (its ``public_subset``, its ``queries``); another is refused before
    anything is trained."""
    noise = {"epsilon": 8.0} if method == "dp-pate" else {}
    plan = replace(SITE, method=method, model=model, rounds=1, options={key: 20, **noise})
    prepared, _ = loopback_deployment(plan, tmp_path / "sites")
    spec = replace(prepared.spec, run=replace(plan, options={key: 60, **noise}).to_dict())
    nodes = [prepared.node_settings(c) for c in range(plan.clients)]
    grid = LoopbackGrid(client_app, nodes, {RUN_CONFIG_KEY: spec.to_json()})
    with pytest.raises(FedLabelsError):  # every site refuses: the server stops
        run_server(grid, server_context(spec))
    status = Path(spec.status).read_text()
    assert f"refused: parameters ({named})" in status, status


def test_sites_calibrate_by_their_plans_rounds_not_the_runs(tmp_path: Path) -> None:
    """A run config of fewer rounds than the plan's would have each release spend more of
    the plan's ε (less noise a round): the sites calibrate their noise by their plan's rounds,
    so the server's release of 1 round at the whole ε is refused as less noise."""
    grid, spec = _deviating_run(tmp_path, replace(SITE, rounds=1))
    with pytest.raises(FedLabelsError):
        run_server(grid, server_context(spec))
    text = Path(spec.status).read_text()
    assert "refused: parameters" in text and "less noise than the site's" in text, text
