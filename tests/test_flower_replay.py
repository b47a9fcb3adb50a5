"""A deviating server against a Flower site: rewinds, replays, negative numbers, reruns.

Each test runs an honest DP-FedCT deployment over the loopback grid (the real ClientApp and
Flower's serialisation), records what the site received, and then sends the site crafted
copies of those messages, as a server that does not follow the protocol would. The site's
own record of message numbers and its lifetime ledger must hold whatever it is sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

from fedlabels.comm import encode_message
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.client_app import app as client_app
from fedlabels.engines.flower.convert import META, from_record_dict
from fedlabels.engines.flower.loopback import LoopbackGrid, loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site_plan import plan_of
from fedlabels.engines.flower.site_state import site_key
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY
from fedlabels.privacy.site_ledger import SiteLedger, read_ledgers
from fedlabels.runs.config import RunConfig

NODE = 1001  # site 0


class Recorder:
    """The ClientApp, keeping a copy of every message a site received and its reply."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, Message, Message]] = []

    def __call__(self, message: Message, context: Context) -> Message:
        kept = _copy(message)
        reply = client_app(message, context)
        self.seen.append((context.node_id, kept, reply))
        return reply

    def protocol(self, node: int) -> list[tuple[Message, Message]]:
        """(message, reply) of the protocol messages ``node`` answered, in order."""
        return [(m, r) for n, m, r in self.seen if n == node
                and from_record_dict(m.content)[0].category == "protocol"]


def _copy(message: Message, **meta: Any) -> Message:
    content = recorddict_from_proto(recorddict_to_proto(message.content))
    for key, value in meta.items():
        content.config_records[META][key] = value
    out = Message(content, dst_node_id=message.metadata.dst_node_id,
                  message_type=message.metadata.message_type, group_id="attack")
    out.metadata.__dict__["_message_id"] = f"attack-{id(out)}"
    return out


def _seq(message: Message) -> int:
    return int(message.content.config_records[META]["seq"])


def _ours(reply: Message) -> bytes:
    return encode_message(from_record_dict(reply.content)[0])


def _config(**options: Any) -> RunConfig:
    return RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                     rounds=2, seed=0,
                     options={"epsilon": 1.0, "mechanism": "xor", "sensitivity": 2, **options})


def _deployed(tmp_path: Path, cfg: RunConfig) -> tuple[Any, LoopbackGrid, Recorder]:
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    recorder = Recorder()
    grid.client_app = recorder
    assert run_server(grid, server_context(prepared.spec)) is not None
    return prepared, grid, recorder


def _ledger(context: Context, prepared: Any) -> SiteLedger:
    cfg = context.node_config
    key = site_key(Path(cfg["state-key"]))
    with np.load(prepared.client_paths[int(cfg["partition-id"])]) as data:
        return SiteLedger.open(cfg["ledger-dir"], key, data["X"], data["y"],
                               epsilon=None, delta=1e-5)


def test_rewound_numbers_are_refused_and_resends_get_the_stored_reply(tmp_path: Path) -> None:
    prepared, grid, recorder = _deployed(tmp_path, _config())
    ctx = grid.contexts[NODE]
    (first, first_reply), (second, _) = recorder.protocol(NODE)[:2]
    released = len(_ledger(ctx, prepared).events())
    assert released == 2  # the two planned releases, charged once each

    # rewinding: round 2's message under round 1's number (a fresh role on today's main)
    with pytest.raises(FedLabelsError, match="refused: message"):
        client_app(_copy(second, seq=_seq(first)), ctx)
    # a re-send of round 1's message after a "lost reply": the same reply, no new noise
    again = client_app(_copy(first), ctx)
    assert _ours(again) == _ours(first_reply)
    for _ in range(5):
        client_app(_copy(first), ctx)
    assert len(_ledger(ctx, prepared).events()) == released  # nothing new was released


