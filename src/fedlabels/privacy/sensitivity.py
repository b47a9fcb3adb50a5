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
* :func:`empirical_sensitivity` — as in the paper's experiments: retrain on neighbouring
  datasets (a record removed, and a record's label replaced) and take the maximum distance,
  at least 2 bits. A sample maximum, hence an *estimate* (a lower bound on the true
  sensitivity of this learner on this data), not a guarantee.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedlabels.errors import FedLabelsError
from fedlabels.privacy.events import RECORD_LEVEL, WHOLE_DATASET, Sensitivity
from fedlabels.privacy.validation import check_delta, check_sensitivity_bits, check_stability_rate

RELATIONS = ("remove", "replace", "both")
#: an empirical estimate is never below one changed label (2 bits)
FLOOR_BITS = 2


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


def _neighbour(X: np.ndarray, y: np.ndarray, i: int, relation: str, n_classes: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if relation == "remove":
        keep = np.ones(len(y), dtype=bool)
        keep[i] = False
        return X[keep], y[keep]
    y2 = y.copy()  # replace record i by (x_i, y') with a different, random label
    y2[i] = (y[i] + rng.integers(1, n_classes)) % n_classes
    return X, y2


def _fit_predict(learner: Any, X: np.ndarray, y: np.ndarray, X_public: np.ndarray,
                 steps: int | None) -> np.ndarray:
    from fedlabels.learners import clone_fresh_learner

    # same hyper-parameters and random_state: only the data differs
    model: Any = clone_fresh_learner(learner)
    if callable(getattr(model, "train_steps", None)) and steps is not None:
        model.train_steps(X, y, int(steps))
    else:
        model.fit(X, y)
    return np.asarray(model.predict(X_public)).astype(np.int64)


def empirical_sensitivity(learner: Any, X: np.ndarray, y: np.ndarray, X_public: np.ndarray,
                          n_classes: int, *, n_neighbours: int = 50,
                          relation: str = "both", seed: int = 0,
                          steps: int | None = None) -> Sensitivity:
    """Estimate s* by retraining on neighbouring datasets of ``n_neighbours`` records.

    The learner is cloned (same hyper-parameters and ``random_state``) and trained on D and on
    each D'_i for ``n_neighbours`` sampled records i: record i removed (``remove``), its label
    replaced by another class (``replace``), or both (``both``, the default: two neighbours
    per record), for ``steps`` steps if it is a torch learner and ``steps`` is given, else
    with ``fit``. The distance is the Hamming distance of the one-hot predictions on U:
    2 bits per changed label.

    Returns the maximum in bits, at least :data:`FLOOR_BITS`; ``details`` keeps every
    distance. A sample maximum underestimates the supremum the definition asks for: the
    result is not a guarantee.
    """
    if relation not in RELATIONS:
        raise FedLabelsError(f"neighbour relation must be one of {RELATIONS}, got "
                             f"{relation!r}.")
    if n_neighbours < 1 or n_neighbours > len(y):
        raise FedLabelsError(f"n_neighbours must lie in [1, {len(y)}] (the private records), "
                             f"got {n_neighbours}.")
    rng = np.random.default_rng(seed)
    base = _fit_predict(learner, X, y, X_public, steps)
    chosen = rng.choice(len(y), size=n_neighbours, replace=False)
    relations = ("remove", "replace") if relation == "both" else (relation,)
    changed: dict[str, list[int]] = {r: [] for r in relations}
    for i in chosen:  # one retraining per neighbour: the cost is the training, not this loop
        for rel in relations:
            X2, y2 = _neighbour(X, y, int(i), rel, n_classes, rng)
            changed[rel].append(int(np.count_nonzero(
                _fit_predict(learner, X2, y2, X_public, steps) != base)))
    every = [c for rel in relations for c in changed[rel]]
    labels = max(every)
    per_relation = ({f"changed_labels_{rel}": changed[rel] for rel in relations}
                    if relation == "both" else {})
    details = {
        "n_neighbours": n_neighbours, "relation": relation, "retrainings": len(every),
        "seed": seed, "learner": type(learner).__name__, "steps": steps,
        "changed_labels": every, **per_relation, "max_changed_labels": labels,
        "mean_changed_labels": float(np.mean(every)), "floor_bits": FLOOR_BITS,
        "note": "sample maximum over neighbours (at least 2 bits): an estimate, not a bound"}
    return Sensitivity(max(2 * labels, FLOOR_BITS), "empirical", len(X_public), formal=False,
                       details=details)


def sensitivity_guarantee(s: Sensitivity) -> dict[str, Any]:
    """What a release calibrated to ``s`` guarantees: ``guarantee``, ``neighbouring`` and,
    unless s* is the worst case, the assumption it is ``conditional_on``."""
    if s.source == "worst":
        return {"guarantee": "formal", "neighbouring": WHOLE_DATASET}
    d = s.details
    records = d.get("n_neighbours", d.get("neighbours"))
    how = {"empirical": f"empirical estimate (sample maximum, {d.get('relation')} neighbours "
                        f"of {records} records per client), not a bound",
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
