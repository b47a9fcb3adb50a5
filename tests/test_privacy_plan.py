"""``fl.privacy_plan`` and ``fedlabels run --dry-run``: the statement a run will make, before
it runs; checked against a real run's ``privacy`` (an independent oracle: the ledger of the
releases the run made), and that nothing is trained or written."""

import math
import os

import pytest

import fedlabels as fl
from fedlabels.cli import main

SMALL = {"clients": 3, "rounds": 2, "seed": 0}
CASES = [
    ("dp-fedct", {"epsilon": 4.0, "mechanism": "xor"}, None),
    ("dp-fedct", {"epsilon_per_round": 1.0, "mechanism": "kary"}, None),
    ("dp-fedct", {"epsilon": 4.0, "mechanism": "dpsgd"}, "mlp(hidden=8)"),
    ("dp-fedavg", {"epsilon": 4.0}, "mlp(hidden=8)"),
    ("dp-pate", {"epsilon": 4.0}, None),
]
#: what a run states of its noise, where it states it
NOISE = ("epsilon_per_round", "flip_probability", "noise_multiplier", "calibrated_by")


@pytest.mark.parametrize("method,options,model", CASES,
                         ids=["dp-fedct-xor", "dp-fedct-kary-per-round", "dp-fedct-dpsgd",
                              "dp-fedavg", "dp-pate"])
def test_the_plan_states_what_the_run_records(method, options, model):
    kw = {**SMALL, "options": options, "model": model}
    if method == "dp-pate":
        kw["clients"] = 5
    plan = fl.privacy_plan(method, "breast_cancer", **kw)["privacy"]
    ran = fl.run(method, "breast_cancer", progress=False, **kw).extra["privacy"]
    assert math.isclose(plan["epsilon"], ran["epsilon"], rel_tol=1e-9)
    assert plan["delta"] == ran["delta"]
    for key in ("guarantee", "guarantee_against", "neighbouring", *NOISE):
        assert plan.get(key) == ran.get(key), key
    assert plan["planned"]  # says over what the ε is


def test_a_method_without_dp_states_none():
    plan = fl.privacy_plan("fedct", "breast_cancer", **SMALL)
    assert plan["privacy"]["guarantee"] == "none"
    assert (plan["clients"], plan["rounds"]) == (3, 2) and plan["n_public"] > 0


def test_dry_run_trains_nothing_and_writes_nothing(tmp_path, monkeypatch, capsys):
    def no_training(*args, **kwargs):
        raise AssertionError("a dry run trained")

    monkeypatch.setattr("fedlabels.engines.inprocess.run_rounds", no_training)
    monkeypatch.setattr("fedlabels.runs.loop.run_rounds", no_training)
    monkeypatch.chdir(tmp_path)
    args = ["run", "--method", "dp-fedavg", "--dataset", "breast_cancer", "--clients", "3",
            "--rounds", "2", "--epsilon", "4", "--model", "mlp(hidden=8)", "--dry-run"]
    assert main(args) == 0
    out = capsys.readouterr().out
    expected = fl.privacy_plan("dp-fedavg", "breast_cancer", model="mlp(hidden=8)",
                               options={"epsilon": 4.0}, clients=3, rounds=2)["privacy"]
    assert f"ε = {expected['epsilon']:.4g}" in out
    assert f"{expected['noise_multiplier']:.6g}" in out and "calibrated by analytic" in out
    assert "3 clients, 2 round(s)" in out
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("flag", [["--output", "r.json"], ["--report"], ["--overwrite"],
                                  ["--no-checkpoint"]])
def test_dry_run_refuses_what_would_write(tmp_path, monkeypatch, capsys, flag):
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--dry-run", *flag])
    err = capsys.readouterr().err
    assert code == 2 and f"--dry-run writes nothing; remove {flag[0]}" in err
    assert os.listdir(tmp_path) == []


def test_a_noise_calibrated_in_round_1_is_not_planned_as_epsilon_0(capsys):
    """DP-FedCT with the clients' own s* estimates calibrates its noise in round 1, so its
    ledger holds no plan before it: the dry run said 'ε = 0, δ = 0', a promise of no
    privacy loss at all. It says ε is not known before the run, and the target it keeps."""
    options = {"epsilon": 8.0, "sensitivity": "empirical"}
    plan = fl.privacy_plan("dp-fedct", "breast_cancer", options=options, **SMALL)["privacy"]
    assert plan["epsilon"] is None and "target ε = 8" in plan["not_planned"]
    assert main(["run", "--method", "dp-fedct", "--dataset", "breast_cancer", "--clients",
                 "3", "--rounds", "2", "--epsilon", "8", "--sensitivity", "empirical",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ε = 0" not in out and "ε: not known before the run" in out
