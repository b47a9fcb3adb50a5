"""The empirical Hamming sensitivity of a client's hard labels on U, by retraining.

As in the FedCT paper's experiments: retrain on neighbouring datasets (a record removed, and
a record's label replaced) and take the maximum distance, at least 2 bits. A sample maximum,
hence an *estimate* (a lower bound on the true sensitivity of this learner on this data),
not a guarantee. The bounds that need no training are in :mod:`fedlabels.privacy.sensitivity`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import clone_fresh_learner
from fedlabels.privacy.events import Sensitivity

RELATIONS = ("remove", "replace", "both")
#: an empirical estimate is never below one changed label (2 bits)
FLOOR_BITS = 2


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
