"""A run's privacy budget: the target (ε, δ), checked before every release.

A DP method given a total target (``--epsilon``) calibrates its noise to the planned number
of releases (rounds or queries). That alone is not a guarantee: a plan that changes (more
rounds than calibrated for, a second release) would spend more. The server therefore keeps a
:class:`Budget` and calls :meth:`Budget.check_plan` before round 1 (the run refuses to start
if the plan already exceeds the target) and :meth:`Budget.charge` before each release (the
run stops before the release that would exceed it). ``spent_after(k)`` is the ε of ``k``
releases under the accountant the noise was calibrated with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.events import Sensitivity

#: relative slack for the numerical error of a calibration (bisection / root finding)
REL_TOL = 1e-6


@dataclass
class Budget:
    """Target (ε, δ) of a whole run, and the releases charged against it so far."""

    epsilon: float
    delta: float
    unit: str  # "round" or "query": what one release is
    planned: int
    spent_after: Callable[[int], float]
    accountant: str
    released: int = 0

    def _refuse(self, n: int, after: float, what: str) -> FedLabelsError:
        spent = self.spent_after(self.released) if self.released else 0.0
        return FedLabelsError(
            f"privacy budget exceeded: {what} {n} {self.unit}(s) would spend ε = {after:.6g} "
            f"(δ = {self.delta:g}, {self.accountant} accountant) > target ε = "
            f"{self.epsilon:.6g}; spent so far ε = {spent:.6g} over {self.released} "
            f"{self.unit}(s) of {self.planned} planned. Refusing.")

    def within(self, n_total: int) -> tuple[bool, float]:
        after = self.spent_after(n_total)
        return after <= self.epsilon * (1.0 + REL_TOL), after

    def check_plan(self, planned: int | None = None) -> None:
        """Refuse to start when the planned releases would already exceed the target."""
        n = self.planned if planned is None else planned
        ok, after = self.within(n)
        if not ok:
            raise self._refuse(n, after, "the plan of")

    def charge(self, n: int = 1) -> float:
        """Before releasing ``n`` more units: raise if the total would exceed the target."""
        ok, after = self.within(self.released + n)
        if not ok:
            raise self._refuse(n, after, "releasing")
        self.released += n
        return after

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "unit": self.unit,
                "planned": self.planned, "released": self.released,
                "accountant": self.accountant,
                "enforced": "the server checks spent + next release <= target before every "
                            "release and stops the run otherwise"}


def label_round_budget(target: float, delta: float, rounds: int, mechanism: str,
                       sensitivity: Sensitivity) -> tuple[float, Budget]:
    """DP-FedCT's per-round ε calibrated from a total (ε, δ) over ``rounds``, and its budget.

    xor: the largest pure per-round ε whose exact composition stays within the target;
    kary: basic composition, ε / rounds per round (pure, δ = 0)."""
    from fedlabels.privacy.accounting import calibrate_xor_round_epsilon, rr_epsilon_exact
    from fedlabels.privacy.mechanisms import flip_probability

    if mechanism == "xor":
        bits = sensitivity.bits
        eps_round = calibrate_xor_round_epsilon(target, delta, rounds, bits)
        f = flip_probability(eps_round, bits)
        return eps_round, Budget(target, delta, "round", rounds, lambda k: (
            rr_epsilon_exact(k * bits, f, delta) if k else 0.0), "exact")
    eps_round = target / rounds
    return eps_round, Budget(target, delta, "round", rounds, lambda k: k * eps_round, "basic")
