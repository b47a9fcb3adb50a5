"""Prop. 1 of Abourayya et al.: the convergence bound of FedCT with a majority vote.

If every client's training accuracy on U grows as a_t >= 1 - c/t, then from a round t0 with
a_t0 >= 1/2 (i.e. t0 >= 2c) the consensus stops changing with probability at least 1 - δ,

    δ <= |U| (4c)^{m/2} ζ(m/2, t0 + 1),

ζ(x, q) the Hurwitz zeta function (a Chernoff bound per example and round, a union bound
over U, a sum over rounds t > t0).

Reproducing the values quoted in the paper (001_..., after Prop. 1: "δ = 0.9962 for c = 1,
but δ = 0.7868 for c = 10", m = 5, Fig. 2 for |U| = 10^4) — see :func:`paper_figure_value`
and docs/privacy.md: they are **1 - (4c)^{m/2} ζ(m/2, t0 + 1) at t0 = 1000 without the
factor |U|**, i.e. a convergence probability, not δ; 0.7868 is c = 10, and 0.9962 is c = 2
(c = 1 gives 0.9993 at t0 = 1000, and 0.9962 only at t0 ≈ 315). With the factor |U| = 10^4
the bound at t0 = 1000 is 6.74 (c = 1) and 2,131.7 (c = 10): vacuous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import zeta

from fedlabels.core.errors import FedLabelsError


@dataclass(frozen=True)
class ConvergenceBound:
    """The Prop. 1 bound and what it means."""

    clients: int
    n_unlabeled: int
    c: float
    t0: int
    delta: float  # |U| (4c)^{m/2} ζ(m/2, t0 + 1)

    @property
    def vacuous(self) -> bool:
        return self.delta >= 1.0

    @property
    def convergence_probability(self) -> float:
        """The guaranteed probability 1 - δ (0 when the bound is vacuous)."""
        return max(0.0, 1.0 - self.delta)


def _check(clients: int, n_unlabeled: int, c: float, t0: int) -> None:
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 3:
        raise FedLabelsError(f"Prop. 1 needs m >= 3 clients, got {clients!r}.")
    if isinstance(n_unlabeled, bool) or not isinstance(n_unlabeled, int) or n_unlabeled < 1:
        raise FedLabelsError(f"|U| must be an integer >= 1, got {n_unlabeled!r}.")
    if not isinstance(c, int | float) or isinstance(c, bool) or not math.isfinite(c) or c <= 0:
        raise FedLabelsError(f"c must be a finite number > 0 (a_t >= 1 - c/t), got {c!r}.")
    if isinstance(t0, bool) or not isinstance(t0, int) or t0 < 1:
        raise FedLabelsError(f"t0 must be an integer >= 1, got {t0!r}.")
    if t0 < 2 * c:
        raise FedLabelsError(f"t0 = {t0} < 2c = {2 * c:g}: Prop. 1 needs a_t0 = 1 - c/t0 >= "
                             "1/2, i.e. t0 >= 2c.")


def convergence_bound(clients: int, n_unlabeled: int, c: float, t0: int) -> ConvergenceBound:
    """δ <= |U| (4c)^{m/2} ζ(m/2, t0 + 1) (Prop. 1), with scipy's Hurwitz zeta."""
    _check(clients, n_unlabeled, c, t0)
    delta = _delta(n_unlabeled, c, clients / 2.0, t0 + 1)
    return ConvergenceBound(clients, n_unlabeled, float(c), t0, delta)


def paper_figure_value(clients: int, c: float, t0: int) -> float:
    """What the paper's quoted numbers are: 1 - (4c)^{m/2} ζ(m/2, t0 + 1), no |U| factor.

    (``paper_figure_value(5, 10, 1000)`` = 0.7868 and ``paper_figure_value(5, 2, 1000)`` =
    0.9962; see the module docstring.) Not a bound we endorse: it drops the union bound.
    """
    _check(clients, 1, c, t0)
    return 1.0 - _delta(1, c, clients / 2.0, t0 + 1)


def _delta(n: int, c: float, s: float, q: int) -> float:
    """n (4c)^s ζ(s, q); where (4c)^s is beyond float64 (thousands of clients), the bound
    n (4c/q)^s (1 + q/(s-1)) >= it (q^s ζ(s, q) = Σ_k (q/(q+k))^s <= 1 + q/(s-1)), in logs."""
    try:
        return n * (4.0 * c) ** s * float(zeta(s, q))
    except OverflowError:
        log = math.log(n) + s * math.log(4.0 * c / q) + math.log1p(q / (s - 1.0))
        return math.exp(log) if log < 700.0 else math.inf
