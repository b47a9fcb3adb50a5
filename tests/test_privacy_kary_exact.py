"""The exact accountant of composed k-ary randomized response and DP-FedCT kary's calibration.

Oracles: brute-force enumeration of every output of tiny products, dp-accounting's PLD built
from the pair's two probability mass functions and self-composed, binary randomized
response's exact accountant (k = 2), and the RDP accountant the calibration used before.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.privacy.accounting import (
    LabelTally,
    _label_epsilon,
    _largest_round_epsilon,
    account_labels,
    calibrate_kary_round_epsilon,
    label_tally_within,
    rr_delta_for_epsilon,
)
from fedlabels.privacy.events import KaryRREvent
from fedlabels.privacy.kary_exact import kary_delta_for_epsilon, kary_epsilon_exact

DELTA = 1e-5


def _p(eps1: float, k: int) -> float:
    return k / (math.exp(eps1) + k - 1)  # as LabelTally.add keys a release


def _pair(p: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One response's output distributions for true labels 0 and 1."""
    upper = np.full(k, p / k)
    upper[0] += 1.0 - p
    return upper, upper[[1, 0, *range(2, k)]]


def _brute_delta(epsilon: float, n: int, p: float, k: int) -> float:
    P, Q = _pair(p, k)
    total = 0.0
    for out in itertools.product(range(k), repeat=n):
        idx = list(out)
        total += max(0.0, float(np.prod(P[idx]) - math.exp(epsilon) * np.prod(Q[idx])))
    return total


@pytest.mark.parametrize("n, k, eps1", [(3, 3, 1.0), (4, 4, 0.5), (5, 3, 2.0), (2, 5, 0.3),
                                         (6, 3, 0.1)])
def test_exact_delta_equals_brute_force_enumeration(n: int, k: int, eps1: float) -> None:
    p = _p(eps1, k)
    for epsilon in (0.0, 0.2, 0.7, 1.5, 3.0):
        want = _brute_delta(epsilon, n, p, k)
        got = kary_delta_for_epsilon(epsilon, n, p, k)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (n, k, epsilon)


@pytest.mark.parametrize("n, k, eps1", [(50, 5, 0.25), (400, 10, 0.1), (20, 3, 0.5)])
def test_exact_delta_matches_dp_accounting_pld_of_the_two_pmfs(n: int, k: int,
                                                               eps1: float) -> None:
    from dp_accounting.pld import privacy_loss_distribution as pld

    p = _p(eps1, k)
    P, Q = _pair(p, k)
    # dp-accounting rounds each loss up (pessimistic) or down (optimistic) to its grid: the
    # exact δ and ε lie between the two estimates, which differ by about the grid's spacing
    interval = 1e-5
    upper, lower = (pld.from_two_probability_mass_functions(
        {o: math.log(v) for o, v in enumerate(Q)}, {o: math.log(v) for o, v in enumerate(P)},
        pessimistic_estimate=pessimistic, value_discretization_interval=interval
        ).self_compose(n) for pessimistic in (True, False))
    for epsilon in (0.5, 1.0, 2.0):
        got = kary_delta_for_epsilon(epsilon, n, p, k)
        lo, hi = lower.get_delta_for_epsilon(epsilon), upper.get_delta_for_epsilon(epsilon)
        assert lo - 1e-12 <= got <= hi + 1e-12, (n, k, epsilon)
        assert hi - lo <= 0.02 * hi  # the bracket is tight enough to mean something
    eps = kary_epsilon_exact(n, p, k, DELTA)
    lo, hi = lower.get_epsilon_for_delta(DELTA), upper.get_epsilon_for_delta(DELTA)
    assert lo - 1e-9 <= eps <= hi + 1e-9
    assert hi - lo <= 0.01 * hi


@pytest.mark.parametrize("n, eps1", [(1, 0.7), (40, 0.3), (5000, 0.02)])
def test_two_classes_are_binary_randomized_response(n: int, eps1: float) -> None:
    p = _p(eps1, 2)
    for epsilon in (0.0, 0.5, 2.0):  # raised only by the margin bounding the rounding
        want = rr_delta_for_epsilon(epsilon, n, p / 2)
        got = kary_delta_for_epsilon(epsilon, n, p, 2)
        assert want * (1 - 1e-14) - 1e-16 <= got <= want * (1 + 1e-9) + 1e-15


def test_a_large_composition_is_summed_once_and_fast() -> None:
    import time

    p = _p(0.005, 10)
    start = time.process_time()
    eps = kary_epsilon_exact(100_000, p, 10, DELTA)
    assert time.process_time() - start < 5.0
    assert kary_delta_for_epsilon(eps, 100_000, p, 10) <= DELTA
    assert kary_delta_for_epsilon(eps * (1 - 1e-6), 100_000, p, 10) > DELTA