def test_a_replay_with_another_consensus_is_refused_not_answered_with_the_same_noise(
        tmp_path: Path) -> None:
    prepared, grid, recorder = _deployed(tmp_path, _config(sensitivity="worst"))
    ctx = grid.contexts[NODE]
    message, reply = recorder.protocol(NODE)[1]  # round 2: carries the consensus
    content = message.content.array_records
    name = next(k for k in content if "consensus" in content[k])
    forged = _copy(message)
    consensus = forged.content.array_records[name]["consensus"].numpy()
    from flwr.app import Array

    forged.content.array_records[name]["consensus"] = Array(np.ascontiguousarray(
        consensus[::-1]))
    with pytest.raises(FedLabelsError, match="refused: message"):
        client_app(forged, ctx)
    assert _ours(client_app(_copy(message), ctx)) == _ours(reply)  # the stored release
    assert len(_ledger(ctx, prepared).events()) == 2


def test_negative_zero_and_skipped_numbers_are_refused_and_leave_no_snapshot(
        tmp_path: Path) -> None:
    prepared, grid, recorder = _deployed(tmp_path, _config())
    ctx = grid.contexts[NODE]
    state_dir = Path(ctx.node_config["state-dir"])
    before = sorted(p.name for p in state_dir.rglob("*") if p.is_file())
    message, _ = recorder.protocol(NODE)[-1]
    last = max(_seq(m) for n, m, _ in recorder.seen if n == NODE)
    for seq in [*range(-1, -51, -1), 0, last + 2, last + 100]:
        with pytest.raises(FedLabelsError, match="refused: message"):
            client_app(_copy(message, seq=seq), ctx)
    with pytest.raises(FedLabelsError, match="refused: message"):
        client_app(_copy(message, seq=last + 1, round=-3), ctx)
    assert sorted(p.name for p in state_dir.rglob("*") if p.is_file()) == before
    assert len(_ledger(ctx, prepared).events()) == 2


def test_a_rerun_from_scratch_spends_from_the_same_lifetime_budget(tmp_path: Path) -> None:
    cfg = _config(sensitivity="worst")
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [{**c.node_config, "ledger-epsilon": 1.05, "ledger-delta": 1e-5}
               for c in first.contexts.values()]
    spec_json = prepared.spec.to_json()
    run1 = LoopbackGrid(client_app, configs, {RUN_CONFIG_KEY: spec_json})
    result = run_server(run1, server_context(prepared.spec))
    assert result is not None and result.extra["privacy"]["epsilon"] <= 1.0 + 1e-6
    spent = _ledger(run1.contexts[NODE], prepared).spent()
    assert spent.epsilon == pytest.approx(result.extra["privacy"]["epsilon"], rel=1e-6)

    # the same deployment from scratch: a new Flower run on the same sites and data
    run2 = LoopbackGrid(client_app, configs, {RUN_CONFIG_KEY: spec_json})
    try:
        again = run_server(run2, server_context(prepared.spec))
    except FedLabelsError:
        again = None
    if again is not None:  # the server carried on without the sites that refused
        assert not again.rounds or len(again.extra["deployment"]["lost"]) == cfg.clients
    for node, ctx in run2.contexts.items():
        folder = Path(ctx.node_config["ledger-dir"])
        lines = next(folder.glob("*/ledger.jsonl")).read_text().splitlines()
        # the header, the site's ledger-epsilon (recorded once) and run 1's two releases
        assert len(lines) == 1 + 1 + 2, node


def _rerun(prepared: Any, configs: list[dict[str, Any]]) -> tuple[Any, LoopbackGrid]:
    """The same deployment as a new Flower run from scratch (not a resume); the result, or
    None where the server stopped because every site refused."""
    grid = LoopbackGrid(client_app, configs, {RUN_CONFIG_KEY: prepared.spec.to_json()})
    try:
        return run_server(grid, server_context(prepared.spec)), grid
    except FedLabelsError:
        return None, grid


