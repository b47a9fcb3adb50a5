"""Bisection on a monotone predicate, shared by the accountants' inversions and calibrations."""

from __future__ import annotations

from collections.abc import Callable

from fedlabels.core.errors import FedLabelsError


def bisect_monotone(go_up: Callable[[float], bool], lo: float, hi: float, *,
                    rel_tol: float, max_iter: int, tol_floor: float = 0.0
                    ) -> tuple[float, float]:
    """Narrow ``[lo, hi]`` around the point where ``go_up`` turns from True to False.

    Each step moves ``lo`` to the midpoint if ``go_up(mid)``, else ``hi``; it stops after
    ``max_iter`` steps or once ``hi - lo <= rel_tol * max(tol_floor, hi)``. Returns the final
    ``(lo, hi)``, so callers pick the side their guarantee needs.
    """
    for _ in range(max_iter):
        mid = 0.5 * (lo + hi)
        if go_up(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= rel_tol * max(tol_floor, hi):
            break
    return lo, hi


def smallest_noise(eps: Callable[[float], float], target: float, lo: float, hi: float,
                   over: str) -> float:
    """The smallest noise multiplier σ (to 1e-6 relative, rounded up) with ``eps(σ)`` (ε
    of the run, decreasing in σ) at most ``target``: ``lo`` where it is enough already
    (more noise than needed is still DP); else ``hi`` doubled until it is (past 1e6 an
    error naming ``over``, what the ε is over), then bisected."""
    if eps(lo) <= target:
        return lo
    while eps(hi) > target:
        lo, hi = hi, 2.0 * hi
        if hi > 1e6:
            raise FedLabelsError(f"no noise multiplier up to 1e6 reaches ε = {target} over "
                                 f"{over}; raise the target.")
    _, hi = bisect_monotone(lambda s: eps(s) > target, lo, hi, rel_tol=1e-6, max_iter=100)
    return hi
