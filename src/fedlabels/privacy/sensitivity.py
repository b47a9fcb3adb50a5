"""The Hamming sensitivity s* of a client's hard labels on U, three ways.

s* is measured in **bits of the |U| x C one-hot matrix**, the unit the XOR mechanism is
calibrated in (the paper's s_f = ||f(D) ⊕ f(D')||_F^2). One changed hard label flips two bits
of its row, so ``bits = 2 * changed labels`` and the worst case is ``2|U|``.

* :func:`worst_case_sensitivity` — 2|U|: every label may change. Always valid, and for any
  two datasets of a client, so it protects the client's whole dataset (client-level under
  replacement), not just one record.
* :func:`prop2_sensitivity` — a **heuristic** after Prop. 2 of Abourayya et al.: from an
  on-average-replace-one stability rate ε(n), the 1 - δ quantile of Binomial(|U|, ε(n))
  (Short's bound), doubled to bits. Prop. 2 bounds an *expected* loss change, not the number
  of prediction changes on U, and gives no supremum over neighbours: this is not a bound.
* :func:`~fedlabels.methods.fedct.sensitivity.empirical_sensitivity` — as in the paper's
  experiments: retrain on neighbouring datasets and take the maximum distance. It trains
  learners, so it lives with DP-FedCT; an *estimate*, not a guarantee.
"""

from __future__ import annotations

import math
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.events import RECORD_LEVEL, WHOLE_DATASET, Sensitivity
from fedlabels.privacy.validation import check_delta, check_sensitivity_bits, check_stability_rate


def worst_case_sensitivity(n_unlabeled: int) -> Sensitivity:
    """s* = 2|U| bits: every label on U may change."""
    if n_unlabeled < 1:
        raise FedLabelsError(f"|U| must be >= 1, got {n_unlabeled}.")
    return Sensitivity(2 * n_unlabeled, "worst", n_unlabeled, formal=True,
                       details={"reason": "one record may change every label; 2 bits each"})


def given_sensitivity(bits: float, n_unlabeled: int, note: str = "") -> Sensitivity:
    """A user-supplied s* (bits), checked against (0, 2|U|]."""
    value = check_sensitivity_bits(bits, n_unlabeled)
    return Sensitivity(value, "given", n_unlabeled, formal=False,
                       details={"note": note or "supplied by the user; the guarantee holds "
                                "only if the true sensitivity is at most this"})


def prop2_label_bound(n_unlabeled: int, stability_rate: float, delta: float) -> int:
    """Prop. 2 heuristic: ⌈nε + P·sqrt(nε(1 - ε)) + P²/3⌉ labels, P = Φ⁻¹(1 - δ), n = |U|.

    Short's (2023) upper bound on the 1 - δ quantile of Binomial(n, ε(n)), capped at n: the
    number of changed labels *if* each label changed independently with probability ε(n),
    which Prop. 2's proof does not establish (a heuristic, not a sensitivity bound).
    """
    from scipy import stats  # lazily: importing fedlabels must not load scipy

    check_stability_rate(stability_rate)
    check_delta(delta)
    if n_unlabeled < 1:
        raise FedLabelsError(f"|U| must be >= 1, got {n_unlabeled}.")
    n, p = int(n_unlabeled), float(stability_rate)
    probit = float(stats.norm.ppf(1.0 - delta))
    value = n * p + probit * math.sqrt(n * p * (1.0 - p)) + probit ** 2 / 3.0
    return min(n, math.ceil(value))


def prop2_sensitivity(n_unlabeled: int, stability_rate: float, delta: float) -> Sensitivity:
    """The Prop. 2 heuristic s*, in bits (2 x its label count), capped at 2|U|.

    A heuristic, not a bound (stated in the result): Prop. 2 bounds an *expected* loss
    change under an on-average-replace-one stability rate, not prediction changes on U, and
    its proof gives no supremum over neighbouring datasets; at best the number could hold
    with probability 1 - δ over the data (a "random DP" reading, Rubinstein & Aldà 2017).
    The rate ε(n) of the learner must also be known (for neural networks it is not).
    """
    labels = prop2_label_bound(n_unlabeled, stability_rate, delta)
    return Sensitivity(2 * labels, "prop2", n_unlabeled, formal=False, details={
        "stability_rate": stability_rate, "confidence_delta": delta,
        "label_count": labels,
        "holds": "heuristic: Prop. 2 bounds an expected loss change, not prediction changes "
                 "on U, and gives no supremum over neighbours; not a bound"})


def sensitivity_guarantee(s: Sensitivity) -> dict[str, Any]:
    """What a release calibrated to ``s`` guarantees: ``guarantee``, ``neighbouring`` and,
    unless s* is the worst case, the assumption it is ``conditional_on``."""
    if s.source == "worst":
        return {"guarantee": "formal", "neighbouring": WHOLE_DATASET}
    d = s.details
    records = d.get("n_neighbours", d.get("neighbours"))
    how = {"empirical": f"empirical estimate (sample maximum, {d.get('relation')} neighbours "
                        f"of up to {records} records per client), not a bound",
           "prop2": f"Prop. 2 heuristic (stability rate {d.get('stability_rate')}), not a "
                    "bound",
           "given": f"given by the user ({d.get('note')})"}.get(s.source, s.source)
    return {"guarantee": "conditional", "neighbouring": RECORD_LEVEL,
            "conditional_on": f"s* = {s.bits} bits, {how}"}


def resolve_sensitivity(spec: Any, n_unlabeled: int, *, stability_rate: float | None = None,
                        delta: float | None = None, note: str = "") -> Sensitivity | None:
    """``worst`` / ``prop2`` / a number of bits -> :class:`Sensitivity`; ``empirical`` -> None
    (it needs the clients' data and is estimated in the protocol)."""
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key == "worst":
            return worst_case_sensitivity(n_unlabeled)
        if key == "empirical":
            return None
        if key == "prop2":
            if stability_rate is None or delta is None:
                raise FedLabelsError("sensitivity prop2 needs a stability rate and a "
                                     "confidence δ: --opt stability_rate=0.01 and "
                                     "--opt sensitivity_delta=1e-3 (or --delta).")
            return prop2_sensitivity(n_unlabeled, stability_rate, delta)
        try:
            spec = float(key)
        except ValueError:
            raise FedLabelsError(f"sensitivity must be empirical, prop2, worst or a number "
                                 f"of bits, got {spec!r}.") from None
    if isinstance(spec, bool) or not isinstance(spec, int | float):
        raise FedLabelsError(f"sensitivity must be empirical, prop2, worst or a number of "
                             f"bits, got {spec!r}.")
    return given_sensitivity(spec, n_unlabeled, note)