_EVERY_SITE_RELEASE = [
    ("dp-fedct", "dt", {"mechanism": "xor", "sensitivity": "worst"}),
    ("dp-fedct", "dt", {"mechanism": "kary", "sensitivity": "worst"}),
    ("dp-fedct", "mlp(hidden=4)", {"mechanism": "dpsgd", "example_rate": 0.5}),
    ("dp-fedct", "dt", {"mechanism": "subsample-aggregate", "epsilon": 8.0, "teachers": 3,
                        "label_queries": 20}),
    ("dp-fedavg", "mlp(hidden=4)", {"level": "record", "epsilon": 8.0,
                                    "example_rate": 0.5, "sample_rate": 1.0}),
    # σ given instead of a total ε: the plan's steps at that σ are the budget
    ("dp-fedct", "mlp(hidden=4)", {"mechanism": "dpsgd", "noise_multiplier": 1.5,
                                   "example_rate": 0.5}),
    ("dp-fedavg", "mlp(hidden=4)", {"level": "record", "noise_multiplier": 1.5,
                                    "example_rate": 0.5, "sample_rate": 1.0}),
]


@pytest.mark.parametrize(("method", "model", "options"), _EVERY_SITE_RELEASE,
                         ids=lambda v: v if isinstance(v, str) else None)
def test_without_a_lifetime_budget_a_site_allows_one_run_of_its_own_plan(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, method: str, model: str,
        options: dict[str, Any]) -> None:
    """A site with a privacy-plan and no ``ledger-epsilon`` takes one run of its plan as
    the lifetime budget of its dataset: a coordinator that starts the deployment again gets
    a budget refusal, not the plan's releases again with fresh noise (every protocol in
    which a site releases with its own noise)."""
    opts = ({"epsilon": 1.0, **options} if method == "dp-fedct"
            and "noise_multiplier" not in options else dict(options))
    cfg = RunConfig(method=method, dataset="breast_cancer", clients=3, model=model,
                    rounds=2, period=2, seed=0, options=opts)
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [dict(c.node_config) for c in first.contexts.values()]
    assert all("privacy-plan" in c and "ledger-epsilon" not in c for c in configs)
    result, grid = _rerun(prepared, configs)
    assert result is not None and len(result.rounds) == cfg.rounds
    released = {n: len(_ledger(ctx, prepared).events()) for n, ctx in grid.contexts.items()}
    assert 0 < released[NODE] <= cfg.rounds
    spent = _ledger(grid.contexts[NODE], prepared).spent().epsilon
    assert spent <= result.extra["privacy"]["epsilon"] * (1 + 1e-6)
    # a DP-SGD site's entries name the accountant that calibrated its own σ, or that its
    # plan gave σ
    entries = _ledger(grid.contexts[NODE], prepared)._lines()[1:]
    dpsgd = [e for e in entries if e.get("event", {}).get("type") == "DPSGDRoundEvent"]
    assert bool(dpsgd) == ("dpsgd" in options.values() or "record" in options.values())
    how = "given" if "noise_multiplier" in options else "pld"
    assert all(e["calibrated_by"] == how for e in dpsgd)
    # and a subsample-aggregate site's the accountant of its GNMax σ
    gnmax = [e for e in entries if e.get("event", {}).get("type") == "GNMaxEvent"]
    assert bool(gnmax) == ("subsample-aggregate" in options.values())
    assert all(e["calibrated_by"] == "exact_gaussian" for e in gnmax)
    assert all(e["event"]["noise_multiplier"] == options.get("noise_multiplier",
                                                             e["event"]["noise_multiplier"])
               for e in dpsgd)
    for _ in (2, 3):
        with pytest.raises(FedLabelsError, match="Every site's privacy budget is spent"):
            run_server(LoopbackGrid(client_app, configs, {
                RUN_CONFIG_KEY: prepared.spec.to_json()}), server_context(prepared.spec))
        for n, ctx in grid.contexts.items():
            assert len(_ledger(ctx, prepared).events()) == released[n]
    assert "its lifetime budget is one run of the site's privacy-plan" in caplog.text


