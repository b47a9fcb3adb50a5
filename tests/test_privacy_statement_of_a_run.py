"""A result's privacy statement is one statement, about what this run sent: the recorded
threat model states the run's guarantee (not the method's most general one), the
assumptions agree with the adversary the clients hold against, and ``outside_guarantee``
names the unprotected values the clients actually sent, a resumed run's earlier ones too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedlabels.api import load_federation
from fedlabels.data import Federation
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import METHODS
from fedlabels.results import RoundRecord, RunResult

#: the sensitivity estimate's reply: noiseless, sent only with sensitivity=empirical
SENSITIVITY_REPLY = {"dpfedct.sensitivity.reply:bits",
                     "dpfedct.sensitivity.reply:max_changed_labels",
                     "dpfedct.sensitivity.reply:mean_changed_labels"}
EMPIRICAL = {"epsilon_per_round": 2.0, "mechanism": "kary", "sensitivity": "empirical",
             "sensitivity_neighbours": 3}


@pytest.fixture(scope="module")
def fed() -> Federation:
    return load_federation("breast_cancer", clients=3, seed=0)


def dp_fedct(fed: Federation, options: dict[str, Any], rounds: int = 3, **kw: Any) -> RunResult:
    return simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=rounds, period=1, seed=0,
                    progress=False, options=options, **kw)


def outside(result: RunResult) -> set[str]:
    return {o["name"] for o in result.extra["privacy"]["outside_guarantee"]}


def test_worst_case_xor_states_one_guarantee_about_what_it_sent(fed: Federation) -> None:
    result = dp_fedct(fed, {"epsilon": 8.0, "mechanism": "xor", "sensitivity": "worst"})
    privacy, threat = result.extra["privacy"], result.extra["threat_model"]
    assert privacy["guarantee"] == threat["guarantee"] == "formal"
    assert privacy["neighbouring"] == threat["neighbouring"]
    assert threat["neighbouring"].startswith("client-level")
    assert threat["against"] == privacy["guarantee_against"]
    # the adversary is a deviating server; no assumption says it is honest-but-curious
    assert "deviate" in threat["adversary"]
    said = " ".join([*privacy["assumptions"], *threat["assumptions"],
                     privacy["threat_model"]])
    assert "semi-honest" not in said and "deviat" in said
    assert privacy["target"]["enforced"].startswith("each client")
    # sent: the noisy one-hot rows and the evaluation accuracy; nothing of the other
    # mechanisms, the sensitivity estimate or a regression run
    sent = {f"{p['message']}:{p['key']}" for p in threat["payloads"] if p["sent"]}
    assert sent == {"dpfedct.bits:bits", "evaluate.reply:accuracy"}
    assert "evaluate.reply:accuracy" in outside(result)
    assert not outside(result) & (SENSITIVITY_REPLY | {"dpfedct.sa_labels:dd_rdp",
                                                       "evaluate.reply:rmse",
                                                       "evaluate.reply:r2",
                                                       "privacy.sensitivity.details"})


def test_the_noiseless_sensitivity_estimate_is_named_where_it_was_sent(fed: Federation) -> None:
    result = dp_fedct(fed, EMPIRICAL)
    # the reply, and the per-client estimates the result keeps from it
    assert outside(result) >= SENSITIVITY_REPLY | {"privacy.sensitivity.details"}
    assert result.extra["privacy"]["sensitivity"]["details"]


def test_a_resumed_run_still_names_what_it_sent_before(fed: Federation,
                                                       tmp_path: Path) -> None:
    """The estimate is sent once, before round 1: a run resumed after round 1 sends it no
    more, and its statement must still name it (the checkpoint keeps what was sent)."""
    path = tmp_path / "run.checkpoint.npz"

    def stop(record: RoundRecord) -> None:
        if record.round == 1:
            raise KeyboardInterrupt

    dp_fedct(fed, EMPIRICAL, checkpoint=path, on_round=stop)
    resumed = dp_fedct(fed, EMPIRICAL, resume=path)
    assert resumed.extra["provenance"]["resumed"][0]["from_round"] == 1
    assert outside(resumed) >= SENSITIVITY_REPLY


#: round metrics a DP-FedAvg server publishes as post-processing of its release
DP_FEDAVG_POST_PROCESSING: set[str] = set()
#: one small run of each DP-FedAvg mode: what it publishes differs
DP_FEDAVG_MODES = {
    "plain": {"epsilon": 8.0},
    "plain-discrete-sampled": {"epsilon": 8.0, "noise": "discrete", "sample_rate": 0.7},
    "secure": {"epsilon": 8.0, "noise": "discrete", "aggregation": "secure"},
    "record": {"epsilon": 8.0, "level": "record"},
}
BYTE_COUNTS = {"rounds[].bytes_up", "rounds[].bytes_down", "communication.bytes_up_per_round",
               "communication.bytes_down_per_round"}


def published(data: dict[str, Any], name: str) -> bool:
    """Whether the result ``data`` (``RunResult.to_dict()``) holds the value ``name``
    (``rounds[].server.key``, ``rounds[].key`` or a dotted path such as
    ``privacy.attempts_per_round``) or, for ``message:key``, its clients sent it."""
    if ":" in name:
        return any(f"{p['message']}:{p['key']}" == name and p["sent"]
                   for p in data["threat_model"]["payloads"])
    if name.startswith("rounds[]."):
        *inner, key = name.removeprefix("rounds[].").split(".")
        rounds = [r[inner[0]] if inner else r for r in data["rounds"]]
        return any(key in r for r in rounds)
    node: Any = data
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("mode", sorted(DP_FEDAVG_MODES))
def test_each_dp_fedavg_mode_names_exactly_what_it_publishes(fed: Federation,
                                                             mode: str) -> None:
    """Read from a real run of each mode: every value ``outside_guarantee`` names is one the
    result publishes or a client sent (plain mode's mean_update_norm is not in a secure or
    record run), every round metric and uncovered payload sent is named, and the byte
    counts are named exactly where they show a secret Poisson sample."""
    options = DP_FEDAVG_MODES[mode]
    data = simulate(METHODS["dp-fedavg"], fed, as_models("mlp(hidden=8)"), rounds=2, period=1,
                    seed=0, progress=False, options=options).to_dict()
    names = {o["name"] for o in data["privacy"]["outside_guarantee"]}
    assert len(names) == len(data["privacy"]["outside_guarantee"])  # one entry a value
    assert {n for n in names if not published(data, n)} == set()
    metrics = {k for r in data["rounds"] for k in r["server"]} - DP_FEDAVG_POST_PROCESSING
    assert {f"rounds[].server.{k}" for k in metrics} <= names
    uncovered = {f"{p['message']}:{p['key']}" for p in data["threat_model"]["payloads"]
                 if p["sent"] and not p["covered_by_guarantee"]}
    assert uncovered <= names
    secret_sample = options.get("sample_rate", 1.0) < 1 and "level" not in options
    assert (names >= BYTE_COUNTS) == secret_sample
    assert not (BYTE_COUNTS & names) or secret_sample


@pytest.mark.parametrize(("options", "models_outside"), [
    ({"epsilon": 8.0, "mechanism": "xor", "sensitivity": "worst"}, True),
    ({"epsilon": 8.0, "mechanism": "kary", "sensitivity": "worst"}, True),
    ({"epsilon": 8.0, "mechanism": "dpsgd", "site_model": "private"}, True),
    ({"epsilon": 8.0, "mechanism": "dpsgd", "site_model": "dp"}, False),
])
def test_the_clients_final_models_are_named_where_the_mechanism_did_not_train_them(
        fed: Federation, options: dict[str, Any], models_outside: bool) -> None:
    """A DP-FedCT result said the clients' final models (the models file's, result.predict's)
    nowhere, though but for dpsgd's site_model=dp they are trained on private records
    without the mechanism."""
    model = "mlp(hidden=8)" if options["mechanism"] == "dpsgd" else "dt"
    result = simulate(METHODS["dp-fedct"], fed, as_models(model), rounds=2, period=1, seed=0,
                      progress=False, options=options)
    assert ("client_models" in outside(result)) is models_outside
