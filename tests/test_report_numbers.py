"""The numbers a person reads in ``fedlabels report``'s summary, checked against independent
oracles (numpy, scipy.stats, a hand count): which runs are averaged, over what, and which
caveat and privacy figure each row shows. Each test kills a hand-made mutation of the
reporting code that the other tests let through (notes: session65_mutate_reporting)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedlabels.reporting.report import group_runs, summary_rows
from fedlabels.results import RoundRecord, RunResult
from test_report import _result


def _clients(method: str, seed: int, per_round: list[list[float]]) -> RunResult:
    """A run whose clients score differently each round (``per_round[i]``: round i+1)."""
    res = _result(method, seed, [0.0] * len(per_round), clients=len(per_round[0]))
    res.rounds = [RoundRecord(round=i + 1, local_steps=None, accuracies=list(accs), server={},
                              bytes_up=[100] * len(accs), bytes_down=[50] * len(accs),
                              seconds=0.1) for i, accs in enumerate(per_round)]
    return res


def test_the_curve_is_the_mean_over_seeds_of_the_mean_over_clients():
    seeds = [[[0.1, 0.2, 0.9], [0.5, 0.5, 1.0]], [[0.3, 0.35, 0.4], [0.2, 0.9, 0.95]]]
    rounds, mean, _ = group_runs([_clients("fedct", s, a) for s, a in enumerate(seeds)])[0] \
        .curve()
    assert rounds.tolist() == [1, 2]
    expected = np.mean([[np.mean(r) for r in run] for run in seeds], axis=0)
    assert mean == pytest.approx(expected)


def test_the_audit_interval_of_one_seed_is_its_own_and_of_several_the_t_interval():
    """A row of several seeds gives the t-interval of their VULs, not one seed's bootstrap
    interval nor the hull of theirs."""
    vuls, cis = [0.55, 0.6, 0.7], [[0.5, 0.6], [0.52, 0.66], [0.6, 0.8]]
    runs = [_result("fedct", s, [0.8], privacy={"vul": v, "vul_ci": ci})
            for s, (v, ci) in enumerate(zip(vuls, cis, strict=True))]
    row = summary_rows(group_runs(runs))[0]
    lo, hi = stats.t.interval(0.95, len(vuls) - 1, loc=np.mean(vuls), scale=stats.sem(vuls))
    assert (row["vul_low"], row["vul_high"]) == (pytest.approx(lo), pytest.approx(hi))
    one = summary_rows(group_runs(runs[2:]))[0]
    assert (one["vul_low"], one["vul_high"]) == (0.6, 0.8)


def test_a_row_shows_the_largest_delta_of_its_seeds_and_every_guarantee_they_state():
    """The weakest δ is the one the row can claim; two guarantees of one row are both
    named, and a δ is shown where any of its runs states a guarantee."""
    formal = {"guarantee": "formal", "epsilon": 1.0, "neighbouring": "record-level",
              "guarantee_against": "the server"}
    runs = [_result("dp-fedct", 0, [0.7], privacy={**formal, "delta": 1e-6}),
            _result("dp-fedct", 1, [0.7], privacy={**formal, "delta": 1e-5}),
            _result("dp-fedct", 2, [0.7], privacy={"guarantee": "none", "delta": 1e-7})]
    row = summary_rows(group_runs(runs))[0]
    assert row["delta"] == max(1e-6, 1e-5, 1e-7)
    assert row["guarantee"].split(" / ") == [
        "formal, record-level, against the server", "none"]


def test_the_majority_baseline_is_the_commonest_training_class_with_its_wald_half_width():
    from fedlabels.results.caveats import majority_baseline

    res = _result("fedct", 0, [0.8])
    res.federation.update(client_class_counts=[[30, 70], [20, 80]], n_test=50)
    base = majority_baseline(res)
    assert base is not None and base["class"] == 1
    assert base["accuracy"] == 150 / 200  # the hand count: class 1 is 150 of 200 rows
    assert base["half_width_95"] == pytest.approx(
        stats.norm.ppf(0.975) * np.sqrt(0.75 * 0.25 / 50), rel=1e-3)  # over 50 test rows


@pytest.mark.parametrize(("accuracy", "said"), [
    (0.905, "within noise of"), (0.895, "within noise of"), (0.85, "below"), (0.95, None)])
def test_the_chance_caveat_holds_within_the_baseline_s_interval(accuracy, said):
    from fedlabels.results.caveats import chance_warning

    line = chance_warning(accuracy, {"accuracy": 0.9, "half_width_95": 0.02, "name": "a"})
    assert (line is None) if said is None else f" is {said} the majority-class" in line


@pytest.mark.parametrize(("delta", "warned"), [(0.01, True), (0.0099, False)])
def test_the_delta_caveat_counts_the_smallest_client_s_records(delta, warned):
    """δ = 1/n is not below 1/n; n is the smallest client's records, not the largest's."""
    from fedlabels.results.caveats import delta_warning

    privacy = {"guarantee": "formal", "delta": delta, "neighbouring": "record-level: x"}
    line = delta_warning(privacy, {"client_sizes": [300, 100, 200]})
    assert (line is not None) == warned
    if line:
        assert "1/n = 1/100" in line


def test_below_the_reference_it_says_worse_only_beyond_the_interval_of_the_gap():
    from fedlabels.results.caveats import below_reference

    paired = [-0.10, -0.12, -0.11]
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(paired), scale=stats.sem(paired))
    line = below_reference(0.7, 0.81, "local", differences=paired)
    assert line is not None and "made the clients worse" in line
    assert f"[{lo:+.3f}, {hi:+.3f}]" in line
    noisy = [-0.3, 0.25]
    assert "within noise" in (below_reference(0.7, 0.72, "local", differences=noisy) or "")
    # unpaired, binomial: both accuracies' variances over 100 test rows
    half = stats.norm.ppf(0.975) * np.sqrt((0.7 * 0.3 + 0.8 * 0.2) / 100)
    line = below_reference(0.7, 0.8, "local", n_test=100)
    assert line is not None and f"[{-0.1 - half:+.3f}, {-0.1 + half:+.3f}]" in line
    assert "within noise" in line  # -0.1 + 0.119 > 0


def _row(name: str, value: float, std: float | None = None, *, dataset: str = "toy",
         guarantee: str | None = "none", key: str = "accuracy") -> dict:
    return {"configuration": name, "dataset": dataset, "n_seeds": 2, "guarantee": guarantee,
            "epsilon_mean": None, f"{key}_mean": value, f"{key}_std": std}


def test_the_lead_ranks_by_the_metric_lowest_rmse_first_and_only_within_one_dataset():
    from fedlabels.reporting.report_lead import lead_sentence

    rows = [_row("b", 0.8), _row("a", 0.9), _row("c", 0.7)]
    assert lead_sentence(rows, "accuracy", False).startswith("Best accuracy: <b>a</b>")
    rmse = [_row("b", 2.0, key="rmse"), _row("a", 1.0, key="rmse"), _row("c", 3.0, key="rmse")]
    lead = lead_sentence(rmse, "accuracy", True)
    assert lead.startswith("Best RMSE (lower is better): <b>a</b>") and "next: <b>b</b>" in lead
    assert lead_sentence([_row("a", 0.9), _row("b", 0.8, dataset="other")],
                         "accuracy", False) == ""


def test_the_lead_names_the_best_run_with_a_guarantee_when_the_two_best_have_none():
    from fedlabels.reporting.report_lead import lead_sentence

    rows = [_row("a", 0.9), _row("b", 0.8), _row("dp", 0.7, guarantee="formal"),
            _row("dp2", 0.6, guarantee="formal")]
    assert "Best with a privacy guarantee: <b>dp</b>" in lead_sentence(rows, "accuracy", False)
    rows[1]["guarantee"] = "formal"  # the second best has one: already named
    assert "Best with a privacy guarantee" not in lead_sentence(rows, "accuracy", False)
    no = [_row("a", 0.9), _row("b", 0.8), _row("c", 0.7, guarantee="none")]
    assert "Best with a privacy guarantee" not in lead_sentence(no, "accuracy", False)


def test_no_clear_winner_is_said_up_to_a_gap_equal_to_the_two_spreads():
    """The boundary of 'within their spreads over seeds' (gap <= std₁ + std₂) had no test
    near it: a gap equal to the spreads (exact in binary: 0.25 = 0.125 + 0.125) is no clear
    winner, a gap a hair above them is one; no spread at all says nothing."""
    from fedlabels.reporting.report_lead import lead_sentence

    def lead(std_b: float | None) -> str:
        return lead_sentence([_row("a", 0.75, 0.125), _row("b", 0.5, std_b)], "accuracy",
                             False)

    assert "no clear winner" in lead(0.125)
    assert "no clear winner" not in lead(0.124)
    assert "no clear winner" not in lead_sentence([_row("a", 0.75), _row("b", 0.5)],
                                                  "accuracy", False)


def test_balanced_accuracy_is_above_chance_only_beyond_its_wald_half_width():
    from fedlabels.results.caveats import balanced_above_chance

    cms = [[[40, 10], [15, 35]], [[45, 5], [20, 30]]]  # recalls (0.8, 0.7) and (0.9, 0.6)
    recalls, support = np.array([0.85, 0.65]), 50
    half = stats.norm.ppf(0.975) * np.sqrt(np.sum(recalls * (1 - recalls) / support)) / 2
    got = balanced_above_chance({"metrics": {"balanced_accuracy": {"mean": 0.7}},
                                 "confusion_matrices": cms})
    assert got is not None
    assert got[1] == pytest.approx(half, rel=1e-3) and got[2] == 0.5
    assert 0.5 < 0.55 < 0.5 + half  # above chance, but within the interval
    assert balanced_above_chance({"metrics": {"balanced_accuracy": {"mean": 0.55}},
                                  "confusion_matrices": cms}) is None


def test_chance_is_one_over_the_classes_the_test_set_has():
    from fedlabels.results.caveats import constant_balanced_accuracy

    res = _result("fedct", 0, [0.8])
    res.extra["clinical"] = {"confusion_matrices": [[[5, 1, 0, 0], [1, 5, 0, 0],
                                                     [0, 0, 3, 0], [0, 0, 0, 0]]]}
    assert constant_balanced_accuracy(res) == 1 / 3  # the fourth class has no test row


@pytest.mark.parametrize(("counts", "imbalanced"), [([[55, 45]], False), ([[90, 10]], True)])
def test_classes_are_imbalanced_only_beyond_the_baseline_s_interval(counts, imbalanced):
    """0.55 ± 0.098 over 100 test rows is not clearly above 1/2; 0.90 ± 0.059 is."""
    from fedlabels.results.caveats import classes_imbalanced

    res = _result("fedct", 0, [0.8])
    res.federation.update(client_class_counts=counts, n_test=100)
    assert classes_imbalanced(res) is imbalanced


def test_the_rounds_status_says_interrupted_and_extended_by_the_rounds_recorded():
    from fedlabels.results.caveats import rounds_status

    short = _result("fedct", 0, [0.7] * 4, rounds_config=5)
    assert rounds_status(short) == "interrupted after round 4 of 5"
    res = _result("fedct", 0, [0.7] * 10)
    res.extra["provenance"] = {"resumed": [{"rounds_planned_before": 5, "rounds_planned": 5}]}
    assert rounds_status(res) is None  # resumed to the rounds it planned: not extended
    res.extra["provenance"]["resumed"] += [
        {"rounds_planned_before": 5, "rounds_planned": 8},
        {"rounds_planned_before": 8, "rounds_planned": 10}]
    assert rounds_status(res) == "extended from 5 to 10 rounds"


@pytest.mark.parametrize(("rmse", "r2", "warned"), [
    (2.0, None, True), (1.99, None, False), (2.01, None, True)])
def test_a_regression_run_is_warned_unless_its_rmse_is_below_the_training_mean_s(
        rmse, r2, warned):
    from fedlabels.results.caveats import regression_warning

    base = {"mean": 1.0, "rmse": 2.0, "r2": -0.01}
    assert (regression_warning(rmse, r2, base) is not None) is warned


@pytest.mark.parametrize(("r2", "warned"), [(0.0, True), (0.01, False), (-0.5, True)])
def test_without_a_baseline_a_regression_run_is_warned_at_r2_of_zero_or_below(r2, warned):
    from fedlabels.results.caveats import regression_warning

    assert (regression_warning(1.0, r2, None) is not None) is warned


def test_sites_declining_evaluation_are_the_most_any_round_saw():
    from fedlabels.results.caveats import sites_declining_evaluation

    res = _result("fedct", 0, [0.7, 0.8, 0.9])
    for rec, n in zip(res.rounds, (1, 3, 2), strict=True):
        rec.server["evaluation_declined"] = n
    assert sites_declining_evaluation(res) == 3


def test_final_is_the_last_evaluated_round_with_numpy_s_statistics_over_clients():
    res = _clients("fedct", 0, [[0.2, 0.6, 0.7], [0.3, 0.9, 0.4]])
    res.rounds.append(RoundRecord(round=3, local_steps=None, accuracies=None, server={},
                                  bytes_up=[0, 0, 0], bytes_down=[0, 0, 0], seconds=0.1))
    final = res.final
    assert final is not None and final["round"] == 2
    accs = np.array([0.3, 0.9, 0.4])
    assert (final["mean_accuracy"], final["std_accuracy"], final["min_accuracy"],
            final["max_accuracy"]) == pytest.approx((accs.mean(), accs.std(), 0.3, 0.9))
    res.extra["malicious"] = {"clients": [1]}
    assert res.final["honest_mean_accuracy"] == pytest.approx(np.mean([0.3, 0.4]))


def test_regression_final_and_summary_row_are_numpy_s_over_the_clients():
    res = _result("fedct", 0, [0.0], clients=3)
    rmse, r2 = [1.0, 4.0, 2.5], [0.9, -0.2, 0.1]
    res.rounds[0] = RoundRecord(round=1, local_steps=None, accuracies=None, server={},
                                bytes_up=[1] * 3, bytes_down=[1] * 3, seconds=0.1,
                                rmse=rmse, r2=r2)
    final = res.final
    assert final is not None
    assert (final["mean_rmse"], final["mean_r2"]) == pytest.approx((np.mean(rmse),
                                                                    np.mean(r2)))
    row = res.summary_row()
    assert (row["min_rmse"], row["max_rmse"]) == (1.0, 4.0)


def test_bytes_per_round_count_only_the_rounds_that_moved_bytes():
    res = _clients("fedct", 0, [[0.5, 0.5], [0.6, 0.6]])
    res.rounds[1].bytes_up, res.rounds[1].bytes_down = [0, 0], [0, 0]  # a student step
    res.rounds[0].bytes_up = [100, 300]
    assert res.mean_bytes_up_per_client_round() == 200.0
    assert res.communication_rounds() == 1


def test_a_run_s_epsilon_column_is_the_budget_it_was_given_before_the_one_spent():
    res = _result("dp-fedct", 0, [0.7], privacy={"epsilon": 7.37})
    assert res.run_columns()["epsilon"] == 7.37
    res.config["options"] = {"epsilon": 8}
    assert res.run_columns()["epsilon"] == 8.0


def test_the_guarantee_names_whom_it_holds_against_and_whom_not():
    from fedlabels.results.run_result import guarantee_text, privacy_line

    privacy = {"guarantee": "formal", "neighbouring": "record-level: one row",
               "guarantee_against": "the other clients (they see labels); not the server "
                                    "(it sees the votes)", "epsilon": 4.0, "delta": 1e-5}
    assert guarantee_text(privacy) == "formal, record-level, against the other clients; " \
                                      "not the server"
    composed = {**privacy, "epsilon_per_round": 1.0, "rounds_accounted": 4,
                "epsilon_by_accountant": {"basic": 4.0}, "accountant": "rdp"}
    assert "compose" not in (privacy_line(composed) or "x")  # ε is the sum: nothing to say
    line = privacy_line({**composed, "epsilon": 2.5})
    assert line is not None and \
        "4 round(s) of pure ε = 1 each (at δ = 0; less at this δ) compose to 2.5" in line


def test_the_sites_ledgers_line_gives_the_range_of_the_sites_epsilons():
    from fedlabels.results.run_result import site_ledgers_line

    sites = {"a": {"epsilon": 2.0, "delta": 1e-5}, "b": {"epsilon": 1.0, "delta": 1e-5},
             "c": {}}
    line = site_ledgers_line({"site_ledgers": {"sites": sites}})
    assert line is not None and "2 of 3 sites reported" in line
    assert "this run ε = 1–2 (δ = 1e-05)" in line


@pytest.mark.parametrize("delta", [1 / 3000, 1.4e-5, 2.5e-6])
def test_the_page_shows_the_delta_a_run_states_not_one_rounded_to_one_digit(delta):
    """δ was shown with one significant digit: 1/3000 read '3e-04' and 1.4e-5 '1e-05', a
    weaker δ than the guarantee holds; 2.5e-6 read '3e-06'."""
    import re

    from fedlabels.reporting.report_page import cost_columns, guarantee_text

    privacy = {"guarantee": "formal", "epsilon": 1.0, "delta": delta,
               "neighbouring": "record-level", "guarantee_against": "the server"}
    res = _result("dp-fedct", 0, [0.7], privacy=privacy)
    (cell,) = [show for _, key, show in cost_columns() if key == "delta"]
    (stated,) = re.findall(r"δ = ([0-9.e+-]+);", guarantee_text(res))
    shown = [cell(summary_rows(group_runs([res]))[0]), stated]
    assert [float(s) for s in shown] == pytest.approx([delta, delta], rel=1e-5)


def _warnings(runs: list[RunResult]) -> list[tuple[str, str]]:
    from fedlabels.reporting.report import configuration_warnings

    configs = group_runs(runs)
    return configuration_warnings(configs, summary_rows(configs))


def test_a_run_below_its_local_reference_is_paired_by_seed_and_partition():
    """FedCT 0.10-0.12 below local-only on each seed is worse beyond noise (the paired
    t-interval, scipy's, lies below 0); a reference of another partition is none."""
    fed = [_result("fedct", s, [a]) for s, a in ((0, 0.70), (1, 0.60), (2, 0.75))]
    ref = [_result("local", s, [a]) for s, a in ((0, 0.80), (1, 0.72), (2, 0.86))]
    paired = [0.70 - 0.80, 0.60 - 0.72, 0.75 - 0.86]
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(paired), scale=stats.sem(paired))
    (line,) = [w for c, w in _warnings(fed + ref) if "local-only reference" in w]
    assert "made the clients worse" in line and f"[{lo:+.3f}, {hi:+.3f}]" in line
    for r in ref:
        r.config["partition"] = "dirichlet:0.1"
    assert not [w for c, w in _warnings(fed + ref) if "local-only reference" in w]


