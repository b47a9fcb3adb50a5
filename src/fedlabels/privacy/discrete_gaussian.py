"""The discrete Gaussian mechanism on a fixed-point encoding (Canonne, Kamath & Steinke 2020).

DP-FedAvg's ``noise="discrete"`` releases integers: each client divides its clipped update
by a grid γ and rounds every coordinate to the nearest integer (:func:`encode_update`), the
server sums the integer vectors exactly and adds a vector of independent discrete Gaussians
N_Z(0, (σΔ)²) (:func:`sample_discrete_gaussian`); the model update γ·(sum + noise)/(qM) is
post-processing of that integer vector. The output never carries a floating-point sample, so
the low-order-bit channel of floating-point noise (Mironov 2012) is closed.

Sensitivity: ‖x‖₂ ≤ S and |rint(x_i/γ) − x_i/γ| ≤ ½ give ‖rint(x/γ)‖₂ ≤ S/γ + √d/2 = Δ
(:func:`integer_sensitivity`); :func:`encode_update` checks it exactly in integers, so adding
or removing one client moves the integer sum by an integer vector of ℓ2 norm at most Δ.

Sampler: CKS20 Algorithm 3 (rejection from a discrete Laplace with scale t = ⌊σ⌋ + 1,
accepted with probability exp(−(|Y| − σ²/t)²/(2σ²))), vectorised: the rejected entries are
drawn again until none is left. The discrete Laplace is the difference of two geometric
variables with ratio e^{−1/t} (numpy's ``Generator.geometric``) and the acceptance a float64
comparison, so the output is integer-valued and its pmf is N_Z(0, σ²)'s up to the float64
rounding of those probabilities (not the exact rational arithmetic of CKS20's reference code).
"""

from __future__ import annotations

import math

import numpy as np

from fedlabels.core.errors import FedLabelsError

#: the default grid makes the rounding term √d/2 of Δ this fraction of S/γ (1 %)
DEFAULT_ROUNDING_SHARE = 0.01

#: every integer the server handles (per-coordinate sums plus noise) stays below this
INT64_HEADROOM = 2**62

#: noise beyond this many standard deviations has probability below e^{-800}
NOISE_TAIL_SDS = 40.0


def default_grid(clip: float, dim: int) -> float:
    """The grid γ = 2 · 1 % · S/√d of a vector of ``dim`` d entries clipped to ℓ2 norm
    ``clip`` S: the rounding term √d/2 of Δ is 1 % of S/γ."""
    return 2.0 * DEFAULT_ROUNDING_SHARE * clip / math.sqrt(dim)


def integer_sensitivity(clip: float, grid: float, dim: int) -> float:
    """Δ = S/γ + √d/2: the ℓ2 bound of a client's integer vector rint(x/γ), ‖x‖₂ ≤ S, of
    ``dim`` d entries clipped to ``clip`` S and rounded to the ``grid`` γ."""
    return clip / grid + math.sqrt(dim) / 2.0


def coordinate_bound(clip: float, grid: float) -> int:
    """A bound on |rint(x_i/γ)| for ‖x‖₂ ≤ S (with a unit of slack for float rounding)."""
    return math.ceil(clip / grid) + 1


def payload_dtype(clip: float, grid: float) -> np.dtype:
    """The narrowest signed integer type that holds every coordinate of an encoded update."""
    bound = coordinate_bound(clip, grid)
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        if bound <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise FedLabelsError(f"grid {grid!r} is too fine for clip {clip!r}: S/γ = {clip / grid:.3g} "
                         "exceeds int64; use a coarser --grid.")


