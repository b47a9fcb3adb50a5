"""The XOR mechanism (bitwise randomized response), k-ary RR and the noisy-row consensus."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlabels.consensus import ABSTAIN
from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.mechanisms import (
    bit_count_consensus,
    debiased_bit_counts,
    flip_probability,
    kary_debiased_counts,
    kary_keep_probability,
    kary_release,
    kary_replace_probability,
    one_hot,
    pack_rows,
    unpack_rows,
    xor_epsilon,
    xor_release,
)


def _log_lik(released: np.ndarray, bits: np.ndarray, f: float) -> float:
    flips = np.count_nonzero(released != bits)
    return flips * math.log(f) + (released.size - flips) * math.log1p(-f)


def test_flip_probability_formula_and_limits() -> None:
    assert flip_probability(1.0, 2) == pytest.approx(1 / (1 + math.exp(0.5)))
    assert flip_probability(1.0, 2) == pytest.approx(0.3775, abs=1e-4)
    assert flip_probability(1e-9, 1) == pytest.approx(0.5, abs=1e-9)
    assert 0.0 < flip_probability(700.0, 1) < 1e-300  # the smallest ε per bit allows
    for eps, s in [(0.1, 1), (1.0, 2), (10.0, 4000), (500.0, 3)]:
        f = flip_probability(eps, s)
        assert 0.0 <= f < 0.5  # never anti-correlated (FedCT's xor_noise bug)
        if f > 0:
            assert xor_epsilon(f, s) == pytest.approx(eps, rel=1e-9)


def test_empirical_flip_rate_matches_f() -> None:
    rng = np.random.default_rng(0)
    f = flip_probability(1.0, 2)
    labels = rng.integers(0, 10, size=20_000)
    bits = one_hot(labels, 10)
    released = xor_release(bits, f, rng)
    n = bits.size
    rate = np.mean(released != bits)
    assert abs(rate - f) < 5 * math.sqrt(f * (1 - f) / n)  # 5 standard errors
    # flips are independent of the bit value: same rate on the 1s and on the 0s
    ones = bits == 1
    assert abs(np.mean(released[ones] == 0) - f) < 5 * math.sqrt(f * (1 - f) / ones.sum())
    assert abs(np.mean(released[~ones] == 1) - f) < 5 * math.sqrt(f * (1 - f) / (~ones).sum())


def test_privacy_loss_is_exactly_epsilon_for_neighbours() -> None:
    """Analytic: L and L' differ in one one-hot row (2 bits); at Y = L the ratio is e^ε."""
    eps, s = 1.0, 2
    f = flip_probability(eps, s)
    rng = np.random.default_rng(1)
    L = one_hot(rng.integers(0, 4, size=50), 4)
    L2 = L.copy()
    L2[7] = one_hot(np.array([(np.argmax(L[7]) + 1) % 4]), 4)[0]
    assert np.count_nonzero(L != L2) == s
    assert _log_lik(L, L, f) - _log_lik(L, L2, f) == pytest.approx(eps, abs=1e-12)
    for _ in range(20):  # and never more than ε for any output
        Y = xor_release(L, f, rng)
        assert abs(_log_lik(Y, L, f) - _log_lik(Y, L2, f)) <= eps + 1e-12


def test_monte_carlo_log_likelihood_ratio_within_epsilon() -> None:
    """Sample the mechanism on neighbouring one-hot rows; the empirical log ratio of the output
    frequencies stays within ε (plus sampling tolerance) and reaches it at Y = L."""
    eps, s, draws = 1.0, 2, 200_000
    f = flip_probability(eps, s)
    rng = np.random.default_rng(2)
    L = np.array([[1, 0, 0, 0]], dtype=np.uint8)
    L2 = np.array([[0, 1, 0, 0]], dtype=np.uint8)
    weights = 1 << np.arange(4)[::-1]
    out1 = xor_release(np.repeat(L, draws, 0), f, rng) @ weights
    out2 = xor_release(np.repeat(L2, draws, 0), f, rng) @ weights
    c1 = np.bincount(out1, minlength=16)
    c2 = np.bincount(out2, minlength=16)
    ok = (c1 >= 2000) & (c2 >= 2000)  # well-populated outputs only
    assert ok.sum() >= 8
    llr = np.log(c1[ok] / c2[ok])
    # standard error of a log-ratio of counts ~ sqrt(1/c1 + 1/c2) <= 0.032: allow 4 of them
    assert np.max(np.abs(llr)) <= eps + 0.13
    y_equal_l = int(L[0] @ weights)
    assert np.log(c1[y_equal_l] / c2[y_equal_l]) == pytest.approx(eps, abs=0.13)


