"""Audit of whole methods: recording, threat-model adapters, the CLI, bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.audit import (
    Recorder,
    RecordingMethod,
    audit_federation,
    audit_rounds,
    make_plan,
    parse_attacks,
    threat_for,
)
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines import simulate
from fedlabels.learners import parse_model_spec
from fedlabels.methods import get_method

MLP = "mlp(hidden=16)"


@pytest.fixture(scope="module")
def fed():
    """breast_cancer with a held-out split large enough for non-members and attacker data."""
    return fl.load_federation("breast_cancer", clients=3, unlabeled=80,
                              private_per_client=40, test=300, seed=0)


def _audit(fed, method, **kw):
    kw.setdefault("attacks", "loss,rmia,label-only")
    return audit_federation(method, fed, parse_model_spec(MLP), rounds=3, period=10, seed=0,
                            n_members=20, n_population=30, n_refs=2, aug_k=2, views=2, **kw)


def test_recorder_sees_exactly_what_the_server_decodes(fed):
    recorder = Recorder()
    result = simulate(RecordingMethod(get_method("fedct"), recorder), fed,
                      parse_model_spec("dt"), rounds=2, seed=0)
    assert result.method == "fedct" and len(result.rounds) == 2
    assert [(e.round, e.cid, e.ordinal) for e in recorder.exchanges] == [
        (r, c, r + 1) for r in range(2) for c in range(3)]
    ex = recorder.exchanges[-1]
    assert ex.up.kind == "fedct.labels" and set(ex.up.arrays) == {"labels"}
    assert ex.down.arrays == {}  # large downlink arrays are not kept


def test_fedct_adapter_observes_the_clients_hard_labels_on_inserted_queries(fed):
    result, report = _audit(fed, "fedct")
    plan = make_plan(fed, n_members=20, n_population=30, aug_k=2, seed=0)
    p = result.extra["privacy"]
    assert p["threat_model"]["key"] == "hard-labels-on-queries"
    assert p["threat_model"]["queries_in_public"] is True
    # the attacker's query set really went into U
    assert result.federation["n_public"] == 80 + len(plan.X_query)
    attacks = p["audit"]["attacks"]
    assert set(attacks) == {"loss", "rmia", "label-only:gap", "label-only:aug"}
    assert set(attacks["loss"]["per_view"]) == {"round 1", "round 3", "all rounds"}
    assert 0 <= p["vul"] <= 1 and p["strongest_attack"] in attacks
    assert p["vul"] == max(a["vul"] for a in attacks.values())
    assert attacks["loss"]["n_members"] == 20 == attacks["loss"]["n_nonmembers"]
    # the last-round observation equals the final local models' labels on Q
    gap = report.results["label-only:gap"]["round 3"]
    for cid, model in enumerate(result.client_models):
        y = plan.y_query[plan.cand_index[cid]]
        correct = (model.predict(plan.X_query[plan.cand_index[cid]]) == y).astype(float)
        expected = fl.privacy.attacks.evaluate_attack("gap", correct, plan.membership[cid]).auc
        assert gap[cid].auc == pytest.approx(expected)


def test_fedavg_adapter_rebuilds_the_received_models(fed):
    result, _ = _audit(fed, "fedavg", attacks="loss,lira,shadow")
    p = result.extra["privacy"]
    assert p["threat_model"]["key"] == "parameters"
    assert p["threat_model"]["queries_in_public"] is False
    assert result.federation["n_public"] == 80  # U untouched
    assert set(p["audit"]["attacks"]) == {"loss", "lira", "shadow"}
    roc = p["audit"]["attacks"]["lira"]["roc"]
    assert roc["fpr"][0] == 0 and roc["tpr"][-1] == pytest.approx(1.0)
    assert np.all(np.diff(roc["tpr"]) >= -1e-9)
    assert p["audit"]["settings"]["recorded_rounds"] == [1, 3]


def test_pate_adapter_attacks_the_votes_and_the_released_student(fed):
    result, _ = _audit(fed, "pate", attacks="loss")
    p = result.extra["privacy"]
    assert p["threat_model"]["key"] == "teacher-votes-on-queries"
    assert set(p["audit"]["attacks"]["loss"]["per_view"]) == {"round 1", "student"}
    assert "epsilon" in p  # PATE's own privacy entries are kept


def test_local_only_sends_nothing_and_has_vul_one_half(fed):
    result, report = _audit(fed, "local")
    p = result.extra["privacy"]
    assert p["vul"] == 0.5 and p["threat_model"]["key"] == "nothing-sent"
    assert "attacks" not in p["audit"] and report.results == {}
    assert threat_for("centralized").fixed_vul == 1.0


def test_merge_keeps_a_dp_methods_privacy_entries(fed):
    from fedlabels.audit import merge_privacy

    result, report = _audit(fed, "local")
    result.extra["privacy"] = {"epsilon": 1.0, "delta": 1e-5}
    merged = merge_privacy(result, report)
    assert merged["epsilon"] == 1.0 and merged["vul"] == 0.5


def test_cli_audit_writes_json_and_roc_plot(tmp_path, capsys):
    out = tmp_path / "a.json"
    code = main(["audit", "--method", "fedct", "--dataset", "breast_cancer", "--clients", "3",
                 "--model", "dt", "--rounds", "2", "--unlabeled", "80",
                 "--private-per-client", "40", "--test", "300", "--mia-attacks", "loss,label-only",
                 "--audit-members", "20", "--audit-refs", "2", "--audit-population", "30",
                 "--audit-aug", "2", "--output", str(out), "--no-progress"])
    assert code == 0
    data = json.loads(out.read_text())
    assert {"vul", "tpr_at_1pct_fpr", "threat_model", "audit"} <= set(data["privacy"])
    assert out.with_suffix(".roc.png").stat().st_size > 1000
    assert "VUL" in capsys.readouterr().out
    out2 = tmp_path / "b.json"
    assert main(["audit", "--method", "local", "--dataset", "breast_cancer",
                 "--clients", "3", "--model", "dt", "--rounds", "1", "--unlabeled", "80",
                 "--test", "300", "--audit-members", "20", "--output", str(out2),
                 "--no-progress"]) == 0
    assert json.loads(out2.read_text())["privacy"]["vul"] == 0.5


@pytest.mark.parametrize("argv, message", [
    (["--mia-attacks", "loss,boundary"], "unknown attack"),
    (["--audit-members", "5"], "too few candidates"),
    (["--test", "40"], "held-out split"),
    (["--audit-clients", "0,7"], "do not exist"),
    (["--method", "xclp"], "the audit has no attacks for method 'xclp'"),
])
def test_cli_bad_inputs(argv, message, capsys):
    base = ["audit", "--method", "fedct", "--dataset", "breast_cancer", "--clients", "3",
            "--model", "dt", "--rounds", "1", "--unlabeled", "80", "--test", "300",
            "--audit-members", "20", "--no-progress"]
    assert main(base + argv) == 2
    assert message in capsys.readouterr().err


def test_parse_attacks_and_round_selection():
    assert parse_attacks(None) == parse_attacks("all") == ["loss", "lira", "rmia", "shadow",
                                                           "label-only"]
    assert parse_attacks("RMIA, loss,rmia") == ["rmia", "loss"]
    with pytest.raises(FedLabelsError, match="unknown attack"):
        parse_attacks("")
    assert audit_rounds(10, 3) == {0, 4, 9} or audit_rounds(10, 3) == {0, 5, 9}
    assert audit_rounds(4, 0) == {0, 1, 2, 3}


def test_cli_audit_of_a_dp_run_prints_its_guarantee(tmp_path, capsys):
    out = tmp_path / "dp.json"
    code = main(["audit", "--method", "dp-fedct", "--mechanism", "xor", "--epsilon", "8",
                 "--dataset",
                 "breast_cancer", "--clients", "3", "--model", "dt", "--rounds", "2",
                 "--unlabeled", "80", "--private-per-client", "40", "--test", "300",
                 "--mia-attacks", "loss", "--audit-members", "20", "--audit-refs", "2",
                 "--audit-population", "30", "--output", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "privacy: ε = 8, δ = 1e-05 (formal" in printed
    assert json.loads(out.read_text())["privacy"]["guarantee"] == "formal"


def test_audits_under_other_threats_or_counts_get_other_default_names(
        tmp_path, monkeypatch, capsys):
    """Every audit of one run was named ..._seed0_audit_HASH whatever its --threat, so
    docs/audit.md's commands in sequence (forged-u, then fixed-u) needed --overwrite and
    replaced the first; the name carries the threat and hashes the audit's settings, and
    the same audit again is still refused without --overwrite, the first left as it was."""
    monkeypatch.chdir(tmp_path)
    base = ["audit", "--method", "fedct", "--dataset", "breast_cancer", "--clients", "3",
            "--model", "dt", "--rounds", "1", "--unlabeled", "80", "--private-per-client",
            "40", "--test", "300", "--mia-attacks", "loss", "--audit-members", "20",
            "--audit-refs", "2", "--audit-population", "30", "--no-progress"]
    for extra in (["--threat", "forged-u"], ["--threat", "fixed-u"], ["--audit-refs", "3"]):
        assert main(base + extra) == 0
    names = sorted(p.name for p in (tmp_path / "results").glob("*.json"))
    assert len(names) == 3, names
    assert sum("_audit-forged-u_" in n for n in names) == 2
    assert sum("_audit-fixed-u_" in n for n in names) == 1
    capsys.readouterr()
    kept = {p: p.read_bytes() for p in (tmp_path / "results").iterdir()}
    assert main([*base, "--threat", "fixed-u"]) == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (tmp_path / "results").iterdir()} == kept
