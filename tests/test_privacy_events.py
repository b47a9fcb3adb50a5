"""GNMax and Laplace noisy-max go events -> accountant; ε against independent computations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent
from fedlabels.privacy.events import (
    DISJOINT_TEACHERS,
    RECORD_LEVEL,
    GNMaxEvent,
    KaryRREvent,
    LaplaceNoisyMaxEvent,
    SampledGaussianEvent,
    XorEvent,
)
from fedlabels.privacy.gnmax import (
    DEFAULT_ORDERS,
    gnmax_aggregate,
    gnmax_event,
    gnmax_log_q,
    gnmax_rdp_data_dependent_total,
)
from fedlabels.privacy.noisy_max import laplace_noisy_max
from fedlabels.privacy.vote_accounting import (
    PLD_MAX_EPSILON_PER_QUERY,
    account_gnmax,
    account_laplace,
)

DELTA = 1e-5


def _rdp_to_epsilon(rdp: np.ndarray, orders: np.ndarray, delta: float) -> float:
    """RDP -> (ε, δ) written out (Balle et al. 2020, Prop. 12; orders <= 1.01 skipped)."""
    use = orders > 1.01
    a, r = orders[use], rdp[use]
    return float(np.min(r + np.log1p(-1.0 / a) - np.log(delta * a) / (a - 1.0)))


def _consensus_counts(n_queries: int, n_top: int = 40, n_classes: int = 10) -> np.ndarray:
    rng = np.random.default_rng(0)
    counts = np.zeros((n_queries, n_classes))
    top = rng.integers(0, n_classes, n_queries)
    counts[np.arange(n_queries), top] = n_top
    counts[np.arange(n_queries), (top + 1) % n_classes] = 10
    return counts


# ------------------------------------------------------------------ GNMax


def test_gnmax_event_records_what_the_data_independent_bound_needs():
    counts = _consensus_counts(30)
    release = gnmax_aggregate(counts, 5.0, np.random.default_rng(0))
    ev = gnmax_event(counts, release.answered, 5.0)
    assert (ev.sigma, ev.n_queries, ev.n_answered) == (5.0, 30, 30)
    assert ev.threshold is None and ev.threshold_sigma is None and not ev.confident
    assert ev.neighbouring == DISJOINT_TEACHERS
    assert ev.data_dependent_log_q == pytest.approx(tuple(gnmax_log_q(counts, 5.0)))
    assert gnmax_event(counts, release.answered, 5.0, data_dependent=False) \
        .data_dependent_log_q is None


@pytest.mark.parametrize("sigma,queries", [(2.0, 50), (9.54, 50), (40.0, 1000)])
def test_plain_gnmax_rdp_bound_is_the_sum_of_lambda_over_sigma_squared(sigma, queries):
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant as rdpa

    counts = _consensus_counts(queries)
    event = gnmax_event(counts, np.ones(queries, bool), sigma)
    account = account_gnmax([event], DELTA)
    # Σ over the answered queries of λ/σ², converted by hand on the same orders
    rdp = sum(DEFAULT_ORDERS / sigma**2 for _ in range(queries))
    assert account.epsilon_rdp == pytest.approx(_rdp_to_epsilon(rdp, DEFAULT_ORDERS, DELTA),
                                                rel=1e-12)
    # and dp-accounting's own RDP accountant (its order grid): a Gaussian of multiplier σ/√2
    acc = rdpa.RdpAccountant()
    acc.compose(dpa.GaussianDpEvent(sigma / math.sqrt(2.0)), queries)
    assert account.epsilon_rdp == pytest.approx(acc.get_epsilon(DELTA), rel=2e-3)
    # the guarantee: the same Q Gaussian mechanisms composed by dp-accounting's PLD
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(dpa.GaussianDpEvent(sigma / math.sqrt(2.0)), queries)
    assert account.epsilon == pytest.approx(pld.get_epsilon(DELTA), rel=2e-3)
    d = account.to_dict()
    assert d["epsilon"] == account.epsilon and d["queries"] == d["answered"] == queries
    assert d["mechanism"] == "GNMax" and d["delta"] == DELTA
    assert d["accountant"] == "exact_gaussian"
    assert d["epsilon_by_accountant"]["rdp_data_independent"] == account.epsilon_rdp


def test_confident_gnmax_charges_every_asked_query_and_its_threshold_check():
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant

    sigma, s1, q = 20.0, 30.0, 200
    ev = GNMaxEvent(sigma, q, 37, threshold=30.0, threshold_sigma=s1)
    account = account_gnmax([ev], DELTA)
    rdp = q * DEFAULT_ORDERS / sigma**2 + q * DEFAULT_ORDERS / (2.0 * s1**2)
    assert account.epsilon_rdp == pytest.approx(_rdp_to_epsilon(rdp, DEFAULT_ORDERS, DELTA),
                                            rel=1e-12)
    # the exact counterpart: 2Q Gaussian mechanisms, composed by dp-accounting's PLD
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(dpa.GaussianDpEvent(sigma / math.sqrt(2.0)), q)
    pld.compose(dpa.GaussianDpEvent(s1), q)
    assert account.epsilon == pytest.approx(pld.get_epsilon(DELTA), rel=2e-3)
    assert account.epsilon < account.epsilon_rdp
    assert account.epsilon_data_dependent is None  # no log q̃ recorded
    assert account.n_queries == q and account.n_answered == 37
    assert account.to_dict()["mechanism"] == "confident GNMax"


def test_gnmax_batches_compose_like_one_batch():
    counts = _consensus_counts(90)
    answered = np.ones(90, bool)
    one = account_gnmax([gnmax_event(counts, answered, 10.0)], DELTA)
    parts = [gnmax_event(counts[i:i + 30], answered[i:i + 30], 10.0) for i in (0, 30, 60)]
    three = account_gnmax(parts, DELTA)
    assert three.epsilon == pytest.approx(one.epsilon, rel=1e-12)
    assert three.epsilon_rdp == pytest.approx(one.epsilon_rdp, rel=1e-12)
    assert three.epsilon_data_dependent == pytest.approx(one.epsilon_data_dependent,
                                                         rel=1e-12)
    assert three.n_queries == 90


def test_data_dependent_bound_is_reported_apart_and_marked_not_dp():
    counts = _consensus_counts(1000, n_top=240)  # 250 teachers, strong consensus
    account = account_gnmax([gnmax_event(counts, np.ones(1000, bool), 40.0)], DELTA)
    expected = _rdp_to_epsilon(gnmax_rdp_data_dependent_total(counts, 40.0), DEFAULT_ORDERS,
                               DELTA)
    assert account.epsilon_data_dependent == pytest.approx(min(expected, account.epsilon),
                                                           rel=1e-12)
    assert account.epsilon_data_dependent < 1.0 < account.epsilon
    d = account.to_dict()
    assert d["epsilon"] == account.epsilon != d["epsilon_data_dependent"]
    assert "NOT itself differentially private" in d["epsilon_data_dependent_note"]


def test_gnmax_accountant_rejects_bad_events():
    with pytest.raises(FedLabelsError, match="at least one"):
        account_gnmax([], DELTA)
    with pytest.raises(FedLabelsError, match="one"):
        account_gnmax([GNMaxEvent(1.0, 5, 5), GNMaxEvent(2.0, 5, 5)], DELTA)
    with pytest.raises(FedLabelsError, match="sigma must be a finite number > 0"):
        account_gnmax([GNMaxEvent(0.0, 5, 5)], DELTA)
    with pytest.raises(FedLabelsError, match="threshold_sigma"):
        account_gnmax([GNMaxEvent(1.0, 5, 5, threshold=3.0)], DELTA)
    with pytest.raises(FedLabelsError, match="delta"):
        account_gnmax([GNMaxEvent(1.0, 5, 5)], 0.0)


# ------------------------------------------------------------------ Laplace noisy-max


@pytest.mark.parametrize("scale,l1,queries", [(20.0, 2.0, 300), (40.0, 10.0, 50),
                                              (4.0, 8.0, 100)])
def test_laplace_events_match_basic_composition_and_dp_accounting(scale, l1, queries):
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    ev = LaplaceNoisyMaxEvent(scale, l1, queries)
    assert ev.neighbouring == RECORD_LEVEL and ev.epsilon_per_query == l1 / scale
    account = account_laplace([ev], DELTA)
    by = account.by_accountant
    assert by["basic"] == pytest.approx(queries * l1 / scale, rel=1e-15)  # Q·Δ₁/b
    rel = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=rel)
    rdp.compose(dpa.LaplaceDpEvent(noise_multiplier=scale / l1), queries)
    assert by["rdp"] == pytest.approx(rdp.get_epsilon(DELTA), rel=1e-12)
    if l1 / scale <= PLD_MAX_EPSILON_PER_QUERY:
        pld = pld_privacy_accountant.PLDAccountant(neighboring_relation=rel)
        pld.compose(dpa.LaplaceDpEvent(noise_multiplier=scale / l1), queries)
        assert by["pld"] == pytest.approx(pld.get_epsilon(DELTA), rel=1e-12)
    else:
        assert "pld" not in by and "pld_skipped" in account.details
    assert account.epsilon == min(by.values())
    assert account.delta == (0.0 if account.accountant == "basic" else DELTA)
    d = account.to_dict()
    assert d["queries"] == queries and d["l1_sensitivity"] == l1 and d["laplace_scale"] == scale


def test_laplace_batches_compose_and_the_mechanism_reports_its_scale():
    release = laplace_noisy_max(_consensus_counts(60), 0.1, np.random.default_rng(0))
    one = account_laplace([LaplaceNoisyMaxEvent(release.scale, 2.0, 60)], DELTA)
    parts = account_laplace([LaplaceNoisyMaxEvent(release.scale, 2.0, 20)] * 3, DELTA)
    assert parts.by_accountant == one.by_accountant and parts.n_queries == 60
    assert one.by_accountant["basic"] == pytest.approx(60 * 0.1)


def test_laplace_accountant_rejects_bad_events():
    with pytest.raises(FedLabelsError, match="at least one"):
        account_laplace([], DELTA)
    with pytest.raises(FedLabelsError, match="one"):
        account_laplace([LaplaceNoisyMaxEvent(2.0, 2.0, 5), LaplaceNoisyMaxEvent(4.0, 2.0, 5)],
                        DELTA)
    with pytest.raises(FedLabelsError, match="scale"):
        account_laplace([LaplaceNoisyMaxEvent(0.0, 2.0, 5)], DELTA)


@pytest.mark.parametrize("make", [
    lambda: DPSGDRoundEvent(1.0, 0.1, 1.0, ((0, 4), (1, -3))),
    lambda: DPSGDRoundEvent(1.0, 0.1, 1.0, ((0, 2.5),)),
    lambda: DPSGDRoundEvent(0.0, 0.1, 1.0, ((0, 4),)),
    lambda: DPSGDRoundEvent(1.0, 1.5, 1.0, ((0, 4),)),
    lambda: GNMaxEvent(1.0, -5, -5),
    lambda: GNMaxEvent(1.0, 5, 6),
    lambda: LaplaceNoisyMaxEvent(2.0, 2.0, -1),
    lambda: LaplaceNoisyMaxEvent(float("nan"), 2.0, 1),
    lambda: XorEvent(1.0, -4, 0.2, 100),
    lambda: XorEvent(1.0, 4, 0.7, 100),
    lambda: KaryRREvent(-1.0, 1, -1.0, 3, 10),
    lambda: KaryRREvent(1.0, 1, 1.0, 3, -10),
    lambda: SampledGaussianEvent(1.0, 0.0, 1.0),
])
def test_an_event_cannot_record_a_negative_or_impossible_release(make):
    """A release is recorded with what it cost: a negative count (which a deviating server
    sent as a DP-SGD step count, taking steps off a client's ledger while it trained more) or
    an impossible parameter is refused where the event is made, so no ledger, the site's
    file included, ever holds one, and a tampered entry does not load."""
    with pytest.raises(FedLabelsError, match="must be"):
        make()


def test_a_tampered_site_ledger_entry_with_negative_steps_does_not_load():
    from fedlabels.privacy.ledger import event_from_dict, event_to_dict

    entry = json.loads(json.dumps(event_to_dict(DPSGDRoundEvent(1.0, 0.1, 1.0, ((0, 4),)))))
    assert event_from_dict(entry).steps == ((0, 4),)
    tampered = {**entry, "steps": [[0, 4], [0, -4]]}
    with pytest.raises(FedLabelsError, match="integers >= 0"):
        event_from_dict(tampered)
