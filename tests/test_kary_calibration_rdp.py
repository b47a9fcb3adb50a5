"""k-ary RR's calibration asks RDP only where the exact accountant does not decide: it took
the tightest of the two at every step of its search, computing RDP's curve afresh for each
step's noise; the decision min(exact, RDP) <= target is the same when the exact accountant's
within-check answers first, so the per-round ε is the same to the bit (oracle: the search
run on the former total, min of the two accountants' ε, through the same search code:
benchmarks/kary_calibration_rdp.py's ``before``)."""

from __future__ import annotations

import pytest

from conftest import load_benchmark
from fedlabels.privacy import accounting, mechanisms
from fedlabels.privacy.accounting import calibrate_kary_round_epsilon

#: the benchmark's former calibration (RDP at every step) is the oracle, at its δ
BENCHMARK = load_benchmark("kary_calibration_rdp")
DELTA = BENCHMARK.DELTA
GRID = [(4.0, 3, 37, 2), (1.0, 10, 10, 5), (8.0, 5, 40, 10), (2.0, 1, 25, 3),
        (8.0, 20, 50, 2), (0.5, 4, 12, 4)]


@pytest.mark.parametrize("total, rounds, labels, k", GRID)
def test_the_per_round_epsilon_is_the_former_to_the_bit(total: float, rounds: int,
                                                        labels: int, k: int) -> None:
    calibrate_kary_round_epsilon.cache_clear()
    assert calibrate_kary_round_epsilon(total, DELTA, rounds, labels, k) == \
        BENCHMARK.before(total, rounds, labels, k)


def test_rdp_is_computed_only_where_the_exact_accountant_is_above_the_target(
        monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[float] = []
    curves: list[float] = []
    probe, curve = mechanisms.kary_replace_probability, accounting._rr_rdp_curve

    def probed(eps: float, k: int) -> float:
        probes.append(eps)
        return probe(eps, k)

    def computed(p: float, buckets: int) -> object:
        curves.append(p)
        return curve.__wrapped__(p, buckets)  # type: ignore[attr-defined]

    monkeypatch.setattr(mechanisms, "kary_replace_probability", probed)
    monkeypatch.setattr(accounting, "_rr_rdp_curve", computed)
    accounting._rr_epsilon.cache_clear()
    calibrate_kary_round_epsilon.cache_clear()
    calibrate_kary_round_epsilon(4.0, DELTA, 3, 37, 2)
    assert 0 < len(curves) < len(probes)
