"""Every result states its guarantee (issue 12, defects 5, 7 and 8).

* ``privacy.guarantee`` is ``formal``, ``conditional`` (with ``conditional_on``) or ``none``
  in the result of every registered method, with the party and the neighbouring relation;
* DP-FedCT's guarantee follows its sensitivity: ``worst`` is formal and protects a client's
  whole dataset, ``empirical`` / ``prop2`` / a number make it conditional on that s*;
* every value sent to or published by the server outside the mechanism is named in
  ``privacy.outside_guarantee``;
* the empirical sensitivity measures remove and replace neighbours, with a floor of 2 bits;
* ``fedlabels run`` prints (ε, δ, guarantee) at the end of a DP run.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from sklearn.dummy import DummyClassifier

from fedlabels.api import load_federation
from fedlabels.cli import main
from fedlabels.data import Federation
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.method.threat import GUARANTEES
from fedlabels.methods import METHODS
from fedlabels.methods.fedct.dp_fedct import DPFedCTOptions
from fedlabels.methods.fedct.sensitivity import FLOOR_BITS, empirical_sensitivity
from fedlabels.privacy.dpsgd_accounting import RECORD_ADD_REMOVE
from fedlabels.privacy.events import (
    CLIENT_LEVEL,
    DISJOINT_TEACHERS,
    RECORD_LEVEL,
    WHOLE_DATASET,
)

ROUNDS, PERIOD, SEED = 2, 3, 1
SMALL_XCLP = {"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3, "secure": "none"}
#: the options each method needs for a small run; the others run with none
OPTIONS: dict[str, dict[str, Any]] = {
    "dp-fedct": {"epsilon": 4.0, "mechanism": "xor"},
    "dp-fedavg": {"epsilon": 8.0},
    "dp-pate": {"epsilon": 4.0},
    "fredy": {"epsilon": 20.0, "queries": 40, "teacher_rounds": 2},
    "xclp": {**SMALL_XCLP, "test_points": 20},
    "fedavg-xclp": {**SMALL_XCLP, "warmup_rounds": 1},
}
#: round metrics a DP server may publish as post-processing of what the mechanism released
#: (or from the true labels of U, a simulation diagnostic no party holds in a deployment)
POST_PROCESSING = {"consensus_changed", "consensus_coverage", "consensus_accuracy",
                   "answered_fraction", "label_accuracy"}


@pytest.fixture(scope="module")
def fed() -> Federation:
    return load_federation("breast_cancer", clients=3, seed=SEED)


def small_run(fed: Federation, method: str, options: dict[str, Any]) -> dict[str, Any]:
    impl = METHODS[method]
    soft = method in ("dd", "fedmd", "ds-fl")
    model = "mlp(hidden=8)" if impl.capabilities.requires_weights or soft else "dt"
    result = simulate(impl, fed, as_models(model), rounds=ROUNDS, period=PERIOD, seed=SEED,
                      progress=False, options=options)
    return result.to_dict()


@pytest.fixture(scope="module")
def results(fed: Federation) -> dict[str, dict[str, Any]]:
    return {name: small_run(fed, name, OPTIONS.get(name, {})) for name in sorted(METHODS)}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_result_states_its_guarantee(results: dict[str, Any], method: str) -> None:
    check_guarantee(results[method], method)


@pytest.mark.parametrize("site_model", ["dp", "private"])
def test_dp_fedct_dpsgd_states_its_guarantee(fed: Federation, site_model: str) -> None:
    data = simulate(METHODS["dp-fedct"], fed, as_models("mlp(hidden=8)"), rounds=ROUNDS,
                    period=PERIOD, seed=SEED, progress=False,
                    options={"mechanism": "dpsgd", "epsilon": 4.0,
                             "site_model": site_model}).to_dict()
    check_guarantee(data, "dp-fedct")
    privacy = data["privacy"]
    assert privacy["guarantee"] == "formal" and privacy["neighbouring"] == RECORD_ADD_REMOVE
    assert privacy["site_model"].startswith(f"{site_model}:")


def check_guarantee(data: dict[str, Any], method: str) -> None:
    """The result names its guarantee, and everything it does not cover."""
    privacy, declared = data["privacy"], METHODS[method].threat_model
    assert privacy["guarantee"] in GUARANTEES
    assert {"guarantee_against", "neighbouring"} <= set(privacy)
    assert data["threat_model"]["view"] == declared.view
    if privacy["guarantee"] == "none":
        assert privacy["reason"]
        return
    assert privacy["guarantee_against"] and privacy["neighbouring"]
    assert (privacy["guarantee"] == "conditional") == ("conditional_on" in privacy)
    # every payload the clients sent that the guarantee does not cover is named, with a
    # reason; one they never sent is not
    outside = {o["name"]: o["reason"] for o in privacy["outside_guarantee"]}
    assert all(outside.values())
    recorded = data["threat_model"]["payloads"]
    assert len(recorded) == len(declared.payloads) and any(p["sent"] for p in recorded)
    for p, r in zip(declared.payloads, recorded, strict=True):
        assert (f"{p.message}:{p.key}" in outside) == (not p.covered and r["sent"])
    # the recorded threat model states the run's guarantee, not the declaration's
    assert data["threat_model"]["guarantee"] == privacy["guarantee"]
    assert data["threat_model"]["neighbouring"] == privacy["neighbouring"]
    # every round metric the server publishes is post-processing or named as outside
    for record in data["rounds"]:
        for key in record["server"]:
            assert key in POST_PROCESSING or f"rounds[].server.{key}" in outside, key


def test_non_dp_methods_say_none(results: dict[str, Any]) -> None:
    for name in ("fedct", "fedavg", "local", "pate", "dd", "xclp"):
        p = results[name]["privacy"]
        assert p["guarantee"] == "none"
        assert p["reason"] == "no differential-privacy mechanism"
        # no (ε, δ) beside "none": a δ of 0 would read as a pure guarantee
        assert p.get("epsilon") is None and p.get("delta") is None, name


def test_dp_methods_name_party_relation_and_what_is_outside(results: dict[str, Any]) -> None:
    pate, fredy, avg = (results[m]["privacy"] for m in ("dp-pate", "fredy", "dp-fedavg"))
    names = {m: {o["name"] for o in results[m]["privacy"]["outside_guarantee"]}
             for m in ("dp-pate", "fredy", "dp-fedavg")}
    assert pate["guarantee"] == "formal" and pate["neighbouring"] == DISJOINT_TEACHERS
    assert {"rounds[].server.labels_equal_plain_argmax",
            "rounds[].server.teacher_mean_accuracy", "pate.votes:labels",
            "privacy.epsilon_data_dependent"} <= names["dp-pate"]
    assert fredy["guarantee"] == "formal" and fredy["neighbouring"] == RECORD_LEVEL
    assert {"fredy.weights:weights", "fredy.weights:n"} <= names["fredy"]
    assert avg["guarantee"] == "formal" and avg["neighbouring"] == CLIENT_LEVEL
    assert "not the server" in avg["guarantee_against"]
    assert {"dpfedavg.update:norm", "rounds[].server.mean_update_norm",
            "rounds[].server.clipped_fraction", "evaluate.reply:accuracy"} <= names["dp-fedavg"]
    for name in names.values():  # the raw-data statistics the result keeps
        assert {"federation.client_sizes", "federation.client_class_counts"} <= name


def test_dp_results_list_the_private_shift_measures_as_outside(
        results: dict[str, Any]) -> None:
    """federation.unlabeled_shift holds feature_smd (pooled private feature means and
    spreads against U's) and label_tv (pooled private labels): statistics of the clients'
    raw data that a DP result kept without listing them as outside its guarantee."""
    for method in ("dp-pate", "fredy", "dp-fedavg", "dp-fedct"):
        record = results[method]
        assert "unlabeled_shift" in record["federation"]
        names = {o["name"] for o in record["privacy"]["outside_guarantee"]}
        assert "federation.unlabeled_shift" in names, method


def test_dp_fedct_worst_case_is_formal_and_protects_the_whole_dataset(
        results: dict[str, Any]) -> None:
    p = results["dp-fedct"]["privacy"]
    assert p["sensitivity"]["source"] == "worst"
    assert p["guarantee"] == "formal" and "conditional_on" not in p
    assert "whole private dataset" in p["neighbouring"]
    assert p["neighbouring"].startswith("client-level under replacement")


@pytest.mark.parametrize(("options", "words"), [
    ({"sensitivity": "empirical", "sensitivity_neighbours": 4}, "empirical estimate"),
    ({"sensitivity": "prop2", "stability_rate": 0.01}, "heuristic"),
    ({"sensitivity": 40, "sensitivity_note": "from a pilot run"}, "given by the user"),
])
def test_dp_fedct_with_an_assumed_sensitivity_is_conditional(
        fed: Federation, options: dict[str, Any], words: str) -> None:
    p = small_run(fed, "dp-fedct", {"epsilon": 4.0, "mechanism": "xor", **options})["privacy"]
    assert p["guarantee"] == "conditional" and p["neighbouring"] == RECORD_LEVEL
    bits = p["sensitivity"]["bits"]
    assert p["conditional_on"].startswith(f"s* = {bits} bits") and words in p["conditional_on"]
    assert "bound" not in p["conditional_on"].replace("not a bound", "")


def test_prop2_is_called_a_heuristic() -> None:
    helps = {i.name: i.help for i in DPFedCTOptions.declared()}
    assert "heuristic" in helps["stability_rate"] and "heuristic" in helps["sensitivity"]
    assert "bound" not in helps["stability_rate"] + helps["sensitivity_delta"]


def test_empirical_sensitivity_measures_replace_neighbours_and_has_a_floor() -> None:
    """A majority-class learner: removing a record never changes a label (3 vs 2 stays a
    majority or ties to class 0), replacing a 0 label by 1 flips the majority, so every
    label on U changes. Remove-only neighbours miss it; the floor keeps s* >= 2 bits."""
    X, y = np.zeros((5, 1)), np.array([0, 0, 0, 1, 1])
    U = np.zeros((7, 1))
    model = DummyClassifier(strategy="most_frequent")
    removed = empirical_sensitivity(model, X, y, U, 2, n_neighbours=5, relation="remove")
    assert removed.details["max_changed_labels"] == 0 and removed.bits == FLOOR_BITS == 2
    both = empirical_sensitivity(model, X, y, U, 2, n_neighbours=5)
    assert both.details["relation"] == "both" and both.details["retrainings"] == 10
    assert max(both.details["changed_labels_replace"]) == len(U)
    assert both.bits == 2 * len(U)


def test_empirical_defaults_use_more_neighbours_of_both_kinds() -> None:
    opts = DPFedCTOptions.from_mapping({"epsilon": 1.0, "sensitivity": "empirical"},
                                       "dp-fedct")
    assert opts.sensitivity_relation == "both" and opts.sensitivity_neighbours >= 50


def test_cli_prints_the_privacy_line_of_a_dp_run(tmp_path: Any, capsys: Any) -> None:
    out = tmp_path / "r.json"
    assert main(["run", "--dataset", "breast_cancer", "--clients", "3", "--rounds", "2",
                 "--no-progress", "--method", "dp-fedct", "--mechanism", "xor", "--model",
                 "dt", "--epsilon", "4",
                 "--output", str(out)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("privacy:")]
    assert len(lines) == 1 and "ε = " in lines[0] and "δ = 1e-05" in lines[0]
    assert "formal" in lines[0] and "client-level under replacement" in lines[0]
    assert "against the server, also one that deviates from the protocol" in lines[0]
    assert ": each client" not in lines[0]  # the party, not how the clients hold against it
    assert main(["run", "--dataset", "breast_cancer", "--clients", "3", "--rounds", "3",
                 "--no-progress", "--method", "dp-fedct", "--mechanism", "xor", "--model",
                 "dt", "--epsilon-per-round", "1", "--output", str(tmp_path / "p.json")]) == 0
    data = json.loads((tmp_path / "p.json").read_text())["privacy"]
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("privacy:"))
    eps = data["epsilon"]
    assert eps < 1.0 and data["epsilon_by_accountant"]["basic"] == pytest.approx(3.0)
    # a round's ε is pure (δ = 0): read without it, one round (up to ε = 11 at a total of
    # 1, worst-case s*) seemed to spend more than the whole run
    assert (f"3 round(s) of pure ε = 1 each (at δ = 0; less at this δ) compose to "
            f"{eps:.4g} at this δ") in line
    assert "their sum is 3" in line
    assert main(["run", "--dataset", "breast_cancer", "--clients", "3", "--rounds", "2",
                 "--no-progress", "--method", "fedct", "--model", "dt",
                 "--output", str(tmp_path / "f.json")]) == 0
    assert "privacy:" not in capsys.readouterr().out


def test_the_privacy_line_keeps_the_party_a_guarantee_does_not_hold_against() -> None:
    """Central DP-FedAvg's guarantee excludes the server; the line cut the sentence at its
    first ';' and read 'against anyone observing the global models', which the server is."""
    from fedlabels.results import privacy_line

    line = privacy_line({"guarantee": "formal", "epsilon": 4.0, "delta": 1e-5,
                         "neighbouring": "client-level: one client added or removed",
                         "guarantee_against": "anyone observing the global models (other "
                                              "clients, users of the final model); not the "
                                              "server"})
    assert line is not None
    assert line.endswith("(formal, client-level (one client added or removed), against "
                         "anyone observing the global models; not the server)")


@pytest.mark.parametrize(("neighbouring", "relation"), [
    (RECORD_ADD_REMOVE, "record-level (one record added or removed)"),
    (RECORD_LEVEL, "record-level (one record removed or replaced)"),
    (DISJOINT_TEACHERS, "record-level (one record replaced)"),
    (CLIENT_LEVEL, "client-level (one client added or removed)"),
    (WHOLE_DATASET, "client-level under replacement")])
def test_the_privacy_line_names_the_change_its_epsilon_holds_for(neighbouring: str,
                                                                  relation: str) -> None:
    """The line said `record-level` alone, for DP-SGD's add-or-remove ε and for PATE's
    replace-one ε alike, though replacing a record costs up to twice the ε of adding or
    removing one: a reader could not tell which the ε was."""
    from fedlabels.results import privacy_line

    line = privacy_line({"guarantee": "formal", "epsilon": 1.0, "delta": 1e-5,
                         "neighbouring": neighbouring, "guarantee_against": "the server"})
    assert line == f"privacy: ε = 1, δ = 1e-05 (formal, {relation}, against the server)"


def test_a_conditional_privacy_line_names_its_relation_and_party() -> None:
    """A conditional guarantee (an estimated s*) printed only `conditional on s* = ...`:
    neither what one individual is nor whom the ε holds against."""
    from fedlabels.results import privacy_line

    line = privacy_line({"guarantee": "conditional", "epsilon": 3.0, "delta": 1e-5,
                         "conditional_on": "s* = 12 bits, empirical estimate, not a bound",
                         "neighbouring": RECORD_LEVEL,
                         "guarantee_against": "the server: each client enforces it"})
    assert line == ("privacy: ε = 3, δ = 1e-05 (conditional on s* = 12 bits, empirical "
                    "estimate, not a bound; record-level (one record removed or replaced), "
                    "against the server)")