def test_a_seed_given_twice_is_named_and_not_paired():
    fed = [_result("fedct", s, [a]) for s, a in ((0, 0.70), (0, 0.70), (1, 0.60), (2, 0.75))]
    ref = [_result("local", s, [a]) for s, a in ((0, 0.80), (1, 0.72), (2, 0.86))]
    lines = [w for c, w in _warnings(fed + ref)]
    assert any(w.startswith("seed(s) 0 appear in more than one result") for w in lines)
    (line,) = [w for w in lines if "local-only reference" in w]
    assert "over 2 paired seeds" in line  # seed 0 is left out of the pairs
    twice = [w for c, w in _warnings([_result("fedct", 0, [0.7])] * 2)]
    assert any(w.startswith("seed(s) 0 appear") for w in twice)


def test_the_majority_baseline_column_is_the_measured_one_over_the_seeds():
    """A run whose baseline is estimated from the training classes does not move the
    column of runs that measured theirs on the test set."""
    runs = [_result("fedct", s, [0.8]) for s in range(3)]
    for r in runs:
        r.federation.update(client_class_counts=[[90, 10]], n_test=100)  # estimated: 0.9
    runs[0].extra["clinical"] = {"baseline": {"class": 0, "accuracy": 0.55,
                                              "half_width_95": 0.1}}
    runs[1].extra["clinical"] = {"baseline": {"class": 0, "accuracy": 0.65,
                                              "half_width_95": 0.1}}
    row = summary_rows(group_runs(runs))[0]
    assert row["majority_baseline"] == pytest.approx(np.mean([0.55, 0.65]))


