"""Bisection on a monotone predicate, shared by the accountants' inversions and calibrations."""

from __future__ import annotations

from collections.abc import Callable


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
