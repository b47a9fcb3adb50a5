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