def test_a_site_that_trusts_the_coordinator_records_every_rerun(tmp_path: Path) -> None:
    """Without a privacy-plan and with trust-coordinator=true the site follows the
    coordinator's plan (its explicit choice); its ledger records each run's releases,
    unlimited unless ledger-epsilon is set, and each run's plan it followed."""
    cfg = _config(sensitivity="worst")
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [{**{k: v for k, v in c.node_config.items() if k != "privacy-plan"},
                "trust-coordinator": True} for c in first.contexts.values()]
    for run in (1, 2):
        result, grid = _rerun(prepared, configs)
        assert result is not None
        assert len(_ledger(grid.contexts[NODE], prepared).events()) == run * cfg.rounds
        node = grid.contexts[NODE].node_config
        (row,) = read_ledgers(node["ledger-dir"], site_key(Path(node["state-key"])), 1e-5)
        assert row["runs"] == run and row["releases"] == run * cfg.rounds
        assert row["coordinator_runs"] == run
        assert [p["plan"] for p in row["coordinator_plans"]] == [plan_of(cfg)] * run


def _count_answers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import fedlabels.methods.fedct.sensitivity as sens

    answers: list[int] = []
    real = sens.empirical_sensitivity

    def counted(*args: Any, **kwargs: Any) -> Any:
        answers.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sens, "empirical_sensitivity", counted)
    return answers


_EMPIRICAL = {"sensitivity": "empirical", "sensitivity_neighbours": 3, "epsilon": None,
              "epsilon_per_round": 2.0, "mechanism": "kary"}


def test_each_new_run_answers_the_noiseless_sensitivity_request_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With sensitivity empirical and a lifetime budget the operator set, a new run gets a
    new noiseless s* answer from every site; the site's ledger records each one (no ε)."""
    answers = _count_answers(monkeypatch)
    cfg = _config(**_EMPIRICAL)
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [{**c.node_config, "ledger-epsilon": 100.0} for c in first.contexts.values()]
    for run in (1, 2):
        result, grid = _rerun(prepared, configs)
        assert result is not None
        assert len(answers) == run * cfg.clients
        for ctx in grid.contexts.values():
            ledger = _ledger(ctx, prepared)
            assert len(ledger.events()) == run * cfg.rounds
            assert ledger.noiseless() == run
            assert ledger.summary()["noiseless_answers"] == run


def test_without_a_lifetime_budget_the_noiseless_answer_is_given_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedlabels.methods.fedct.dp_fedct import DPFedCTClient

    answers: list[int] = []
    real = DPFedCTClient.estimate_sensitivity

    def answered(self: Any, message: Any) -> Any:
        reply = real(self, message)
        answers.append(1)
        return reply

    monkeypatch.setattr(DPFedCTClient, "estimate_sensitivity", answered)
    cfg = _config(**_EMPIRICAL)
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [dict(c.node_config) for c in first.contexts.values()]
    result, _ = _rerun(prepared, configs)
    assert result is not None and len(answers) == cfg.clients
    again, grid = _rerun(prepared, configs)
    assert again is None or not again.rounds
    assert len(answers) == cfg.clients  # the second run's requests were refused
    for ctx in grid.contexts.values():
        ledger = _ledger(ctx, prepared)
        assert ledger.noiseless() == 1 and len(ledger.events()) == cfg.rounds


def _run_with_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cfg: RunConfig,
                      crashes: Callable[[Any], bool]
                      ) -> tuple[Any, LoopbackGrid, list[tuple[int, Message]]]:
    """A deployment in which site 0 fails once, after handling a message, where
    ``crashes(role)`` (a SuperNode killed while saving its state: the reply never leaves);
    the prepared run, the grid and every message the sites received."""
    import fedlabels.engines.flower.client_app as site_app

    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [dict(c.node_config) for c in first.contexts.values()]
    real_save, failed = site_app.save_state, []

    def crash_once(role: Any, records: Any, site: Any, key: bytes) -> None:
        if site.partition_id == 0 and crashes(role) and not failed:
            failed.append(1)
            raise OSError("the SuperNode was killed while saving")
        real_save(role, records, site, key)

    monkeypatch.setattr(site_app, "save_state", crash_once)
    kept: list[tuple[int, Message]] = []

    def recording(message: Message, context: Context) -> Message:
        kept.append((context.node_id, _copy(message)))
        return client_app(message, context)

    grid = LoopbackGrid(recording, configs, {RUN_CONFIG_KEY: prepared.spec.to_json()})
    with contextlib.suppress(FedLabelsError):  # a method that does not go on without one
        run_server(grid, server_context(prepared.spec))
    assert failed
    return prepared, grid, kept


