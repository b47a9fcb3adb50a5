"""GNMax's σ is calibrated to the exact Gaussian composition, and every party states that ε.

Oracles: dp-accounting's PLD accountant composing the Q Gaussian mechanisms, and a root of
the analytic Gaussian's δ(ε) (Balle & Wang 2018) found with scipy's brentq.
"""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from scipy.optimize import brentq
from scipy.stats import norm

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.events import GNMaxEvent
from fedlabels.privacy.ledger import Ledger
from fedlabels.privacy.vote_accounting import (
    calibrate_gnmax_sigma,
    gnmax_epsilon,
    gnmax_exact_epsilon,
)

DELTA = 1e-5
CASES = [(1.0, 100), (8.0, 1000), (2.0, 20), (0.5, 3000)]


def pld_epsilon(sigma: float, queries: int, threshold_sigma: float | None = None) -> float:
    """dp-accounting's PLD ε of Q GNMax queries: Gaussians of std σ, L2 sensitivity √2 (and
    Q threshold checks of std σ₁, sensitivity 1)."""
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dpa.GaussianDpEvent(sigma / math.sqrt(2.0)), queries)
    if threshold_sigma is not None:
        acc.compose(dpa.GaussianDpEvent(threshold_sigma), queries)
    return float(acc.get_epsilon(DELTA))


def brentq_sigma(epsilon: float, queries: int) -> float:
    """The σ where the analytic Gaussian's δ(ε) at μ = √(2Q)/σ is δ: scipy's root finder on
    the closed form, written out here."""
    def excess(sigma: float) -> float:
        mu = math.sqrt(2.0 * queries) / sigma
        d = norm.cdf(mu / 2 - epsilon / mu) - math.exp(epsilon) * norm.cdf(-mu / 2 - epsilon / mu)
        return float(d) - DELTA

    return float(brentq(excess, 1e-2, 1e4, xtol=1e-12, rtol=1e-12))


@pytest.mark.parametrize("epsilon,queries", CASES)
def test_calibrated_sigma_meets_the_target_under_dp_accountings_pld(epsilon, queries):
    sigma = calibrate_gnmax_sigma(epsilon, queries, DELTA)
    assert pld_epsilon(sigma, queries) == pytest.approx(epsilon, rel=1e-5)
    assert pld_epsilon(sigma * (1 - 1e-3), queries) > epsilon  # and no more noise than that
    assert gnmax_exact_epsilon(sigma, queries, DELTA) <= epsilon


@pytest.mark.parametrize("epsilon,queries", CASES)
def test_calibrated_sigma_is_the_root_of_the_analytic_gaussian(epsilon, queries):
    sigma = calibrate_gnmax_sigma(epsilon, queries, DELTA)
    root = brentq_sigma(epsilon, queries)
    assert root <= sigma <= root * (1 + 1e-8)  # rounded up: never less noise than needed


@pytest.mark.parametrize("epsilon,queries", CASES)
def test_exact_sigma_is_below_the_rdp_sigma_which_it_would_fail(epsilon, queries):
    # fails if the calibration goes back to RDP: its σ meets the RDP bound, the exact one not
    sigma = calibrate_gnmax_sigma(epsilon, queries, DELTA)
    sigma_rdp = calibrate_gnmax_sigma(epsilon, queries, DELTA, accountant="rdp")
    assert sigma < 0.97 * sigma_rdp
    assert gnmax_epsilon(sigma, queries, DELTA) > epsilon
    assert gnmax_epsilon(sigma_rdp, queries, DELTA) == pytest.approx(epsilon, rel=1e-6)


