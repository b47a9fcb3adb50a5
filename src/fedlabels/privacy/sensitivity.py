"""The Hamming sensitivity s* of a client's hard labels on U, three ways.

s* is measured in **bits of the |U| x C one-hot matrix**, the unit the XOR mechanism is
calibrated in (the paper's s_f = ||f(D) ⊕ f(D')||_F^2). One changed hard label flips two bits
of its row, so ``bits = 2 * changed labels`` and the worst case is ``2|U|``.

* :func:`worst_case_sensitivity` — 2|U|: one record may change every label. Always valid.
* :func:`prop2_sensitivity` — Prop. 2 of Abourayya et al.: from an on-average-replace-one
  stability rate ε(n), a bound on the number of changed *labels* that holds with probability
  1 - δ over the data (Short's binomial quantile bound); doubled to bits here.
* :func:`empirical_sensitivity` — as in the paper's experiments: retrain on n neighbouring
  datasets and take the maximum distance. A sample maximum, hence an *estimate* (a lower
  bound on the true sensitivity of this learner on this data), not a guarantee.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from fedlabels.errors import FedLabelsError
from fedlabels.privacy.events import Sensitivity
from fedlabels.privacy.validation import check_delta, check_sensitivity_bits, check_stability_rate

RELATIONS = ("remove", "replace")


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
    """Prop. 2: ⌈nε + P·sqrt(nε(1 - ε)) + P²/3⌉ changed labels, P = Φ⁻¹(1 - δ), n = |U|.

    Short's (2023) upper bound on the 1 - δ quantile of Binomial(n, ε(n)), capped at n.
    """
    check_stability_rate(stability_rate)
    check_delta(delta)
    n, p = int(n_unlabeled), float(stability_rate)
    probit = float(stats.norm.ppf(1.0 - delta))
    value = n * p + probit * math.sqrt(n * p * (1.0 - p)) + probit ** 2 / 3.0
    return min(n, math.ceil(value))


def prop2_sensitivity(n_unlabeled: int, stability_rate: float, delta: float) -> Sensitivity:
    """s* from Prop. 2, in bits (2 x the label bound), capped at 2|U|.

    Caveats (stated in the result): Prop. 2 turns an *on-average* stability rate into a
    high-probability bound, so it holds with probability 1 - δ over the draw of the data
    (a "random DP" guarantee, Rubinstein & Aldà 2017), not for every pair of neighbours; and
    the rate ε(n) of the learner must be known (for neural networks it is not, in practice).
    """
    labels = prop2_label_bound(n_unlabeled, stability_rate, delta)
    return Sensitivity(2 * labels, "prop2", n_unlabeled, formal=False, details={
        "stability_rate": stability_rate, "confidence_delta": delta,
        "label_bound": labels,
        "holds": f"with probability {1 - delta:g} over the data (not for all neighbours)"})


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
    from sklearn.base import clone

    model = clone(learner)  # same hyper-parameters and random_state: only the data differs
    if callable(getattr(model, "train_steps", None)) and steps is not None:
        model.train_steps(X, y, int(steps))
    else:
        model.fit(X, y)
    return np.asarray(model.predict(X_public)).astype(np.int64)


def empirical_sensitivity(learner: Any, X: np.ndarray, y: np.ndarray, X_public: np.ndarray,
                          n_classes: int, *, n_neighbours: int = 10,
                          relation: str = "remove", seed: int = 0,
                          steps: int | None = None) -> Sensitivity:
    """Estimate s* by retraining on ``n_neighbours`` neighbouring datasets.

    The learner is cloned (same hyper-parameters and ``random_state``) and trained on D and on
    each D'_i (record i removed, or its label replaced by another class), for ``steps`` steps
    if it is a torch learner and ``steps`` is given, else with ``fit``. The distance is the
    Hamming distance of the one-hot predictions on U: 2 bits per changed label.

    Returns the maximum in bits; ``details`` keeps every distance. A sample maximum
    underestimates the supremum the definition asks for: the result is not a guarantee.
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
    changed = []
    for i in chosen:  # one retraining per neighbour: the cost is the training, not this loop
        X2, y2 = _neighbour(X, y, int(i), relation, n_classes, rng)
        changed.append(int(np.count_nonzero(_fit_predict(learner, X2, y2, X_public, steps)
                                            != base)))
    labels = max(changed)
    n_public = len(X_public)
    return Sensitivity(max(2 * labels, 1), "empirical", n_public, formal=False, details={
        "n_neighbours": n_neighbours, "relation": relation, "seed": seed,
        "learner": type(learner).__name__, "steps": steps,
        "changed_labels": changed, "max_changed_labels": labels,
        "mean_changed_labels": float(np.mean(changed)),
        "note": "sample maximum over neighbours: an estimate, not a bound"})


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