@pytest.mark.parametrize("crash_at", [1, 2])  # 1: the site's first message of all
@pytest.mark.parametrize("options", [{"sensitivity": "worst"},
                                     {"mechanism": "dpsgd", "sensitivity": "worst",
                                      "example_rate": 0.5}])
def test_a_release_charged_but_never_sent_is_not_charged_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any],
        crash_at: int) -> None:
    """A site that fails after charging a release (a crash while saving its snapshot) never
    hands that release out; when the same message number comes again the recorded charge
    covers it, so the plan's one-run budget still lets the run finish, and the ledger holds
    one entry per release sent."""
    model = "mlp(hidden=4)" if options.get("mechanism") == "dpsgd" else "dt"
    cfg = replace(_config(**options), model=model)
    prepared, grid, kept = _run_with_a_crash(
        tmp_path, monkeypatch, cfg, lambda role: len(role.ledger.events) == crash_at)
    ctx = grid.contexts[NODE]
    ledger = _ledger(ctx, prepared)
    assert len(ledger.events()) == crash_at  # the last charge's release was never sent
    crashed = [m for n, m in kept if n == NODE and _seq(m) == max(
        _seq(k) for nn, k in kept if nn == NODE)][-1]
    # the same message again (a resumed ServerApp re-sends it): answered, nothing new charged
    reply = client_app(_copy(crashed), ctx)
    assert reply.has_content()
    assert len(_ledger(ctx, prepared).events()) == crash_at
    # and a third time: now the stored reply
    assert _ours(client_app(_copy(crashed), ctx)) == _ours(reply)
    assert len(_ledger(ctx, prepared).events()) == crash_at


def test_the_plan_budget_is_fixed_by_the_first_run(tmp_path: Path) -> None:
    """One run of the plan as the first run computed it: a later run whose plan costs more
    (here the plan file says ε = 4; with sensitivity=empirical a public set the coordinator
    chooses could do the same) does not raise the dataset's lifetime budget."""
    import json

    cfg = _config(sensitivity="worst")
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [dict(c.node_config) for c in first.contexts.values()]
    result, grid = _rerun(prepared, configs)
    assert result is not None and len(result.rounds) == cfg.rounds
    for c in configs:
        plan = json.loads(Path(c["privacy-plan"]).read_text())
        plan["options"]["epsilon"] = 4.0
        Path(c["privacy-plan"]).write_text(json.dumps(plan))
    again, grid = _rerun(prepared, configs)
    assert again is None or not again.rounds
    for ctx in grid.contexts.values():
        ledger = _ledger(ctx, prepared)
        assert len(ledger.events()) == cfg.rounds
        assert ledger.summary()["noiseless_answers"] == 0


def test_a_run_that_cannot_finish_within_the_budget_releases_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """ledger-epsilon = 1.3 holds one run of an ε = 1 plan (2 XOR releases) and one more
    release (3 compose to ε 1.25, 4 to about 1.41): the second run is refused before its
    first release (before: its first round was released, ε 1.25 spent for a run that was
    then refused at round 2)."""
    cfg = _config(sensitivity="worst")
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [{**c.node_config, "ledger-epsilon": 1.3} for c in first.contexts.values()]
    result, grid = _rerun(prepared, configs)
    assert result is not None and len(result.rounds) == cfg.rounds
    again, grid = _rerun(prepared, configs)
    assert again is None or not again.rounds
    for ctx in grid.contexts.values():
        assert len(_ledger(ctx, prepared).events()) == cfg.rounds
    assert "Refusing the run before its first release" in caplog.text