def test_pack_rows_roundtrip_and_payload_size() -> None:
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2, size=(37, 10)).astype(np.uint8)
    packed = pack_rows(bits)
    assert packed.dtype == np.uint8 and packed.size == math.ceil(37 * 10 / 8)
    np.testing.assert_array_equal(unpack_rows(packed, 37, 10), bits)


def test_bit_count_consensus_recovers_majority_at_low_noise() -> None:
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 5, size=2000)
    votes = np.stack([np.where(rng.random(2000) < 0.8, truth, rng.integers(0, 5, 2000))
                      for _ in range(7)])
    f = flip_probability(20.0, 2)
    noisy = np.stack([xor_release(one_hot(v, 5), f, rng) for v in votes])
    labels = bit_count_consensus(noisy, f, rng)
    assert np.mean(labels == truth) > 0.97


def test_consensus_has_no_class0_bias_on_empty_rows() -> None:
    """All-zero (or tied) rows: a random tie-break, not "first 1 in the row" -> class 0."""
    rng = np.random.default_rng(5)
    noisy = np.zeros((3, 5000, 4), dtype=np.uint8)
    labels = bit_count_consensus(noisy, 0.2, rng)
    share = np.bincount(labels, minlength=4) / labels.size
    assert np.all(np.abs(share - 0.25) < 0.03)


def test_debiased_counts_are_unbiased() -> None:
    rng = np.random.default_rng(6)
    m, n, c = 5, 20_000, 3
    true = rng.integers(0, c, size=(m, n))
    f = 0.3
    noisy = np.stack([xor_release(one_hot(v, c), f, rng) for v in true])
    est = debiased_bit_counts(noisy, f)
    exact = one_hot(true.ravel(), c).reshape(m, n, c).sum(axis=0)
    # per-entry estimates are noisy, their mean error is ~0 (sd of the mean ~ 0.01)
    assert np.abs((est - exact).mean(axis=0)).max() < 0.05
    assert est.sum(axis=1).mean() == pytest.approx(m, abs=0.05)


def test_consensus_quorum_abstains_on_split_votes() -> None:
    rng = np.random.default_rng(7)
    f = flip_probability(40.0, 2)  # tiny noise
    split = one_hot(np.array([0, 1, 2, 0, 1]), 3)[:, None, :]  # 5 clients, one row, 2/2/1
    agree = one_hot(np.array([2] * 5), 3)[:, None, :]
    noisy = np.concatenate([split, agree], axis=1)
    labels = bit_count_consensus(noisy, f, rng, quorum=0.8)
    assert labels[0] == ABSTAIN and labels[1] == 2


