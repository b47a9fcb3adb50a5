"""DP auditing: the one-run and Clopper-Pearson lower bounds on ε, and canary audits of runs."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from fedlabels.audit.canaries import format_lower_bound
from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.epsilon_lower_bound import (
    clopper_pearson_audit,
    clopper_pearson_upper,
    default_guesses,
    one_run_audit,
    one_run_epsilon,
    one_run_p_value,
)

# ------------------------------------------------------------------ one run: the bound


def _exact_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Brute force of the theorem's bound: Binomial sums over math.comb, term by term."""
    q = Fraction(math.exp(eps) / (1 + math.exp(eps)))
    pmf = [math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(r + 1)]
    tail = sum(pmf[v:], Fraction(0))
    alpha = max((sum(pmf[v - i:v], Fraction(0)) / i for i in range(1, v + 1)),
                default=Fraction(0))
    return min(float(tail + 2 * m * Fraction(delta) * alpha), 1.0)


@pytest.mark.parametrize(("m", "r", "v", "eps", "delta"), [
    (100, 20, 15, 0.5, 0.0), (100, 20, 15, 0.5, 1e-3), (50, 50, 40, 1.0, 1e-5),
    (30, 10, 10, 2.0, 1e-2), (10, 10, 0, 1.0, 0.1), (200, 60, 31, 0.0, 1e-4)])
def test_one_run_p_value_matches_brute_force(m, r, v, eps, delta):
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        _exact_p_value(m, r, v, eps, delta), rel=1e-9, abs=1e-15)


def test_pure_dp_p_value_is_the_binomial_tail_with_randomized_response_accuracy():
    for eps in (0.0, 0.3, 1.0, 3.0):
        p = math.exp(eps) / (1 + math.exp(eps))
        for v in (0, 5, 17, 30):
            assert one_run_p_value(40, 30, v, eps) == pytest.approx(
                stats.binom.sf(v - 1, 30, p), rel=1e-12)


def test_all_correct_pure_dp_lower_bound_has_a_closed_form():
    # p(ε) = q^r < β  <=>  q < β^(1/r)  <=>  ε < log(b / (1 - b)), b = β^(1/r)
    for r, beta in ((20, 0.05), (100, 0.05), (60, 0.01)):
        b = beta ** (1 / r)
        assert one_run_epsilon(r, r, r, beta=beta) == pytest.approx(math.log(b / (1 - b)),
                                                                    abs=1e-7)


def test_one_run_lower_bound_is_the_root_and_behaves_monotonically():
    m, r, v, beta = 200, 80, 64, 0.05
    eps = one_run_epsilon(m, r, v, beta=beta)
    assert one_run_p_value(m, r, v, eps) < beta <= one_run_p_value(m, r, v, eps + 1e-6)
    # more correct guesses, or more guesses at the same accuracy: a larger bound
    assert one_run_epsilon(m, r, v + 5, beta=beta) > eps
    assert one_run_epsilon(2 * m, 2 * r, 2 * v, beta=beta) > eps
    # δ > 0 only weakens it; a stricter β too
    assert one_run_epsilon(m, r, v, delta=1e-3, beta=beta) < eps
    assert one_run_epsilon(m, r, v, beta=0.001) < eps
    # chance-level guessing gives nothing
    assert one_run_epsilon(m, r, r // 2, beta=beta) == 0.0
    assert one_run_epsilon(m, r, 0, beta=beta) == 0.0


def test_one_run_audit_counts_top_and_bottom_guesses():
    included = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 0], dtype=bool)
    scores = np.arange(10.0)[::-1]  # canary 0 scores highest
    out = one_run_audit(scores, included, guesses=[(3, 2)])
    # top 3: canaries 0, 1, 2 -> 2 in; bottom 2: canaries 8, 9 -> 1 out
    assert (out["guesses"], out["correct"], out["choices"]) == (5, 3, 1)
    perfect = one_run_audit(included.astype(float), included, guesses=[(5, 5)])
    assert perfect["correct"] == 10
    assert perfect["epsilon_lower_bound"] == pytest.approx(one_run_epsilon(10, 10, 10))
    with pytest.raises(FedLabelsError, match="k_plus"):
        one_run_audit(scores, included, guesses=[(8, 3)])
    with pytest.raises(FedLabelsError, match="one score"):
        one_run_audit(scores[:3], included)
    with pytest.raises(FedLabelsError, match="beta"):
        one_run_audit(scores, included, beta=1.5)