def test_confident_gnmax_is_accounted_with_its_threshold_checks():
    sigma, s1, q = 20.0, 30.0, 200
    ledger = Ledger(DELTA)
    ledger.record(*[GNMaxEvent(sigma, q // 2, 13, 30.0, s1)] * 2)
    spent = ledger.spent()
    assert spent.accountant == "exact_gaussian"
    assert spent.epsilon == pytest.approx(pld_epsilon(sigma, q, s1), rel=1e-5)
    assert spent.epsilon > pld_epsilon(sigma, q)  # the checks are charged


def test_unknown_calibration_accountant_is_refused():
    with pytest.raises(FedLabelsError, match="exact_gaussian, rdp"):
        calibrate_gnmax_sigma(1.0, 10, DELTA, accountant="pld")


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    return fl.load_federation("breast_cancer", clients=3, seed=1)


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_dp_pate_run_calibrates_and_states_the_exact_epsilon(fed):
    result = fl.run("dp-pate", fed, model="logreg", rounds=1, seed=0, progress=False,
                    options={"epsilon": 1.0, "queries": 30, "query_selection": "random"})
    p = result.extra["privacy"]
    assert p["noise_sigma"] == calibrate_gnmax_sigma(1.0, 30, DELTA)
    assert p["accountant"] == "exact_gaussian" and p["target"]["accountant"] == "exact_gaussian"
    assert p["epsilon"] == pytest.approx(pld_epsilon(p["noise_sigma"], 30), rel=1e-5)
    assert p["epsilon"] <= 1.0 * (1 + 1e-6) < p["epsilon_by_accountant"]["rdp_data_independent"]


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_subsample_aggregate_clients_and_server_share_the_exact_sigma(fed):
    options = {"mechanism": "subsample-aggregate", "epsilon": 2.0, "teachers": 3,
               "label_queries": 20}
    result = fl.run("dp-fedct", fed, model="dt", rounds=2, period=2, seed=1, progress=False,
                    options=options)
    p = result.extra["privacy"]
    sigma = calibrate_gnmax_sigma(2.0, 2 * 20, DELTA)
    # the server's σ; every client calibrated its own and refuses less noise, and its own
    # ledger (exact too) admitted both rounds at its ε
    assert p["noise_sigma"] == sigma
    assert p["accountant"] == "exact_gaussian"
    for eps in p["epsilon_per_client"].values():
        assert eps == pytest.approx(pld_epsilon(sigma, 40), rel=1e-5)
    assert p["epsilon"] <= 2.0 * (1 + 1e-6) < p["epsilon_by_accountant"]["rdp_data_independent"]
    assert np.isfinite(p["epsilon"])


def test_secure_dp_pate_stays_on_the_distributed_discrete_bound():
    from fedlabels.method.base import Settings
    from fedlabels.methods.teacher_student import pate_secure
    from fedlabels.methods.teacher_student.pate_roles import DPPATEOptions
    from fedlabels.privacy.distributed_discrete import calibrate_distributed_noise_multiplier

    opts = DPPATEOptions.from_mapping({"epsilon": 8.0, "aggregation": "secure", "queries": 20,
                                       "query_selection": "random"}, "dp-pate")
    settings = Settings(n_classes=3, n_features=4, n_clients=3, rounds=1, period=1,
                        options=opts)
    p = pate_secure.SecureVoteParameters(opts, settings, n_public=200)
    shift = math.sqrt(2 * 20)
    assert p.sigma == pytest.approx(shift * calibrate_distributed_noise_multiplier(
        8.0, DELTA, 3, shift, 20 * 3, 1), rel=1e-12)
    assert p.sigma > calibrate_gnmax_sigma(8.0, 20, DELTA)  # its own (RDP) bound, not GNMax's
    ledger = Ledger(DELTA)
    ledger.record(p.event())
    assert ledger.spent().accountant == "rdp"
    assert ledger.spent().epsilon == pytest.approx(8.0, rel=1e-5)


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_subsample_aggregate_states_the_accountant_that_calibrated_sigma(fed):
    """Its server ledger left ``calibrated_by`` empty, so the result and the report did not
    say how σ came (dpsgd and DP-FedAvg do): the server's ledger names the accountant from
    the moment it is built, the result and the report say it, each client's ledger too, and
    it is the accountant whose calibration gives the σ used (not RDP's, more noise)."""
    from fedlabels.engines.inprocess import CommMeter, InProcessGrid
    from fedlabels.learners import as_models
    from fedlabels.reporting.report_page import guarantee_text
    from fedlabels.runs.session import build_session

    options = {"mechanism": "subsample-aggregate", "epsilon": 2.0, "teachers": 3,
               "label_queries": 20}
    session = build_session("dp-fedct", fed, as_models("dt"), rounds=2, period=2, seed=1,
                            options=options)
    how = session.server.ledger.calibrated_by  # as built, before round 1
    assert how == "exact_gaussian"
    assert session.server.result_extra()["privacy"]["calibrated_by"] == how
    session.server.run_round(0, InProcessGrid(session.clients, CommMeter()))
    assert {c.ledger.calibrated_by for c in session.clients.values()} == {how}
    result = fl.run("dp-fedct", fed, model="dt", rounds=2, period=2, seed=1, progress=False,
                    options=options)
    p = result.extra["privacy"]
    assert p["calibrated_by"] == p["target"]["calibrated_by"] == how
    assert f"σ calibrated by {how}" in guarantee_text(result)
    assert p["noise_sigma"] == calibrate_gnmax_sigma(2.0, 40, DELTA, accountant=how)
    assert p["noise_sigma"] < calibrate_gnmax_sigma(2.0, 40, DELTA, accountant="rdp")


@pytest.mark.parametrize("options,how", [({"epsilon": 8.0}, "exact_gaussian"),
                                         ({"noise_sigma": 30.0}, "given")])
def test_dp_pate_states_whether_sigma_was_given_or_calibrated_and_by_whom(fed, options, how):
    """DP-PATE's ledger left ``calibrated_by`` empty, so the result and the report did not
    say how σ came; a calibrated σ is the accountant's whose calibration gives it."""
    from fedlabels.reporting.report_page import guarantee_text

    result = fl.run("dp-pate", fed, rounds=1, seed=0, progress=False,
                    options={**options, "queries": 20})
    p = result.extra["privacy"]
    assert p["calibrated_by"] == how
    assert ("; σ given" if how == "given" else f"σ calibrated by {how}") in \
        guarantee_text(result)
    if how != "given":
        assert p["target"]["calibrated_by"] == how
        assert p["noise_sigma"] == calibrate_gnmax_sigma(8.0, 20, DELTA, accountant=how)