def test_kary_rr_keep_rate_and_uniform_replacement() -> None:
    rng = np.random.default_rng(8)
    eps1, c, n = 1.0, 10, 400_000
    keep = kary_keep_probability(eps1, c)
    assert keep == pytest.approx(math.e / (math.e + 9))
    labels = np.full(n, 3)
    out = kary_release(labels, eps1, c, rng)
    assert abs(np.mean(out == 3) - keep) < 5 * math.sqrt(keep * (1 - keep) / n)
    others = np.bincount(out[out != 3], minlength=c)[[i for i in range(c) if i != 3]]
    assert np.all(np.abs(others / others.sum() - 1 / 9) < 0.01)
    # the likelihood ratio between inputs 3 and 4 at output 3 is e^{ε₁}
    out4 = kary_release(np.full(n, 4), eps1, c, rng)
    ratio = np.mean(out == 3) / np.mean(out4 == 3)
    assert math.log(ratio) == pytest.approx(eps1, abs=0.05)
    votes = np.stack([kary_release(np.full(n // 10, 2), eps1, c, rng) for _ in range(3)])
    est = kary_debiased_counts(votes, eps1, c).mean(axis=0)
    assert est[2] == pytest.approx(3.0, abs=0.05) and abs(est[5]) < 0.05


def test_noise_beyond_float64_is_refused_not_dropped() -> None:
    """An ε per bit or per label above 700 makes the noise probability underflow float64:
    refused (it used to give a flip probability of 0 and a crash in the accountant, and a
    k-ary keep probability of exactly 1: labels released unperturbed under a finite ε)."""
    with pytest.raises(FedLabelsError, match=r"without noise.*one round's at most 1400"):
        flip_probability(1402.0, 2)
    with pytest.raises(FedLabelsError, match=r"per label is above 700.*without noise"):
        kary_keep_probability(701.0, 3)
    with pytest.raises(FedLabelsError, match="without noise"):
        kary_release(np.zeros(4, dtype=int), 701.0, 3, np.random.default_rng(0))
    assert kary_replace_probability(700.0, 3) > 0.0  # though keep rounds to 1.0


class _Draws:
    """A generator whose uniform draws are all ``u`` (the integer draws: 1)."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.full(shape, self.u)

    def integers(self, low: int, high: int, size: tuple[int, ...]) -> np.ndarray:
        return np.full(size, low)


@pytest.mark.parametrize("eps1", [1.0, 40.0, 600.0])
def test_a_tiny_noise_probability_is_drawn_rounded_up_never_to_zero(eps1: float) -> None:
    """``rng.random()`` returns multiples of 2^-53, each with probability 2^-53. Noise is drawn
    at the low end (u < p), so the draw u = 0 always adds it and the probability realised is
    p rounded up: at ε₁ = 40 (replacement e^-40, keep rounds to 1.0) it used to be 0."""
    labels = np.arange(6) % 3
    replaced = kary_release(labels, eps1, 3, _Draws(0.0))
    np.testing.assert_array_equal(replaced, (labels + 1) % 3)
    np.testing.assert_array_equal(kary_release(labels, eps1, 3, _Draws(1.0 - 2.0**-53)),
                                  labels)  # the largest draw keeps: p < 1 - 2^-53
    bits = one_hot(labels, 3)
    f = flip_probability(eps1, 1)
    np.testing.assert_array_equal(xor_release(bits, f, _Draws(0.0)), 1 - bits)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon_rejected(eps: float) -> None:
    with pytest.raises(FedLabelsError, match="epsilon"):
        flip_probability(eps, 2)
    with pytest.raises(FedLabelsError, match="epsilon"):
        kary_keep_probability(eps, 3)


def test_bad_sensitivity_rejected_by_mechanism() -> None:
    with pytest.raises(FedLabelsError, match="sensitivity"):
        flip_probability(1.0, 0)


def test_consensus_tie_break_never_overturns_a_strict_lead() -> None:
    """The jitter only breaks ties: where one class has strictly the most raw bits, the
    consensus is that class (brute force over the raw counts), at any flip probability."""
    rng = np.random.default_rng(11)
    noisy = (rng.random((5, 20_000, 4)) < 0.5).astype(np.uint8)
    raw = noisy.sum(axis=0)
    top = raw.max(axis=1, keepdims=True)
    unique = (raw == top).sum(axis=1) == 1
    for f in (0.05, 0.3, 0.45):
        labels = bit_count_consensus(noisy, f, rng)
        np.testing.assert_array_equal(labels[unique], raw[unique].argmax(axis=1))
        assert np.all(raw[np.arange(len(labels)), labels] == top[:, 0])  # ties: a top class


def test_consensus_quorum_keeps_a_share_exactly_at_the_quorum() -> None:
    """At a negligible flip probability the quorum is the plain qualified majority's (a top
    share equal to the quorum is kept, one below it abstains)."""
    from fedlabels.consensus import qualified_majority

    rng = np.random.default_rng(12)
    votes = np.array([[0, 0, 1, 2], [0, 1, 1, 0], [0, 0, 1, 1], [2, 2, 2, 2]])  # (m, n)
    f = flip_probability(60.0, 2)  # ~1e-13: the debiased counts are the raw ones
    noisy = np.stack([one_hot(v, 3) for v in votes])
    for quorum in (0.75, 0.5):
        expected = qualified_majority(votes, 3, quorum)
        labels = bit_count_consensus(noisy, f, rng, quorum=quorum)
        np.testing.assert_array_equal(labels[expected != ABSTAIN], expected[expected != ABSTAIN])
        assert np.all(labels[expected == ABSTAIN] == ABSTAIN)
