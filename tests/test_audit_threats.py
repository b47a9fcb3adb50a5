"""The audit's threat models, its sizing, the null baseline and protocol invariance."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fedlabels as fl
import fedlabels.audit.core as audit_core
import fedlabels.audit.threats as audit_threats
from fedlabels.audit import audit_federation, auditable_methods, make_plan
from fedlabels.audit.adversaries import THREATS
from fedlabels.audit.curves import vul_curves
from fedlabels.audit.plan import size_audit
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines import simulate
from fedlabels.learners import parse_model_spec
from fedlabels.methods import get_method

MLP = parse_model_spec("mlp(hidden=16)")
#: DP methods need their privacy budget (FREDY: 2 teacher rounds, for speed); everything else
#: runs on the audit's defaults
BUDGET = {"dp-fedct": {"epsilon_per_round": 1.0}, "dp-fedavg": {"epsilon": 8.0},
          "dp-pate": {"epsilon": 8.0},
          "fredy": {"epsilon_per_query": 0.2, "teacher_rounds": 2}}


@pytest.fixture(scope="module")
def digits():
    return fl.load_federation("digits", clients=5, seed=0)


def _rows(X: np.ndarray) -> set[bytes]:
    return {np.ascontiguousarray(r, dtype=np.float32).tobytes() for r in X}


def _capture_run(monkeypatch) -> list:
    """The federation each audited run is simulated on."""
    seen: list = []
    real = audit_core.simulate

    def spy(method, fed, *a, **kw):
        seen.append(fed)
        return real(method, fed, *a, **kw)

    monkeypatch.setattr(audit_core, "simulate", spy)
    return seen


def _audit(fed, method="fedct", **kw):
    kw.setdefault("attacks", "loss,rmia")
    return audit_federation(method, fed, MLP, rounds=2, period=5, seed=0, n_refs=2,
                            n_members=20, n_population=30, aug_k=2, progress=False, **kw)


@pytest.mark.parametrize("threat", list(THREATS))
def test_every_threat_model_is_named_with_the_result_keys(digits, threat):
    result, _ = _audit(digits, threat=threat)
    p = result.extra["privacy"]
    assert {"vul", "vul_ci", "null_vul", "null_vul_ci", "threat_model"} <= set(p)
    t = p["threat_model"]
    assert t["name"] == threat and t["description"] == THREATS[threat].description
    assert t["adversary"] and t["observes"]
    lo, hi = p["vul_ci"]
    assert lo <= p["vul"] <= hi


def test_fixed_u_leaves_u_alone_and_forged_u_inserts_the_candidates(digits, monkeypatch):
    plan = make_plan(digits, n_members=20, n_population=30, aug_k=2, seed=0)
    candidates = _rows(plan.X_query[plan.cand_index[0]])
    seen = _capture_run(monkeypatch)
    _audit(digits, threat="fixed-u")
    _audit(digits, threat="forged-u")
    fixed, forged = seen
    assert np.array_equal(fixed.X_public, digits.X_public)  # the ordinary U, nothing added
    assert not candidates & _rows(fixed.X_public)
    assert candidates <= _rows(forged.X_public)


def test_fixed_u_attacks_a_copy_trained_on_the_outputs_on_u(digits, monkeypatch):
    calls: list[tuple[int, int]] = []
    real = audit_core.observations_for

    def spy(view, *a, **kw):
        assert view.copy and not view.queries_in_public
        return real(view, *a, **kw)

    monkeypatch.setattr(audit_core, "observations_for", spy)
    import fedlabels.audit.adversaries as adv

    real_copy = adv.copy_trainer

    def counting(X_public, *a, **kw):
        assert len(X_public) == len(digits.X_public)
        copy = real_copy(X_public, *a, **kw)

        def wrapped(cid, idx, outputs, ordinal):
            calls.append((cid, len(idx)))
            return copy(cid, idx, outputs, ordinal)
        return wrapped

    monkeypatch.setattr(adv, "copy_trainer", counting)
    _audit(digits, threat="fixed-u")
    assert calls and all(n == len(digits.X_public) for _, n in calls)  # FedCT: all of U


def test_curious_client_reads_only_what_the_server_sends(digits, monkeypatch):
    def no_replies(*a, **kw):
        raise AssertionError("the curious client read a client's reply")

    monkeypatch.setattr(audit_threats, "observe", no_replies)
    result, report = _audit(digits, "fedavg", threat="curious-client")
    assert result.extra["privacy"]["threat_model"]["name"] == "curious-client"
    assert report.results  # the global model the server sent back was attacked
    # a method whose server sends back nothing computed from private data: 0.5, with reason
    result, _ = _audit(digits, "local", threat="curious-client")
    p = result.extra["privacy"]
    assert p["vul"] == 0.5 and "by construction" in p["threat_model"]["reason"]


def test_released_model_attacks_the_final_models_only(digits):
    result, report = _audit(digits, "local", threat="released-model")
    views = {v for per_view in report.results.values() for v in per_view}
    assert views == {"final model"}
    # local models are trained on their members: the release leaks, unlike the messages
    assert result.extra["privacy"]["vul"] > 0.5


def test_fedmd_protocol_sizes_are_identical_with_and_without_the_audit(digits):
    plain = simulate(get_method("fedmd"), digits, MLP, rounds=1, period=5, seed=0,
                     progress=False)
    audited, _ = _audit(digits, "fedmd", threat="forged-u")
    assert audited.extra["fedmd"] == plain.extra["fedmd"]
    # D0 (the labelled slice) lies inside the ordinary U, so no candidate gets its label
    assert audited.extra["fedmd"]["public_labeled"] <= len(digits.X_public)


@pytest.mark.parametrize("method", auditable_methods())
def test_default_audit_sizes_work_on_digits_for_every_method(digits, method):
    model = parse_model_spec(get_method(method).capabilities.default_model or "mlp(hidden=16)")
    result, _ = audit_federation(method, digits, model, rounds=1, period=2, seed=0,
                                 attacks="loss", n_refs=1, views=1, options=BUDGET.get(method),
                                 progress=False)
    p = result.extra["privacy"]
    s = p["audit"]["settings"]
    held_out = len(digits.y_test)
    used = (s["n_nonmembers"] + s["n_ghosts"] + s["n_attacker"] + s["n_population"]
            + s["n_evaluation"])
    assert used == held_out  # every held-out record has exactly one role
    assert s["n_evaluation"] >= held_out // 5
    assert {"vul", "vul_ci", "null_vul", "threat_model"} <= set(p)


def test_sizing_errors_name_a_test_size_that_works():
    small = fl.load_federation("digits", clients=5, test=40, seed=0)
    with pytest.raises(FedLabelsError, match="--test") as err:
        size_audit(small, list(range(5)), n_members=200, n_attacker=None, n_population=200)
    n_test = int(str(err.value).split("--test ")[1].split()[0])
    works = fl.load_federation("digits", clients=5, test=n_test, seed=0)
    sizes = size_audit(works, list(range(5)), n_members=200, n_attacker=None,
                       n_population=200)
    assert sizes.members >= 10 and sizes.evaluation >= 20


def test_ghost_members_are_no_clients_data_and_give_a_null_near_one_half(digits):
    plan = make_plan(digits, n_members=40, n_population=30, aug_k=2, seed=0)
    ghosts = _rows(plan.X_query[plan.ghost_index])
    for client in digits.clients:
        assert not ghosts & _rows(client.X)
    null = plan.null_plan()
    for c in plan.clients:  # same non-members and membership vector, ghosts in place
        assert np.array_equal(null.cand_index[c][40:], plan.cand_index[c][40:])
        assert np.array_equal(null.cand_index[c][:40], plan.ghost_index)
    result, _ = audit_federation("fedct", digits, MLP, rounds=1, period=5, seed=0,
                                 attacks="loss", n_refs=1, n_members=40, views=1,
                                 progress=False)
    p = result.extra["privacy"]
    assert abs(p["null_vul"] - 0.5) < 0.1
    assert p["null_vul_ci"][0] <= 0.5 + 0.02


def test_vul_curves_place_sub_rounds_within_their_round():
    privacy = {"audit": {"attacks": {"loss": {"per_view": {
        "round 1.1": {"auc_mean": 0.5}, "round 1.2": {"auc_mean": 0.6},
        "round 2": {"auc_mean": 0.7}, "all rounds": {"auc_mean": 0.9}}}}}}
    x, y = vul_curves(privacy)["loss"]
    assert x == [0.5, 1.0, 2.0] and y == [0.5, 0.6, 0.7]


def test_cli_threat_flag_and_per_round_plot(tmp_path, capsys, monkeypatch):
    import matplotlib.pyplot as plt

    import fedlabels.audit.curves as curves

    titles = []  # the audit's plots say what ran and its guarantee (they named neither)
    real = curves.save_png
    monkeypatch.setattr(curves, "save_png", lambda fig, path: titles.append(
        fig.axes[0].get_title()) or real(fig, path))
    out = tmp_path / "a.json"
    assert main(["audit", "--method", "fedct", "--dataset", "digits", "--model", "dt",
                 "--rounds", "2", "--threat", "fixed-u", "--audit-views", "0",
                 "--mia-attacks", "loss", "--audit-refs", "1", "--output", str(out),
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "threat model fixed-u" in text and "audit sizes:" in text and "null VUL" in text
    data = json.loads(out.read_text())
    assert data["privacy"]["threat_model"]["name"] == "fixed-u"
    assert out.with_suffix(".vul_rounds.png").stat().st_size > 0
    assert len(titles) == 2
    for title in titles:
        assert title.startswith("fedct on digits, m = ")
        assert ", R = 2, seed 0: " in title and "(fixed-u)" in title
        assert title.endswith("\nno DP guarantee")
    plt.close("all")


def test_vul_curve_plot_ticks_whole_rounds_and_names_the_null_band(monkeypatch, tmp_path):
    import fedlabels.audit.curves as curves

    per_view = {f"round {r}": {"auc_mean": 0.5 + r / 100} for r in range(1, 9)}
    privacy = {"audit": {"attacks": {"loss": {"per_view": per_view}}}, "null_vul": 0.52,
               "null_vul_ci": [0.48, 0.56], "threat_model": {"name": "curious-server"}}
    drawn = []
    monkeypatch.setattr(curves, "save_png", lambda fig, path: drawn.append(fig) or path)
    curves.plot_vul_curves(privacy, tmp_path / "v.png")
    ax = drawn[0].axes[0]
    drawn[0].canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert any("null 95 % interval [0.480, 0.560]" in label
               for label in ax.get_legend_handles_labels()[1])


@pytest.mark.parametrize("flags", [["--device", "cuda"], ["--device", "auto"],
                                   ["--precision", "bf16"]])
def test_audit_refuses_a_device_or_precision_it_would_not_honour(flags, tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["audit", "--model", "dt", "--rounds", "1", "--no-progress", *flags,
                 "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{' '.join(flags)}: the audit trains" in err and err.count("\n") == 1
    assert not out.exists()


def test_audit_plot_legends_sit_outside_the_axes(monkeypatch, tmp_path):
    """The per-round VUL plot put its legend 'best', over the curves of attacks that bunch
    together near 0.47; the ROC plot's sat in the lower right, where attacks with an AUC
    below 0.5 run. Both now sit right of the axes."""
    import matplotlib.pyplot as plt

    import fedlabels.audit.curves as curves
    from fedlabels.audit.report import plot_roc

    per_view = {f"round {r}": {"auc_mean": 0.47} for r in range(1, 4)}
    roc = {"fpr": [0.1, 0.5, 1.0], "tpr": [0.05, 0.4, 1.0]}
    attacks = {name: {"per_view": per_view, "vul": 0.47, "worst_view": "round 1",
                      "roc": roc, "fpr_resolution": 0.1} for name in ("loss", "lira", "rmia")}
    privacy = {"audit": {"attacks": attacks}, "null_vul": 0.55, "null_vul_ci": [0.38, 0.65],
               "vul": 0.47, "threat_model": {"name": "curious-server", "key": "fixed-u"}}
    drawn = []
    monkeypatch.setattr(curves, "save_png", lambda fig, path: drawn.append(fig) or path)
    curves.plot_vul_curves(privacy, tmp_path / "v.png")
    plot_roc(privacy, tmp_path / "r.png")
    for fig in drawn:
        fig.canvas.draw()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent()
        assert not legend.overlaps(ax.get_window_extent()), ax.get_title()
        plt.close(fig)


def test_a_subset_payload_without_its_subset_is_one_line_not_a_key_error():
    from types import SimpleNamespace

    from fedlabels.audit.recorder import Exchange
    from fedlabels.comm import Message

    ex = Exchange(round=0, cid=1, ordinal=1, down=Message("topk.train", config={"steps": 5}),
                  up=Message("topk.labels"))
    ctx = SimpleNamespace(n_public=10)
    with pytest.raises(FedLabelsError, match=r"rows 'subset'.*subset_seed, subset_size.*"
                                             r"'topk.train' request names none"):
        audit_threats._public_indices(ex, "subset", 4, ctx)  # type: ignore[arg-type]


def test_an_unreadable_subset_reply_stops_the_audit_in_round_one(monkeypatch):
    """A plug-in whose labels are declared rows='subset' but whose requests name no subset
    (a client-chosen subset) was refused only after every round of the run; the recorder now
    checks each reply as it arrives, so the run stops in round 1 and nothing else trains."""
    from dataclasses import replace

    from fedlabels.audit.recorder import _RoundTrackingServer
    from fedlabels.method.threat import Payload
    from fedlabels.methods import METHODS
    from fedlabels.methods.fedct.fedct import FedCT

    class SubsetFedCT(FedCT):
        name = "fedct-subset"
        threat_model = replace(FedCT.threat_model, payloads=(
            Payload("fedct.labels", "labels", "hard-labels", rows="subset"),
            *FedCT.threat_model.payloads[1:]))

    monkeypatch.setitem(METHODS, "fedct-subset", SubsetFedCT())
    rounds: list[int] = []
    real = _RoundTrackingServer.run_round

    def counted(self, rnd, grid):
        rounds.append(rnd)
        return real(self, rnd, grid)

    monkeypatch.setattr(_RoundTrackingServer, "run_round", counted)
    monkeypatch.setattr(audit_core, "ReferenceModels", None)  # never reached
    fed = fl.load_federation("breast_cancer", clients=3, unlabeled=60, private_per_client=40,
                             test=200, seed=0)
    with pytest.raises(FedLabelsError, match=r"rows 'subset'.*'fedct.train' request names"):
        audit_federation("fedct-subset", fed, "dt", rounds=4, period=2, seed=0, n_refs=2,
                         n_members=15, n_population=20, aug_k=2, progress=False,
                         attacks="loss")
    assert rounds == [0]