def check_headroom(clip: float, grid: float, dim: int, n_clients: int,
                   noise_multiplier: float) -> None:
    """Refuse a configuration whose integer sum plus noise could leave int64: every
    coordinate of the sum is at most n · (S/γ + 1) in magnitude and the noise below
    :data:`NOISE_TAIL_SDS` · σΔ but with probability e^{-800}."""
    sd = noise_multiplier * integer_sensitivity(clip, grid, dim)
    worst = n_clients * coordinate_bound(clip, grid) + NOISE_TAIL_SDS * sd
    if not worst < INT64_HEADROOM:
        raise FedLabelsError(f"discrete noise: the integer sum of {n_clients} clients' updates "
                             f"plus noise could reach {worst:.3g}, beyond int64's 2^62 headroom "
                             f"(grid {grid!r}, clip {clip!r}); use a coarser --grid.")


def squared_norm(z: np.ndarray) -> int:
    """‖z‖₂² of an integer vector, exactly (a Python int): int64 dot products on chunks short
    enough not to overflow, Python integers for any entry beyond 2^31 in magnitude."""
    flat = np.asarray(z).ravel()
    if flat.dtype.kind not in "iu":
        raise FedLabelsError(f"squared_norm takes integers, got {flat.dtype}.")
    if flat.size == 0:
        return 0
    limit = 2**31 - 1
    big = (flat > limit) | (flat < -limit)  # (no abs: it overflows at int64's minimum)
    out = sum(int(v) * int(v) for v in flat[big])
    small = flat[~big].astype(np.int64)
    if small.size:
        peak = int(max(small.max(), -small.min()))
        chunk = max(1, INT64_HEADROOM // max(1, peak * peak))
        out += sum(int(np.dot(small[i:i + chunk], small[i:i + chunk]))
                   for i in range(0, small.size, chunk))
    return out


def encode_update(update: np.ndarray, clip: float, grid: float) -> tuple[np.ndarray, float]:
    """The clipped update on the grid: (rint(clip(x)/γ) as :func:`payload_dtype`, ‖x‖₂).

    Nearest rounding is deterministic (no client randomness to secure) and moves each
    coordinate by at most ½, so ‖z‖₂ ≤ S/γ + √d/2 = Δ; the bound is checked exactly on the
    integers and, were float rounding of the clipping to push ‖z‖₂ past Δ, the update is
    shrunk (by 1 ppm, then doubling the step) and rounded again; zeros at worst.
    """
    x = np.asarray(update, dtype=np.float64).ravel()
    norm = float(np.linalg.norm(x))
    if not math.isfinite(norm):
        raise FedLabelsError("the client update is not finite; refusing to encode it.")
    if norm > clip:
        x = x * (clip / norm)
    limit = integer_sensitivity(clip, grid, x.size) ** 2
    dtype = payload_dtype(clip, grid)
    for k in range(64):
        z = np.rint(x / grid).astype(np.int64)
        if squared_norm(z) <= limit:  # int vs float: Python compares exactly
            return z.astype(dtype).reshape(np.shape(update)), norm
        x = x * (1.0 - min(0.5, 1e-6 * 2.0 ** k))  # 1 ppm, doubling: x reaches 0 at worst
    return np.zeros(np.shape(update), dtype=dtype), norm


def sample_discrete_gaussian(sigma: float, size: int,
                             rng: np.random.Generator) -> np.ndarray:
    """``size`` independent draws of N_Z(0, σ²) (int64), CKS20 Algorithm 3, vectorised."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise FedLabelsError(f"discrete Gaussian σ must be a finite number > 0, got {sigma!r}.")
    t = math.floor(sigma) + 1
    success = -math.expm1(-1.0 / t)  # 1 − e^{−1/t}: a geometric's success probability
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        n = todo.size
        y = rng.geometric(success, n) - rng.geometric(success, n)  # discrete Laplace(t)
        bias = np.abs(y) - sigma * sigma / t
        accept = rng.random(n) < np.exp(-bias * bias / (2.0 * sigma * sigma))
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out


__all__ = ["DEFAULT_ROUNDING_SHARE", "check_headroom", "coordinate_bound", "default_grid",
           "encode_update", "integer_sensitivity", "payload_dtype", "sample_discrete_gaussian",
           "squared_norm"]
