"""Noise mechanisms for hard labels: the XOR mechanism (bitwise randomized response on one-hot
rows) and k-ary randomized response, plus the server's consensus over noisy rows.

The XOR mechanism with independent bits is the special case Θ = logit(f)·I, Λ = 0 of Ji et
al.'s matrix-valued Bernoulli noise. Its ε is exact: for one-hot matrices L, L' differing in
at most s* bits, p(Y | L) / p(Y | L') <= ((1 - f) / f)^{s*}, with equality at Y = L, so
f = 1 / (1 + e^{ε/s*}) gives exactly ε-DP. The flip probability is data-independent.

A noise probability p is drawn as ``rng.random() < p``: ``random`` returns multiples of
2^-53, so the probability realised is p rounded *up* to one (more noise, never less), and a
tiny positive p is never lost. An ε whose noise probability is beyond float64's range
(e^-700 and below) is refused: the release would go out unperturbed under a finite ε.
"""

from __future__ import annotations

import math

import numpy as np

from fedlabels.consensus import ABSTAIN
from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.validation import check_epsilon


def flip_probability(epsilon: float, sensitivity_bits: int) -> float:
    """Per-bit flip probability f = 1 / (1 + exp(ε / s*)) of bitwise randomized response.

    Always in (0, 1/2): the output stays positively correlated with the input.
    """
    check_epsilon(epsilon)
    if sensitivity_bits < 1:
        raise FedLabelsError(f"sensitivity s* must be >= 1 bit, got {sensitivity_bits!r}.")
    x = epsilon / sensitivity_bits
    largest = MAX_NOISE_EXPONENT * sensitivity_bits
    check_noise_exponent(x, f"ε / s* = {epsilon:g} / {sensitivity_bits} bits", "bit flip",
                         f"a smaller ε (one round's at most {largest:g})")
    return 1.0 / (1.0 + math.exp(x))


#: the largest ε per bit or per label a release accepts: its noise probability, about e^-ε,
#: is then still a normal float64 (e^-700 ≈ 1e-304)
MAX_NOISE_EXPONENT = 700.0


def check_noise_exponent(x: float, what: str, noise: str, fix: str) -> None:
    """Refuse an ε per bit or per label above :data:`MAX_NOISE_EXPONENT`: its noise
    probability underflows float64, so the release would carry no noise at all."""
    if x > MAX_NOISE_EXPONENT:
        raise FedLabelsError(f"{what} = {x:.4g} per {noise.split()[0]} is above "
                             f"{MAX_NOISE_EXPONENT:g}: the {noise} probability e^-{x:.4g} is "
                             f"below what a float64 holds, so the labels would go out without "
                             f"noise; give {fix}.")


def xor_epsilon(flip_prob: float, sensitivity_bits: int) -> float:
    """ε = s* · ln((1 - f) / f): the inverse of :func:`flip_probability`."""
    if not 0.0 < flip_prob < 0.5:
        raise FedLabelsError(f"flip probability must lie in (0, 1/2), got {flip_prob!r}.")
    return sensitivity_bits * math.log((1.0 - flip_prob) / flip_prob)


def one_hot(labels: np.ndarray, n_classes: int) -> np.ndarray:
    """(n,) integer labels -> (n, C) uint8 one-hot matrix."""
    labels = np.asarray(labels, dtype=np.int64)
    out = np.zeros((labels.size, n_classes), dtype=np.uint8)
    out[np.arange(labels.size), labels] = 1
    return out


def xor_release(bits: np.ndarray, flip_prob: float, rng: np.random.Generator) -> np.ndarray:
    """Y = L ⊕ B with B_ij ~ Bernoulli(f) i.i.d.; ``bits`` is a {0,1} array of any shape."""
    bits = np.asarray(bits, dtype=np.uint8)
    noise = (rng.random(bits.shape) < flip_prob).astype(np.uint8)
    return np.bitwise_xor(bits, noise)


def pack_rows(bits: np.ndarray) -> np.ndarray:
    """Bit-pack an (n, C) {0,1} matrix: C bits per row, ceil(n·C / 8) bytes."""
    return np.packbits(np.asarray(bits, dtype=np.uint8).ravel())