def _run_epsilon(eps_round: float, rounds: int, labels: int, k: int,
                 accountants: tuple[str, ...] = ("basic", "exact", "rdp")) -> Any:
    eps1 = eps_round / labels
    events = [KaryRREvent(eps_round, labels, eps1, k, 100)] * rounds
    return account_labels(events, DELTA, accountants)


@pytest.mark.parametrize("total, rounds, labels, k", [(4.0, 10, 100, 10), (1.0, 5, 50, 4),
                                                      (8.0, 20, 30, 3), (4.0, 3, 370, 2)])
def test_calibration_meets_the_target_by_the_exact_accountant(total: float, rounds: int,
                                                              labels: int, k: int) -> None:
    eps_round = calibrate_kary_round_epsilon(total, DELTA, rounds, labels, k)
    spent = _run_epsilon(eps_round, rounds, labels, k)
    assert spent.accountant == "exact"  # what the ledgers will report
    assert spent.epsilon <= total
    assert spent.epsilon == pytest.approx(total, rel=1e-5)
    # a slightly larger per-round ε exceeds the target
    assert _run_epsilon(eps_round * (1 + 1e-4), rounds, labels, k).epsilon > total
    tally = LabelTally.of([KaryRREvent(eps_round, labels, eps_round / labels, k, 100)]
                          * rounds)
    assert label_tally_within(tally, total, DELTA)


def test_calibration_is_not_the_rdp_accountant_s() -> None:
    total, rounds, labels, k = 4.0, 10, 100, 10
    eps_round = calibrate_kary_round_epsilon(total, DELTA, rounds, labels, k)

    def rdp_total(e: float) -> float:
        tally = LabelTally(groups={(_p(e / labels, k), k): rounds * labels}, count=rounds)
        return _label_epsilon(tally, DELTA, "rdp")

    before = _largest_round_epsilon(rdp_total, total, rounds)
    # RDP would spend more than the target at the calibrated ε: its calibration is smaller
    assert _run_epsilon(eps_round, rounds, labels, k, ("rdp",)).epsilon > total
    assert eps_round > before * 1.01


