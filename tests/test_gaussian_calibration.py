"""σ of DP-FedAvg and DP-SGD at q < 1 calibrated to the reported PLD ε: within the target
and tight under dp-accounting's own PLDAccountant, below RDP's σ, the same at the server and
at a client calibrating from its own options; q = 1 unchanged (analytic)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.learners import as_models
from fedlabels.privacy import accounting
from fedlabels.privacy import gaussian_calibration as calibration
from fedlabels.privacy.gaussian_calibration import CALIBRATION_RTOL, calibrate_gaussian
from fedlabels.runs.session import build_session

DELTA = 1e-5
#: small (ε, q, T): one PLD costs milliseconds here
CASES = [(1.0, 0.1, 10), (2.0, 0.2, 25)]


def _oracle(name: str, sigma: float, q: float, steps: int, delta: float = DELTA) -> float:
    """dp-accounting's own accountant, fresh, composing the Poisson-subsampled Gaussian."""
    import dp_accounting as dpa
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    rel = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    acc = (PLDAccountant(rel, value_discretization_interval=accounting.PLD_DISCRETIZATION)
           if name == "pld" else RdpAccountant(neighboring_relation=rel))
    acc.compose(dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps))
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize("target, q, steps", CASES)
def test_pld_sigma_meets_the_target_tightly_below_rdps(target: float, q: float,
                                                       steps: int) -> None:
    pld = calibrate_gaussian(target, DELTA, q, steps)  # the default at q < 1
    assert pld.accountant == "pld" and not pld.note
    assert _oracle("pld", pld.sigma, q, steps) <= target
    assert _oracle("pld", pld.sigma * (1 - CALIBRATION_RTOL), q, steps) > target  # tight
    rdp = calibrate_gaussian(target, DELTA, q, steps, "rdp")
    assert rdp.accountant == "rdp" and rdp.sigma > pld.sigma
    assert _oracle("rdp", pld.sigma, q, steps) > target  # not RDP's calibration
    # the ledger's report at that σ: PLD, within the target
    spent = accounting.tightest_gaussian(pld.sigma, q, steps, DELTA,
                                         accounting.default_gaussian_accountants(q))
    assert spent.accountant == "pld" and spent.epsilon <= target


#: (ε, q, T, δ) over the grid's range, every coordinate varied; the last three (large σ,
#: most clients sampled, many rounds) are where the search's coarse PLD is a step or more
#: above the reported one; a larger ε at a small q costs the oracle's PLD seconds
GRID = [(0.3, 0.02, 3, 1e-6), (0.3, 0.1, 20, 1e-3), (1.0, 0.1, 60, 1e-3), (1.0, 0.5, 3, 1e-6),
        (2.0, 0.5, 20, 1e-6), (4.0, 0.1, 20, 1e-6), (0.3, 0.8, 100, 1e-6),
        (0.5, 0.9, 300, 1e-6), (0.1, 0.9, 100, 1e-3)]


@pytest.mark.parametrize("target, q, steps, delta", GRID)
def test_pld_calibration_is_within_the_target_and_tight_over_a_grid(
        target: float, q: float, steps: int, delta: float) -> None:
    """dp-accounting's PLD accountant at the reported discretisation is the oracle: the
    calibrated σ's ε is at most the target, σ·(1 - CALIBRATION_RTOL)'s above it."""
    pld = calibrate_gaussian(target, delta, q, steps)
    assert pld.accountant == "pld" and not pld.note
    assert _oracle("pld", pld.sigma, q, steps, delta) <= target
    assert _oracle("pld", pld.sigma * (1 - CALIBRATION_RTOL), q, steps, delta) > target


def test_q1_is_analytic_and_unchanged() -> None:
    import dp_accounting as dpa

    cal = calibrate_gaussian(4.0, DELTA, 1.0, 9)
    assert cal.accountant == "analytic"
    assert cal.sigma == float(dpa.get_sigma_gaussian(4.0, DELTA)) * 3.0


def test_pld_falls_back_to_rdp_where_it_is_not_reported(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Above an RDP ε of PLD_ABOVE_RDP_EPSILON a ledger reports RDP's ε (PLD's grid takes
    gigabytes there): a target above it, or a PLD σ whose RDP ε is above it, gets RDP's σ,
    named so with the reason."""
    high = calibrate_gaussian(150.0, DELTA, 0.5, 3)
    assert high.accountant == "rdp" and "above 100" in high.note
    assert high.sigma == calibrate_gaussian(150.0, DELTA, 0.5, 3, "rdp").sigma
    monkeypatch.setattr(calibration, "PLD_ABOVE_RDP_EPSILON", 2.1)
    calibrate_gaussian.cache_clear()  # nothing memoised under the real limit answers, and
    try:  # nothing memoised under this one stays
        near = calibrate_gaussian(2.0, DELTA, 0.5, 10, "pld")  # RDP's ε of its σ: > 2.1
    finally:
        calibrate_gaussian.cache_clear()
    assert near.accountant == "rdp" and "not reported" in near.note


def test_calibration_is_deterministic() -> None:
    """Every party calibrates alone from its own options: the same σ to the bit, computed
    afresh (no cache)."""
    first = calibrate_gaussian(2.0, DELTA, 0.5, 10)
    calibrate_gaussian.cache_clear()
    accounting.gaussian_epsilon.cache_clear()
    accounting.pld_of_one_step.cache_clear()
    assert calibrate_gaussian(2.0, DELTA, 0.5, 10) == first


def test_dp_fedavg_states_the_pld_calibration() -> None:
    fed = fl.load_federation("breast_cancer", clients=4, seed=0)
    session = build_session("dp-fedavg", fed, as_models("mlp(hidden=2)"), rounds=25,
                            period=1, seed=0, options={"epsilon": 2.0, "sample_rate": 0.2})
    server = session.server
    assert server.sigma == calibrate_gaussian(2.0, DELTA, 0.2, 25).sigma
    privacy = server.result_extra()["privacy"]
    assert privacy["calibration"]["accountant"] == "pld"
    assert privacy["noise_multiplier_source"].endswith("by pld")
    assert privacy["target"]["calibrated_by"] == "pld"


@pytest.mark.parametrize("method, options", [
    ("dp-fedavg", {"level": "record", "epsilon": 2.0, "example_rate": 0.2}),
    ("dp-fedct", {"mechanism": "dpsgd", "epsilon": 2.0, "example_rate": 0.2}),
])
def test_dpsgd_server_and_clients_calibrate_the_same_pld_sigma(method: str,
                                                              options: dict) -> None:
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    session = build_session(method, fed, as_models("mlp(hidden=2)"), rounds=1, period=25,
                            seed=0, options=options)
    server = session.server
    mechanism = getattr(server, "strategy", None)
    if mechanism is not None:  # DP-FedCT's calibrates before round 1
        mechanism.calibrate(server, None)
        sigma, privacy = mechanism.sigma, mechanism.privacy(server)
    else:
        sigma, privacy = server.sigma, server.result_extra()["privacy"]
    assert privacy["calibration"]["accountant"] == "pld"
    assert privacy["target"]["calibrated_by"] == "pld"
    assert _oracle("pld", sigma, 0.2, 25) <= 2.0 < _oracle("rdp", sigma, 0.2, 25)
    calibrate_gaussian.cache_clear()
    for client in session.clients.values():
        assert client.own_sigma() == sigma  # type: ignore[attr-defined]
        assert client.ledger.calibrated_by == "pld"  # type: ignore[attr-defined]
    assert math.isfinite(sigma) and np.isfinite(privacy["epsilon"])