def test_a_noiseless_answer_noted_but_never_sent_is_given_when_asked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the plan's budget a second noiseless s* answer is refused; the same request
    again after a crash that lost the first answer is not a second one."""
    prepared, grid, kept = _run_with_a_crash(
        tmp_path, monkeypatch, _config(**_EMPIRICAL),
        lambda role: role.sensitivity_answers == 1)
    ctx = grid.contexts[NODE]
    asked = next(m for n, m in kept if n == NODE
                 and from_record_dict(m.content)[0].kind == "dpfedct.sensitivity")
    reply = client_app(_copy(asked), ctx)  # the request again: answered now
    assert "bits" in from_record_dict(reply.content)[0].config
    assert _ledger(ctx, prepared).noiseless() == 1


def test_a_crash_before_the_first_reply_of_a_later_run_is_not_charged_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new run's sequence name was kept only with its first reply (so that the record of
    the run before stays whole for a resume): a site that crashed after charging the first
    release of a second run, before replying, gave the same message a new name when it came
    again and charged the release twice (conservative, but not exact). The name of a
    sequence not yet answered is now kept beside the old record, so the charge of the
    release never handed out covers the one made now."""
    import fedlabels.engines.flower.client_app as site_app

    cfg = _config(sensitivity="worst")
    prepared, first = loopback_deployment(cfg, tmp_path / "sites")
    configs = [{**c.node_config, "ledger-epsilon": 100.0} for c in first.contexts.values()]
    result, grid = _rerun(prepared, configs)  # run 1, whole
    assert result is not None
    assert len(_ledger(grid.contexts[NODE], prepared).events()) == cfg.rounds

    real_save, failed = site_app.save_state, []

    def crash_once(role: Any, records: Any, site: Any, key: bytes) -> None:
        if site.partition_id == 0 and not failed:
            failed.append(1)
            raise OSError("the SuperNode was killed while saving")
        real_save(role, records, site, key)

    monkeypatch.setattr(site_app, "save_state", crash_once)
    kept: list[Message] = []

    def recording(message: Message, context: Context) -> Message:
        if context.node_id == NODE and _seq_or_none(message) == 1:
            kept.append(_copy(message))
        return client_app(message, context)

    run2 = LoopbackGrid(recording, configs, {RUN_CONFIG_KEY: prepared.spec.to_json()})
    with contextlib.suppress(FedLabelsError):
        run_server(run2, server_context(prepared.spec))
    assert failed and kept
    ctx = run2.contexts[NODE]
    assert len(_ledger(ctx, prepared).events()) == cfg.rounds + 1  # charged, never sent
    reply = client_app(_copy(kept[-1]), ctx)  # the same message again (a re-send)
    assert reply.has_content()
    assert len(_ledger(ctx, prepared).events()) == cfg.rounds + 1  # not charged again
    assert _ours(client_app(_copy(kept[-1]), ctx)) == _ours(reply)  # now the stored reply


def _seq_or_none(message: Message) -> int | None:
    meta = message.content.config_records.get(META)
    return None if meta is None or "seq" not in meta else int(meta["seq"])


def test_a_request_attached_to_a_message_is_answered_only_if_it_is_an_evaluation(
        tmp_path: Path) -> None:
    """A site answers the evaluation request a message may carry (``then``) right after
    the message. A coordinator that attached a copy of round 1's train message instead got
    a second release handled and charged (its reply dropped, the role's state changed), so
    the site's one-run plan was spent by round 1 and round 2 was refused ``budget``; a
    request that is not an evaluation is now refused before anything is handled."""
    from fedlabels.engines.flower.convert import to_record_dict

    class AttachTrain(LoopbackGrid):
        def push_messages(self, messages):  # type: ignore[no-untyped-def]
            batch = list(messages)
            for m in batch:
                ours, meta = from_record_dict(m.content)
                if ours.category == "protocol" and meta.get("round") == 0:
                    m.content = to_record_dict(ours, ours, **meta)
            return super().push_messages(batch)

    cfg = _config()
    prepared, _ = loopback_deployment(cfg, tmp_path / "sites")
    grid = AttachTrain(client_app, [prepared.node_settings(c) for c in range(cfg.clients)],
                       {RUN_CONFIG_KEY: prepared.spec.to_json()})
    with pytest.raises(FedLabelsError, match="every client was lost"):
        run_server(grid, server_context(prepared.spec))
    status = Path(prepared.spec.status).read_text()
    assert "refused: message" in status and "refused: budget" not in status, status
    for node, ctx in grid.contexts.items():
        assert _ledger(ctx, prepared).events() == [], node  # nothing released or charged