def test_a_kary_run_and_every_clients_ledger_state_the_exact_epsilon(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import digits_with_sizes, keep_client_roles

    fed = digits_with_sizes((40, 60, 50), n_unlabeled=30, n_test=40)
    roles = keep_client_roles(monkeypatch, "dp-fedct")
    p = fl.run("dp-fedct", fed, model="dt", rounds=3, period=2, seed=0,
               options={"epsilon": 3.0, "mechanism": "kary", "sensitivity": 8}
               ).extra["privacy"]
    assert p["accountant"] == "exact" and p["epsilon"] <= 3.0
    assert p["epsilon"] == pytest.approx(3.0, rel=1e-5)
    assert p["epsilon_per_round"] == calibrate_kary_round_epsilon(3.0, DELTA, 3, 4, 10)
    for cid, role in roles.items():
        mine = role.ledger.spent()
        assert (mine.accountant, mine.epsilon) == (p["accountant"], p["epsilon"]), cid


def test_a_two_class_kary_tally_is_binary_rrs() -> None:
    """LabelTally kept a flag 'any release is k-ary' that nothing read once the exact
    accountant took k-ary RR (a group's buckets say which RR it is): a 2-class k-ary RR
    release is binary RR, and its tally is now that of XOR releases of the same flip
    probability, to the field (the flag told them apart)."""
    from fedlabels.privacy.events import XorEvent

    eps1, s, n = 0.5, 3, 40  # p = 2f exactly in floating point at this ε₁
    kary = LabelTally.of([KaryRREvent(s * eps1, s, eps1, 2, n)] * 4)
    xor = LabelTally.of([XorEvent(s * eps1, s, 1.0 / (1.0 + math.exp(eps1)), n)] * 4)
    assert kary == xor and kary.copy() == kary
    assert _label_epsilon(kary, DELTA, "exact") == _label_epsilon(xor, DELTA, "exact")


def _scipy_window_losses(n: int, p: float, k: int) -> tuple[np.ndarray, float]:
    """The accountant as it summed before (scipy's binomial pmf, cdf and sf over the same
    window, the exact mass outside): P(#a - #b = d) for d = 0..n, and the mass outside."""
    from scipy import stats

    from fedlabels.privacy.kary_exact import _window

    r = p / k
    q = 1.0 - p + r
    informative, g = min(1.0, q + r), q / (q + r)
    m_lo, m_hi = (int(v) for v in _window(n, informative))
    outside = (float(stats.binom.cdf(m_lo - 1, n, informative)) if m_lo > 0 else 0.0) \
        + (float(stats.binom.sf(m_hi, n, informative)) if m_hi < n else 0.0)
    by_d = np.zeros(n + 1)
    m = np.arange(m_lo, m_hi + 1)
    w = stats.binom.pmf(m, n, informative)
    i_lo, i_hi = _window(m, g)
    outside += float(np.sum(w * (stats.binom.cdf(i_lo - 1, m, g) + stats.binom.sf(i_hi, m, g))))
    for row, (mm, lo, hi) in enumerate(zip(m, i_lo, i_hi, strict=True)):
        i = np.arange(max(lo, mm // 2 + 1), hi + 1)
        np.add.at(by_d, 2 * i - mm, w[row] * stats.binom.pmf(i, mm, g))
    return by_d, outside


def _reference_delta(epsilon: float, by_d: np.ndarray, outside: float, a: float) -> float:
    d = np.arange(len(by_d))
    mask = d * a > epsilon
    return float(np.sum(by_d[mask] * -np.expm1(epsilon - d[mask] * a))) + outside


@pytest.mark.parametrize("n, k, eps1", [(7, 3, 1.0), (60, 10, 0.4), (500, 4, 0.08),
                                         (3000, 2, 0.05)])
def test_the_log_space_sum_is_scipys_at_small_n(n: int, k: int, eps1: float) -> None:
    """Where the window holds all or nearly all of the support, δ is the scipy sum's to
    the margin that bounds the log terms' rounding (never below it), and so is ε."""
    from fedlabels.privacy.kary_exact import kary_loss

    p = _p(eps1, k)
    by_d, outside = _scipy_window_losses(n, p, k)
    a = kary_loss(p, k)
    for epsilon in (0.0, 0.3, 1.0, 2.5):
        want = _reference_delta(epsilon, by_d, outside, a)
        got = kary_delta_for_epsilon(epsilon, n, p, k)
        assert want * (1 - 1e-14) <= got <= want * (1 + 1e-9) + 1e-15, (n, k, epsilon)
    want_eps = kary_epsilon_exact.__wrapped__(n, p, k, DELTA)
    assert want_eps == pytest.approx(kary_epsilon_exact(n, p, k, DELTA), rel=1e-9)


def test_at_n_1e5_the_bound_is_above_scipys_and_takes_a_fraction_of_its_cpu() -> None:
    """At R · s*_labels = 10⁵ (the window a small part of the support) δ stays an upper
    bound of the scipy sum with its exact mass outside (Chernoff's bound of that mass and
    the rounding margin only raise it), within 1e-6 of it; ε within 1e-6 too. The scipy
    pmf took about 0.2 CPU-s per noise parameter (a calibration tries ~30): the log-space
    sum takes under half of it, measured in turn in this process."""
    import time

    from fedlabels.privacy.kary_exact import _kary_losses, kary_loss

    n, k = 100_000, 10
    p = _p(8.0 * 4 / n, k)
    _scipy_window_losses(50, p, k)  # imports (scipy.stats: ~1 CPU-s) outside the timings
    _kary_losses(50, p, k)
    start = time.process_time()
    by_d, outside = _scipy_window_losses(n, p, k)
    before = time.process_time() - start
    _kary_losses.cache_clear()
    start = time.process_time()
    _kary_losses(n, p, k)
    now = time.process_time() - start
    a = kary_loss(p, k)
    for epsilon in (0.0, 0.05, 0.1, 0.2):
        want = _reference_delta(epsilon, by_d, outside, a)
        got = kary_delta_for_epsilon(epsilon, n, p, k)
        assert want <= got <= want * (1 + 1e-6), epsilon
    eps = kary_epsilon_exact(n, p, k, DELTA)
    assert _reference_delta(eps, by_d, outside, a) <= DELTA
    assert now < 0.5 * before, (now, before)


def _label_events(kind: str) -> list[Any]:
    from fedlabels.privacy.events import XorEvent
    from fedlabels.privacy.mechanisms import flip_probability

    if kind == "xor":
        return [XorEvent(0.8, 16, flip_probability(0.8, 16), 400)] * 6
    k = 2 if kind == "kary2" else 10
    return [KaryRREvent(0.9, 30, 0.03, k, 100)] * 4


@pytest.mark.parametrize("kind", ["xor", "kary2", "kary10"])
def test_the_label_budget_check_admits_up_to_the_accounted_epsilon_and_no_further(
        kind: str) -> None:
    """label_tally_within decides as the ε account_labels reports (here the exact
    accountant's): within a hair above it, refused a hair below (binary randomized response
    at flip probability p/2 for dp-accounting's noise parameter p)."""
    events = _label_events(kind)
    spent = account_labels(events, DELTA)
    assert spent.accountant == "exact"
    tally = LabelTally.of(events)
    assert label_tally_within(tally, spent.epsilon * (1 + 1e-6), DELTA)
    assert not label_tally_within(tally, spent.epsilon * (1 - 1e-6), DELTA)


def test_a_delta_is_never_above_one():
    """The 64-ulp rounding margin on the loss terms lifted δ(0) of 200,000 responses to
    1.00000004, not a probability (still an upper bound: δ ≤ 1 always holds)."""
    got = kary_delta_for_epsilon(0.0, 200_000, 0.9, 10)
    assert 0.99 < got <= 1.0