def test_the_columns_name_only_settings_in_which_configurations_differ():
    from fedlabels.reporting.report import setting_cells

    runs = [_result("fedct", 0, [0.7]), _result("local", 0, [0.7])]
    for r, workers in zip(runs, (1, 2), strict=True):
        r.config.update(engine="simulator", workers=workers)
    cells = setting_cells(group_runs(runs))
    assert [set(c) for c in cells] == [{"partition", "rounds", "workers"}] * 2
    assert [c["workers"] for c in cells] == [1, 2]


def test_a_configuration_is_said_to_learn_nothing_only_when_every_seed_did(monkeypatch):
    """A configuration one of whose seeds learnt next to nothing was not tested: 'any'
    for 'all' passed, and the lead would have called a configuration idle for one bad
    seed. Only configurations whose every run learnt nothing are named (and none of an
    empty one)."""
    from fedlabels.reporting import report
    from fedlabels.results import caveats

    idle = {"x1", "x2", "y1"}
    monkeypatch.setattr(caveats, "learnt_next_to_nothing", lambda run: run in idle)
    configs = [report.Configuration("x", ["x1", "x2"]),
               report.Configuration("y", ["y1", "y2"]),
               report.Configuration("z", [])]
    assert report._learnt_nothing(configs) == {"x"}
