"""DP-FedCT and DP-FedAvg end to end on breast_cancer (short runs)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.methods.fedavg.dp_fedavg import clip_update
from fedlabels.privacy.mechanisms import flip_probability


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; small MLPs are fastest on one thread
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    return fl.load_federation("breast_cancer", clients=5, seed=0)


def test_dp_fedct_result_records_privacy(fed: fl.Federation) -> None:
    res = fl.run("dp-fedct", fed, model="dt", rounds=3, seed=0,
                 options={"epsilon_per_round": 2.0, "sensitivity": "worst"})
    p = res.extra["privacy"]
    n_u = len(fed.X_public)
    assert p["sensitivity"]["bits"] == 2 * n_u and p["sensitivity"]["source"] == "worst"
    assert p["flip_probability"] == pytest.approx(flip_probability(2.0, 2 * n_u))
    assert p["epsilon_per_round"] == 2.0 and p["rounds_accounted"] == 3
    assert p["target"] is None  # a per-round ε sets no run target
    assert p["epsilon_by_accountant"]["basic"] == pytest.approx(6.0)
    assert 0 < p["epsilon"] <= 6.0 and p["delta"] in (0.0, 1e-5)
    assert p["accountant"] in ("basic", "exact", "rdp", "pld")
    assert p["assumptions"] and "deviates" in p["threat_model"]
    assert "record" in p["neighbouring"]
    # the uplink carries C = 2 bits per row, bit-packed
    payload = math.ceil(n_u * 2 / 8)
    up = res.rounds[0].bytes_up[0]
    assert payload <= up < payload + 300
    json.dumps(res.to_dict())  # JSON-serialisable


def test_dp_fedct_utility_tracks_epsilon(fed: fl.Federation) -> None:
    plain = fl.run("fedct", fed, model="dt", rounds=3, seed=0)
    weak = fl.run("dp-fedct", fed, model="dt", rounds=3, seed=0,
                  options={"epsilon_per_round": 200.0, "sensitivity": 10})  # f ~ 2e-9
    strong = fl.run("dp-fedct", fed, model="dt", rounds=3, seed=0,
                    options={"epsilon_per_round": 0.5, "sensitivity": "worst"})  # f ~ 1/2
    assert weak.final["mean_accuracy"] == pytest.approx(plain.final["mean_accuracy"],
                                                        abs=0.03)
    assert weak.rounds[-1].server["consensus_accuracy"] > 0.85
    assert abs(strong.rounds[-1].server["consensus_accuracy"] - 0.5) < 0.12  # random labels
    # (the noise is secret, so runs differ: tests/test_privacy_noise_source.py)


def test_dp_fedct_empirical_prop2_kary_and_total(fed: fl.Federation) -> None:
    emp = fl.run("dp-fedct", fed, model="dt", rounds=2, seed=0,
                 options={"epsilon_per_round": 5.0, "sensitivity": "empirical",
                          "sensitivity_neighbours": 4})
    s = emp.extra["privacy"]["sensitivity"]
    assert s["source"] == "empirical" and len(s["details"]["per_client_bits"]) == 5
    assert s["bits"] == min(max(s["details"]["per_client_bits"].values()),
                            2 * len(fed.X_public))
    assert emp.communication["control_bytes_total"] > 0  # the estimate is a control phase
    p2 = fl.run("dp-fedct", fed, model="dt", rounds=2, seed=0,
                options={"epsilon_per_round": 5.0, "sensitivity": "prop2",
                         "stability_rate": 0.01,
                         "sensitivity_delta": 1e-3, "mechanism": "kary"})
    pp = p2.extra["privacy"]
    assert pp["sensitivity"]["source"] == "prop2" and "k-ary" in pp["mechanism"]
    assert pp["epsilon_per_label"] == pytest.approx(5.0 / pp["sensitivity"]["labels"])
    tot = fl.run("dp-fedct", fed, model="dt", rounds=4, seed=0,
                 options={"epsilon": 8.0, "sensitivity": 40,  # the run's total budget
                          "mechanism": "xor"})
    pt = tot.extra["privacy"]
    assert pt["epsilon"] == pytest.approx(8.0, rel=1e-3) and pt["epsilon"] <= 8.0 + 1e-6
    assert pt["epsilon_per_round"] >= 2.0  # never below basic composition's 8 / 4
    assert pt["target"]["epsilon"] == 8.0 and pt["target"]["delta"] == 1e-5
    assert pt["target"]["planned"] == pt["target"]["released"] == 4
    kary = fl.run("dp-fedct", fed, model="dt", rounds=2, seed=0,
                  options={"epsilon": 4.0, "sensitivity": 40, "mechanism": "kary"})
    # k-ary: the largest per-round ε whose exact composition stays within 4
    pk = kary.extra["privacy"]
    assert pk["epsilon_per_round"] > 2.0 and pk["epsilon"] <= 4.0 + 1e-9  # basic: 4 / 2
    assert pk["accountant"] == "exact"
    c = fed.n_classes

    def rdp_total(eps_round: float) -> float:  # dp-accounting directly: 2 rounds x 20 labels
        import dp_accounting as dpa
        from dp_accounting.rdp import rdp_privacy_accountant as rdp

        acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        acc.compose(dpa.RandomizedResponseDpEvent(
            noise_parameter=c / (math.exp(eps_round / 20) + c - 1), num_buckets=c), 2 * 20)
        return float(acc.get_epsilon(1e-5))

    def pld_total(eps_round: float) -> float:  # dp-accounting's PLD, an upper bound (1e-4 grid)
        from dp_accounting.pld import privacy_loss_distribution as pld

        one = pld.from_randomized_response(c / (math.exp(eps_round / 20) + c - 1), c)
        return float(one.self_compose(2 * 20).get_epsilon_for_delta(1e-5))

    assert 3.99 <= pld_total(pk["epsilon_per_round"]) <= 4.0 + 5e-3
    assert pld_total(1.01 * pk["epsilon_per_round"]) > 4.0  # the largest such ε
    assert rdp_total(pk["epsilon_per_round"]) > 4.0  # more than RDP's calibration allowed


@pytest.mark.parametrize("options, match", [
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta"),
    ({"epsilon": 1.0, "delta": 0.0}, "delta"),
    ({"epsilon": 1.0, "sensitivity": 0}, "sensitivity"),
    ({"epsilon": 1.0, "sensitivity": 10_000}, "exceeds the worst case"),
    ({"epsilon": 1.0, "sensitivity": "prop2", "stability_rate": 1.2}, "stability_rate"),
    ({"epsilon": 1.0, "sensitivity": "prop2", "stability_rate": 0.0}, "stability_rate"),
    ({"epsilon": 1.0, "sensitivity": "prop2"}, "needs the learner's stability rate"),
    ({"epsilon": 1.0, "sensitivity": "best"}, "worst, empirical, prop2 or a number"),
    ({"epsilon": 1.0, "stability_rate": 0.1}, "apply only with sensitivity prop2"),
    ({"epsilon": 1.0, "sensitivity_neighbours": 3}, "apply only with sensitivity empirical"),
    ({"epsilon": 1.0, "sensitivity_note": "x"}, "apply only with sensitivity a number"),
    ({"epsilon": 1.0, "sensitivity": "empirical", "sensitivity_model": "dt,rf"},
     "one model spec"),
    ({"epsilon": 1.0, "sensitivity": "empirical", "sensitivity_relation": "swap"},
     "sensitivity_relation"),
    ({}, "exactly one of epsilon"),
    ({"epsilon": 1.0, "epsilon_per_round": 2.0}, "exactly one of epsilon"),
    ({"epsilon_total": 2.0}, "no option 'epsilon_total'"),  # --epsilon is the total now
    ({"epsilon": 1.0, "mechanism": "laplace"}, "mechanism"),
    ({"epsilon": 1.0, "epsilom": 2.0}, "no option 'epsilom' \\(did you mean 'epsilon'\\?\\)"),
    ({"epsilon": 1.0, "total_rounds": 3}, "no option 'total_rounds'"),  # an engine value
])
def test_dp_fedct_bad_input(fed: fl.Federation, options: dict, match: str) -> None:
    with pytest.raises(FedLabelsError, match=match):
        fl.run("dp-fedct", fed, model="dt", rounds=1, seed=0, options=options)


def test_clip_update_clips_the_update() -> None:
    u = np.full(100, 0.5, dtype=np.float32)  # norm 5
    clipped, norm = clip_update(u, 1.0)
    assert norm == pytest.approx(5.0) and np.linalg.norm(clipped) == pytest.approx(1.0)
    small, _ = clip_update(u * 0.01, 1.0)
    np.testing.assert_array_equal(small, u * 0.01)


def test_dp_fedavg_matches_opacus_and_records_privacy(fed: fl.Federation) -> None:
    from opacus.accountants import PRVAccountant

    res = fl.run("dp-fedavg", fed, model="mlp(hidden=32)", rounds=3, period=10, seed=0,
                 options={"noise_multiplier": 1.0, "clip": 0.5, "sample_rate": 0.6})
    p = res.extra["privacy"]
    prv = PRVAccountant()
    prv.history = [(1.0, 0.6, 3)]
    assert p["epsilon"] == pytest.approx(prv.get_epsilon(1e-5), rel=0.01)
    assert p["rounds_accounted"] == 3 and p["clip_norm"] == 0.5
    assert p["sensitivity"]["value"] == 0.5 and "client" in p["neighbouring"]
    sampled = p["sampled_clients_per_round"]
    assert sampled == [int(r.server["sampled_clients"]) for r in res.rounds]
    # only the sampled clients were contacted in a round
    for rec in res.rounds:
        assert sum(1 for b in rec.bytes_up if b > 0) == int(rec.server["sampled_clients"])
    # so the per-client byte counts name the secret sample: the result says they are outside
    outside = {o["name"]: o["reason"] for o in p["outside_guarantee"]}
    for key in ("rounds[].bytes_up", "rounds[].bytes_down",
                "communication.bytes_up_per_round", "communication.bytes_down_per_round"):
        assert "secret Poisson sample" in outside[key]
    json.dumps(res.to_dict())


def test_dp_fedavg_calibrates_sigma_and_tiny_noise_approaches_fedavg(
        fed: fl.Federation) -> None:
    cal = fl.run("dp-fedavg", fed, model="mlp(hidden=32)", rounds=3, period=10, seed=0,
                 options={"epsilon": 4.0})
    p = cal.extra["privacy"]
    assert p["epsilon"] == pytest.approx(4.0, rel=1e-4) and p["accountant"] == "analytic"
    assert "calibrated" in p["noise_multiplier_source"]
    plain = fl.run("fedavg", fed, model="mlp(hidden=32)", rounds=3, period=10, seed=0)
    quiet = fl.run("dp-fedavg", fed, model="mlp(hidden=32)", rounds=3, period=10, seed=0,
                   options={"noise_multiplier": 1e-9, "clip": 1e3})  # noise std 1e-6
    # no clipping, no noise, equal client sizes: DP-FedAvg is FedAvg
    assert quiet.final["mean_accuracy"] == pytest.approx(plain.final["mean_accuracy"],
                                                         abs=0.02)


@pytest.mark.parametrize("options, match", [
    ({"noise_multiplier": 1.0, "clip": 0.0}, "option clip"),
    ({"noise_multiplier": 1.0, "clip": -2.0}, "option clip"),
    ({"noise_multiplier": 1.0, "clip": float("inf")}, "option clip must be finite"),
    ({"noise_multiplier": 0.0}, "option noise_multiplier"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": 1.0, "delta": 1.5}, "delta"),
    ({"noise_multiplier": 1.0, "sample_rate": 0.0}, "option sample_rate"),
    ({"noise_multiplier": 1.0, "server_lr": 0.0}, "option server_lr"),
    ({"noise_multiplier": 1.0, "accountant": "moments"}, "accountant"),
    ({"epsilon": 4.0, "sample_rate": 0.5, "accountant": "analytic"}, "needs sample_rate 1"),
    ({}, "exactly one of noise_multiplier"),
    ({"noise_multiplier": 1.0, "epsilon": 4.0}, "exactly one of noise_multiplier"),
    ({"noise_multiplier": 1.0, "n_features": 30}, "no option 'n_features'"),  # engine value
])
def test_dp_fedavg_bad_input(fed: fl.Federation, options: dict, match: str) -> None:
    with pytest.raises(FedLabelsError, match=match):
        fl.run("dp-fedavg", fed, model="mlp(hidden=32)", rounds=1, seed=0, options=options)


def test_cli_flags_reach_the_method(tmp_path: Path) -> None:
    out = tmp_path / "dp.json"
    code = main(["--threads", "1", "run", "--method", "dp-fedct", "--rounds", "2",
                 "--epsilon-per-round", "3", "--delta", "1e-6", "--sensitivity", "worst",
                 "--no-progress", "--output", str(out)])
    assert code == 0
    p = json.loads(out.read_text())["privacy"]
    assert p["epsilon_per_round"] == 3.0 and p["sensitivity"]["source"] == "worst"
    assert p["delta"] in (0.0, 1e-6)
    out2 = tmp_path / "dpavg.json"
    code = main(["--threads", "1", "run", "--method", "dp-fedavg", "--model",
                 "mlp(hidden=32)", "--rounds", "2", "--period", "5", "--clip", "2",
                 "--noise-multiplier", "1.5", "--sample-rate", "1", "--no-progress",
                 "--output", str(out2)])
    assert code == 0
    p2 = json.loads(out2.read_text())["privacy"]
    assert p2["noise_multiplier"] == 1.5 and p2["clip_norm"] == 2.0
    assert main(["run", "--method", "dp-fedavg", "--model", "mlp(hidden=32)", "--clip", "0",
                 "--noise-multiplier", "1", "--no-progress",
                 "--output", str(tmp_path / "bad.json")]) == 2