def unpack_rows(packed: np.ndarray, n_rows: int, n_classes: int) -> np.ndarray:
    """Inverse of :func:`pack_rows`."""
    flat = np.unpackbits(np.asarray(packed, dtype=np.uint8), count=n_rows * n_classes)
    return flat.reshape(n_rows, n_classes)


def debiased_bit_counts(noisy: np.ndarray, flip_prob: float) -> np.ndarray:
    """Unbiased per-class vote counts from noisy one-hot rows of m clients.

    ``noisy`` has shape (m, n, C). E[bit] = f + (1 - 2f)·true_bit, so
    (count - m·f) / (1 - 2f) is unbiased for the true number of votes. Post-processing.
    """
    noisy = np.asarray(noisy)
    counts = noisy.sum(axis=0, dtype=np.float64)
    return (counts - noisy.shape[0] * flip_prob) / (1.0 - 2.0 * flip_prob)


def bit_count_consensus(noisy: np.ndarray, flip_prob: float, rng: np.random.Generator,
                        quorum: float | None = None) -> np.ndarray:
    """Consensus label per row from the clients' noisy one-hot rows (shape (m, n, C)).

    Sums the bits per class (debiased, see :func:`debiased_bit_counts`), takes the argmax
    with a seeded random tie-break (no bias towards class 0, unlike "first 1 in the row"),
    and, with a ``quorum``, abstains (:data:`~fedlabels.consensus.ABSTAIN`) where the
    estimated top vote share is below it.
    """
    counts = debiased_bit_counts(noisy, flip_prob)
    # raw counts are integers; the affine debiasing keeps their order, so a jitter smaller
    # than one debiased vote only breaks ties
    scale = 1.0 / (1.0 - 2.0 * flip_prob)
    jitter = rng.random(counts.shape) * 0.5 * scale
    labels = np.argmax(counts + jitter, axis=1)
    if quorum is not None:
        share = counts[np.arange(len(labels)), labels] / noisy.shape[0]
        labels = np.where(share >= quorum - 1e-12, labels, ABSTAIN)
    return labels


# ------------------------------------------------------------------ k-ary randomized response

def kary_keep_probability(epsilon_per_label: float, n_classes: int) -> float:
    """Probability e^{ε₁} / (e^{ε₁} + C - 1) that k-ary RR outputs the true label."""
    return 1.0 - kary_replace_probability(epsilon_per_label, n_classes)


def kary_replace_probability(epsilon_per_label: float, n_classes: int) -> float:
    """Probability (C - 1) / (e^{ε₁} + C - 1) that k-ary RR replaces the true label (by one of
    the other C - 1 classes), computed directly: 1 - keep would round a small one to 0."""
    check_epsilon(epsilon_per_label, "epsilon per label")
    if n_classes < 2:
        raise FedLabelsError(f"k-ary randomized response needs >= 2 classes, got {n_classes}.")
    check_noise_exponent(epsilon_per_label, "ε₁", "label replacement",
                         "a smaller ε (or one spread over more labels)")
    return (n_classes - 1) / (math.exp(epsilon_per_label) + n_classes - 1)


def kary_release(labels: np.ndarray, epsilon_per_label: float, n_classes: int,
                 rng: np.random.Generator) -> np.ndarray:
    """k-ary randomized response per label: keep, or one of the other C - 1 classes uniformly.

    ε₁-DP per label (likelihood ratio at most (1 - r) / (r / (C - 1)) = e^{ε₁}, r the
    replacement probability).
    """
    labels = np.asarray(labels, dtype=np.int64)
    replace = rng.random(labels.shape) < kary_replace_probability(epsilon_per_label, n_classes)
    offset = rng.integers(1, n_classes, size=labels.shape)
    return np.where(replace, (labels + offset) % n_classes, labels)


def kary_debiased_counts(noisy_votes: np.ndarray, epsilon_per_label: float,
                         n_classes: int) -> np.ndarray:
    """Unbiased per-class vote counts from k-ary RR votes of shape (m, n).

    E[count_c] = r/(C-1)·m + (keep - r/(C-1))·true_c with r = 1 - keep.
    """
    from fedlabels.consensus import vote_counts

    keep = kary_keep_probability(epsilon_per_label, n_classes)
    other = (1.0 - keep) / (n_classes - 1)
    counts = vote_counts(noisy_votes, n_classes).astype(np.float64)
    return (counts - noisy_votes.shape[0] * other) / (keep - other)