def test_one_run_audit_pays_for_the_choices_it_tries():
    rng = np.random.default_rng(0)
    included = rng.random(200) < 0.5
    scores = included + rng.normal(0, 0.7, 200)
    out = one_run_audit(scores, included)
    assert out["choices"] == len(default_guesses(200))
    # the reported bound is the one of its (k+, k-) at β / #choices
    assert out["epsilon_lower_bound"] == pytest.approx(one_run_epsilon(
        200, out["guesses"], out["correct"], beta=0.05 / out["choices"]))


def _randomized_response_audit(eps: float, m: int, rng: np.random.Generator) -> float:
    """An exactly ε-DP mechanism per canary: randomized response on its inclusion bit."""
    included = rng.random(m) < 0.5
    keep = rng.random(m) < math.exp(eps) / (1 + math.exp(eps))
    return one_run_audit(np.where(keep, included, ~included).astype(float), included,
                         guesses=[(m // 2, m - m // 2)])["epsilon_lower_bound"]


def test_one_run_bound_is_sound_and_nearly_tight_on_randomized_response():
    rng = np.random.default_rng(1)
    for eps in (0.5, 2.0):
        lbs = np.array([_randomized_response_audit(eps, 1000, rng) for _ in range(40)])
        assert (lbs > eps).mean() <= 0.15  # at most β of the time, up to sampling error
        assert np.median(lbs) > 0.7 * eps  # with 1000 canaries it gets close to ε


# ------------------------------------------------------------------ Clopper-Pearson


def test_clopper_pearson_upper_matches_beta_quantiles():
    for k, n, a in ((0, 20, 0.025), (3, 20, 0.05), (19, 20, 0.01), (20, 20, 0.05)):
        expected = 1.0 if k == n else stats.beta.ppf(1 - a, k + 1, n - k)
        assert clopper_pearson_upper(k, n, a) == pytest.approx(expected)
    # k = 0 has the closed form 1 - a^(1/n)
    assert clopper_pearson_upper(0, 50, 0.01) == pytest.approx(1 - 0.01 ** (1 / 50))


def test_clopper_pearson_audit_perfect_separation_closed_form():
    n, beta, delta = 30, 0.05, 1e-5
    out = clopper_pearson_audit(np.ones(n), np.zeros(n), delta=delta, beta=beta)
    a = beta / (2 * out["thresholds"])
    u = 1 - a ** (1 / n)  # CP upper bound of 0 errors in n
    assert out["fpr"] == out["fnr"] == 0.0
    assert out["epsilon_lower_bound"] == pytest.approx(math.log((1 - delta - u) / u))
    assert out["epsilon_ceiling"] == pytest.approx(math.log((1 - delta - u) / u))


def test_each_audit_states_the_most_it_could_show():
    """The ceiling is the bound of a perfect attack (pure DP, all guesses right: the closed
    form log(b / (1 - b)), b = (β / choices)^(1/r), at the best r tried); what an audit finds
    never exceeds it, and the printed line says when the claim is beyond it."""
    m, beta = 200, 0.05
    rng = np.random.default_rng(0)
    included = rng.random(m) < 0.5
    out = one_run_audit(rng.normal(size=m) + included, included, beta=beta)
    b = (beta / out["choices"]) ** (1 / m)  # k+ = k- = m/2: every canary guessed
    assert out["epsilon_ceiling"] == pytest.approx(math.log(b / (1 - b)), abs=1e-6)
    assert 0 < out["epsilon_lower_bound"] < out["epsilon_ceiling"]
    entry = {**out, "claimed_epsilon": 8.0, "falsifies_claim": False}
    line = format_lower_bound(entry)
    assert f"it can show at most ε = {out['epsilon_ceiling']:.3g}, so it cannot test the " \
           "claim" in line
    assert "cannot test" not in format_lower_bound({**entry, "claimed_epsilon": 1.0})


def test_clopper_pearson_audit_follows_the_formula_at_its_threshold():
    rng = np.random.default_rng(2)
    s_in, s_out = rng.normal(1.0, 1.0, 200), rng.normal(0.0, 1.0, 300)
    out = clopper_pearson_audit(s_in, s_out, delta=1e-5, beta=0.05)
    t = out["threshold"]
    fp, fn = int((s_out >= t).sum()), int((s_in < t).sum())
    a = 0.05 / (2 * out["thresholds"])
    fpr_hi = stats.beta.ppf(1 - a, fp + 1, 300 - fp)
    fnr_hi = stats.beta.ppf(1 - a, fn + 1, 200 - fn)
    expected = max(math.log((1 - 1e-5 - fnr_hi) / fpr_hi),
                   math.log((1 - 1e-5 - fpr_hi) / fnr_hi), 0.0)
    assert out["epsilon_lower_bound"] == pytest.approx(expected)
    assert 0 < out["epsilon_lower_bound"] < 2  # two unit-variance Gaussians a unit apart
    # identical distributions: no evidence
    same = clopper_pearson_audit(rng.normal(size=100), rng.normal(size=100))
    assert same["epsilon_lower_bound"] < 0.5
    with pytest.raises(FedLabelsError, match="with and without"):
        clopper_pearson_audit([], [1.0])


def _cp_upper_by_root(k: int, n: int, a: float) -> float:
    """CP upper bound as the root of P[Bin(n, p) <= k] = a (no Beta quantile involved)."""
    from scipy.optimize import brentq

    if k >= n:
        return 1.0
    return brentq(lambda p: stats.binom.cdf(k, n, p) - a, 1e-300, 1 - 1e-15, xtol=1e-15)


@pytest.mark.parametrize(("fp", "fn", "n_in", "n_out"), [
    (0, 0, 20, 20), (20, 0, 20, 20), (0, 20, 20, 20), (20, 20, 20, 20), (3, 5, 30, 40),
    (1, 0, 50, 10), (10, 0, 10, 200), (0, 1, 1, 1), (0, 0, 1, 1)])
@pytest.mark.parametrize("delta", [0.0, 1e-5, 0.1])
def test_clopper_pearson_audit_on_count_tables_matches_an_independent_oracle(fp, fn, n_in,
                                                                           n_out, delta):
    """0/1 scores with fp false positives and fn false negatives at threshold 1, the edge
    cases 0 and n included: ε_lb = max over the thresholds of max(log((1 - δ - FNR_hi) /
    FPR_hi), log((1 - δ - FPR_hi) / FNR_hi), 0), the bounds found as binomial roots."""
    s_in = np.r_[np.ones(n_in - fn), np.zeros(fn)]
    s_out = np.r_[np.ones(fp), np.zeros(n_out - fp)]
    thresholds = np.unique(np.r_[s_in, s_out])
    a = 0.05 / (2 * len(thresholds))
    expected = 0.0
    for t in thresholds:
        fpr_hi = _cp_upper_by_root(int((s_out >= t).sum()), n_out, a)
        fnr_hi = _cp_upper_by_root(int((s_in < t).sum()), n_in, a)
        for num, den in ((1 - delta - fnr_hi, fpr_hi), (1 - delta - fpr_hi, fnr_hi)):
            if num > 0:
                expected = max(expected, math.log(num / den))
    out = clopper_pearson_audit(s_in, s_out, delta=delta, beta=0.05)
    assert out["epsilon_lower_bound"] == pytest.approx(expected, abs=1e-9)
    if fp in (0, n_out) and fn in (0, n_in) and (fp, fn) != (0, 0):
        assert out["epsilon_lower_bound"] == 0.0  # every guess wrong one way: no evidence


# ------------------------------------------------------------------ canary audits of runs

import fedlabels as fl  # noqa: E402
from fedlabels.audit.canaries import (  # noqa: E402
    canaries_for,
    canary_scores,
    epsilon_lower_bound_audit,
    inclusion_draw,
    make_canaries,
    with_canaries,
)
from fedlabels.core import randomness  # noqa: E402
from fedlabels.learners import parse_model_spec  # noqa: E402

DT = parse_model_spec("dt")


@pytest.fixture(scope="module")
def digits():
    """Unequal client sizes: client 0 (which gets the canaries) holds the fewest records."""
    fed = fl.load_federation("digits", clients=3, unlabeled=150, private_per_client=120,
                             test=300, seed=0)
    sizes = (60, 120, 100)
    clients = [fl.data.ClientData(c.X[:n], c.y[:n])
               for c, n in zip(fed.clients, sizes, strict=True)]
    return replace(fed, clients=clients)


def test_canaries_are_mislabelled_held_out_records_in_one_client_and_in_u(digits):
    can = make_canaries(digits, 40, client=0, seed=3)
    assert (can.y != can.y_true).all() and len(can.federation.y_test) == 300 - 40
    # taken out of the evaluation split
    rows = {r.tobytes() for r in can.federation.X_test}
    assert not any(x.tobytes() in rows for x in can.X)
    include = inclusion_draw(40, seed=3)
    assert 0 < include.sum() < 40 and (include == inclusion_draw(40, seed=3)).all()
    fed, offset = with_canaries(can, include)
    assert len(fed.clients[0]) == 60 + include.sum()
    assert [len(c) for c in fed.clients[1:]] == [120, 100]
    np.testing.assert_array_equal(fed.clients[0].y[60:], can.y[include])
    np.testing.assert_array_equal(fed.X_public[offset:], can.X)
    with pytest.raises(FedLabelsError, match="canaries"):
        make_canaries(digits, 290)


def test_fedct_scores_are_the_clients_released_labels_on_the_canaries(digits):
    can = make_canaries(digits, 30, seed=0)
    include = inclusion_draw(30, seed=0)
    scores, result = canary_scores("fedct", can, include, DT, rounds=2, period=5, seed=0)
    # the last round's release is the final local model's labels; round 1 is in between
    final = (result.client_models[0].predict(can.X) == can.y).astype(float)
    assert np.all((scores == final / 2) | (scores == final / 2 + 0.5))
    # a decision tree memorises: every included canary got its (wrong) label in round 1
    assert (scores[include] >= 0.5).all() and scores[~include].mean() < 0.25


def test_non_private_fedct_falsifies_epsilon_one(digits):
    out = epsilon_lower_bound_audit("fedct", digits, DT, rounds=2, period=5, seed=0,
                                    n_canaries=100)
    assert out["estimator"] == "one-run" and out["claimed_epsilon"] is None
    assert out["epsilon_lower_bound"] > 1.0
    assert out["n_canaries"] == 100 and out["correct"] <= out["guesses"]


def test_dp_fedct_at_epsilon_one_is_never_caught_above_one(digits):
    assert not randomness.is_reproducible()  # real OS CSPRNG noise
    for seed in range(3):
        out = epsilon_lower_bound_audit("dp-fedct", digits, DT, rounds=2, period=5,
                                        seed=seed, n_canaries=100,
                                        options={"epsilon": 1.0, "mechanism": "xor"})
        assert out["noise"] == "OS CSPRNG"
        assert out["claimed_epsilon"] == pytest.approx(1.0, rel=1e-3)
        assert out["epsilon_lower_bound"] <= 1.0 and not out["falsifies_claim"]


def test_clopper_pearson_over_runs_separates_a_deterministic_method(digits):
    out = epsilon_lower_bound_audit("fedct", digits, DT, rounds=1, period=5, seed=0,
                                    estimator="clopper-pearson", runs=10)
    # the same seed and no noise: with and without the canary always differ
    assert out["fpr"] == out["fnr"] == 0.0
    u = 1 - (0.05 / (2 * out["thresholds"])) ** (1 / 10)
    assert out["epsilon_lower_bound"] == pytest.approx(math.log((1 - out["delta"] - u) / u))


def test_canary_counts_and_bad_requests(digits):
    assert canaries_for("dp-fedct", None, digits) == 100
    assert canaries_for("fedct", None, digits) == 0
    assert canaries_for("fedct", 12, digits) == 12
    with pytest.raises(FedLabelsError, match="no canary audit"):
        canaries_for("dd", 5, digits)
    with pytest.raises(FedLabelsError, match=">= 0"):
        canaries_for("fedct", -1, digits)
    with pytest.raises(FedLabelsError, match="estimator"):
        epsilon_lower_bound_audit("fedct", digits, DT, rounds=1, estimator="bayes")


def test_too_many_canaries_are_refused_before_the_membership_audit_runs(monkeypatch, capsys,
                                                                      tmp_path):
    """--canaries beyond what the held-out split spares used to be refused by make_canaries,
    after the whole membership audit (its federated run, reference models and attacks)."""
    from fedlabels.audit import canaries as canaries_module
    from fedlabels.audit import core
    from fedlabels.cli import main

    runs = []

    def counted(*args, **kwargs):
        runs.append(1)
        raise AssertionError("the audited run started before the refusal")

    monkeypatch.setattr(core, "simulate", counted)
    monkeypatch.setattr(canaries_module, "simulate", counted)
    assert main(["audit", "--method", "fedct", "--dataset", "breast_cancer", "--model", "dt",
                 "--rounds", "1", "--test", "100", "--canaries", "81", "--no-progress",
                 "--output", str(tmp_path / "r.json")]) == 2
    assert runs == [] and not (tmp_path / "r.json").exists()
    assert "81 canaries: the held-out split has 100 records" in capsys.readouterr().err


@pytest.mark.slow
def test_dp_fedavg_is_observed_through_its_final_global_model(digits):
    can = make_canaries(digits, 20, seed=1)
    scores, result = canary_scores("dp-fedavg", can, inclusion_draw(20, 1),
                                   parse_model_spec("mlp(hidden=8)"), rounds=2, period=5,
                                   seed=1, options={"epsilon": 4.0})
    # after the last evaluation every client holds the global weights the server released
    probs = result.client_models[2].predict_proba(can.X)
    np.testing.assert_allclose(scores, probs[np.arange(20), can.y], rtol=1e-5)
    assert result.extra["privacy"]["epsilon"] == pytest.approx(4.0, rel=1e-3)


def test_dp_pate_is_observed_through_its_released_labels(digits):
    out = epsilon_lower_bound_audit("dp-pate", digits, DT, rounds=1, seed=2, n_canaries=50,
                                    options={"epsilon": 1.0})
    assert out["observed"].startswith("the aggregator's released labels")
    assert out["epsilon_lower_bound"] <= out["claimed_epsilon"]


def test_plain_pate_is_audited_at_the_default_delta(digits):
    """A non-DP result states delta None (plain PATE since 44a89f5); the audit takes the
    documented 10⁻⁵ for a method without a guarantee instead of failing on float(None)."""
    out = epsilon_lower_bound_audit("pate", digits, DT, rounds=1, seed=2, n_canaries=20)
    assert out["delta"] == 1e-5
    assert 0 <= out["epsilon_lower_bound"] < math.inf


@pytest.mark.slow
def test_cli_audit_reports_the_lower_bound_next_to_the_claim(tmp_path, capsys):
    import json

    from fedlabels.cli import main

    out = tmp_path / "dp.json"
    assert main(["audit", "--method", "dp-fedct", "--mechanism", "xor", "--epsilon", "1",
                 "--dataset",
                 "breast_cancer", "--clients", "3", "--model", "dt", "--rounds", "2",
                 "--unlabeled", "80", "--private-per-client", "40", "--test", "300",
                 "--mia-attacks", "loss", "--audit-members", "20", "--audit-refs", "2",
                 "--audit-population", "30", "--canaries", "40", "--output", str(out),
                 "--no-progress"]) == 0
    privacy = json.loads(out.read_text())["privacy"]
    assert privacy["epsilon_lower_bound"] == privacy["epsilon_lower_bound_audit"][
        "epsilon_lower_bound"] <= privacy["epsilon"]
    assert privacy["epsilon_lower_bound_audit"]["n_canaries"] == 40
    assert "canary audit (one-run" in capsys.readouterr().out
    assert main(["audit", "--method", "dd", "--dataset", "breast_cancer", "--canaries", "5",
                 "--output", str(tmp_path / "x.json"), "--no-progress"]) != 0
    assert "no canary audit for method 'dd'" in capsys.readouterr().err


def test_a_claim_under_replacement_is_not_falsified_by_added_canaries():
    """The canaries are added to or left out of a client's data (add/remove); dp-pate's
    claim is under replacement only, so the audit compares nothing (None), while a claim
    that covers removal is compared."""
    from fedlabels.audit.canaries import _falsifies
    from fedlabels.privacy.events import DISJOINT_TEACHERS, RECORD_LEVEL

    assert _falsifies({"epsilon": 1.0, "neighbouring": DISJOINT_TEACHERS}, 5.0) is None
    assert _falsifies({"epsilon": 1.0, "neighbouring": RECORD_LEVEL}, 5.0) is True
    assert _falsifies({"epsilon": 8.0, "neighbouring": RECORD_LEVEL}, 5.0) is False
    assert _falsifies({}, 5.0) is None


def test_a_client_level_claim_is_not_falsified_by_one_added_record():
    """DP-FedAvg's client-level ε bounds one whole client added or removed; a canary record
    added to a client moves its clipped update by up to 2S, twice the sensitivity the noise
    is calibrated to, so a correct run could be reported FALSIFIED at a bound below 2ε."""
    from fedlabels.audit.canaries import _falsifies, format_lower_bound
    from fedlabels.privacy.events import CLIENT_LEVEL, WHOLE_DATASET

    assert _falsifies({"epsilon": 1.0, "neighbouring": CLIENT_LEVEL}, 1.5) is None
    # any two datasets of a client (dp-fedct's worst case) include one record more or less
    assert _falsifies({"epsilon": 1.0, "neighbouring": WHOLE_DATASET}, 1.5) is True
    line = format_lower_bound({"estimator": "one-run", "correct": 9, "guesses": 10,
                               "n_canaries": 100, "epsilon_lower_bound": 1.5, "beta": 0.05,
                               "delta": 1e-5, "claimed_epsilon": 1.0,
                               "falsifies_claim": None})
    assert "FALSIFIED" not in line and "not comparable" in line and "up to 2ε" in line


def test_a_bound_above_the_claim_falsifies_it_and_one_at_it_does_not():
    from fedlabels.audit.canaries import _falsifies
    from fedlabels.privacy.events import RECORD_LEVEL

    claim = {"epsilon": 1.0, "neighbouring": RECORD_LEVEL}
    assert _falsifies(claim, 1.01) is True
    assert _falsifies(claim, 1.0) is False


def test_a_dp_method_is_audited_at_its_own_delta(digits):
    """The audit's δ is the claim's (here the option's 10⁻³), not the default 10⁻⁵."""
    out = epsilon_lower_bound_audit("dp-fedct", digits, DT, rounds=1, period=5, seed=0,
                                    n_canaries=20, options={"epsilon": 1.0, "delta": 1e-3,
                                                            "mechanism": "xor"})
    assert out["delta"] == 1e-3


def _spied_scores(monkeypatch):
    """canary_scores' recording method, kept for an oracle read off its raw records."""
    from fedlabels.audit import canaries as canaries_module

    seen = []

    def spy(kind, method, *args):
        seen.append(method)
        return scores_of(kind, method, *args)

    scores_of = canaries_module._scores
    monkeypatch.setattr(canaries_module, "_scores", spy)
    return seen


def test_xor_rows_are_scored_at_the_canarys_label_not_its_true_class(digits, monkeypatch):
    """DP-FedCT's XOR rows are read as probabilities: the score is the (smoothed) bit of the
    canary's wrong label, averaged over the rounds, recomputed here from the raw bits."""
    from fedlabels.privacy.mechanisms import unpack_rows

    seen = _spied_scores(monkeypatch)
    can = make_canaries(digits, 30, seed=4)
    include = inclusion_draw(30, seed=4)
    scores, _ = canary_scores("dp-fedct", can, include, DT, rounds=2, period=5, seed=4,
                              options={"epsilon": 8.0, "mechanism": "xor"})
    fed, offset = with_canaries(can, include)
    n_pub, c = len(fed.X_public), fed.n_classes
    per = []
    for ex in seen[0].recorder.exchanges:
        if ex.cid != 0:
            continue
        bits = unpack_rows(ex.up.arrays["bits"], n_pub, c)[offset:].astype(float)
        per.append([(bits[i, can.y[i]] + 1e-3) / (bits[i].sum() + c * 1e-3)
                    for i in range(30)])
    assert len(per) == 2
    np.testing.assert_allclose(scores, np.mean(per, axis=0), rtol=1e-12)


def test_an_unreleased_canary_scores_a_half(digits, monkeypatch):
    """PATE releases labels on its queries only (abstentions left out): a canary that got no
    released label scores ½, one that got one scores 1 if it is the canary's label, else 0."""
    seen = _spied_scores(monkeypatch)
    can = make_canaries(digits, 40, seed=5)
    include = inclusion_draw(40, seed=5)
    scores, _ = canary_scores("pate", can, include, DT, rounds=1, seed=5,
                              options={"queries": 20})
    _, offset = with_canaries(can, include)
    role = seen[0].clients[0]
    released = dict(zip((int(i) for i in role.student_index),
                        (int(v) for v in role.student_y), strict=True))
    expected = [0.5 if offset + i not in released else float(released[offset + i] == can.y[i])
                for i in range(40)]
    assert expected.count(0.5) >= 20  # at most 20 queries: half the canaries unreleased
    np.testing.assert_array_equal(scores, expected)
