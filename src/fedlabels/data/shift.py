"""A public unlabeled set U from a shifted distribution (``--unlabeled-shift S``), measured.

**Definition (label shift, also called prior shift).** Let ``p`` be the class proportions of
the labelled pool U is drawn from (everything but the test set) and ``H`` a seeded half of
the classes (``floor(C/2)``, at least one). U's class proportions are

    q = (1 - S) p + S u_H,        S in [0, 1],

where ``u_H`` is uniform over ``H``: a fraction S of U comes from half of the classes only,
the rest as before. Within a class, examples are drawn uniformly, so p(x | y) is unchanged and
only the label marginal moves (the shift the FedCT paper's Table 4 makes with a
Dirichlet-skewed U). ``TV(q, p) = S * TV(u_H, p)``: on balanced classes TV = S/2 exactly.
The test set and the private data are exactly those of S = 0 (only U changes); U is drawn
from the labelled rows that are neither, which must hold enough of each class. S = 0 is no
shift at all: U is the first |U| rows of the shuffled pool, as without the option.

**Measured** (:func:`measure_shift`), whatever S: the total-variation distance between the
label distributions of U and of the private data, and the feature shift that follows from
it, the mean absolute standardised mean difference over features,
``mean_j |mean_U(x_j) - mean_P(x_j)| / sd_P(x_j)`` (features constant in the private data
left out). Both go into the result's ``federation.unlabeled_shift``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.data.partition import largest_remainder


def check_shift(shift: Any) -> float:
    """``shift`` as a float in [0, 1], or a one-line error."""
    if isinstance(shift, bool) or not isinstance(shift, int | float | np.floating) or not (
            0.0 <= float(shift) <= 1.0):
        raise FedLabelsError(f"unlabeled_shift must be a number in [0, 1] (0: U drawn like the "
                             f"private data; 1: U only from half of the classes), got "
                             f"{shift!r}.")
    return float(shift)


def shifted_public(pool: np.ndarray, y: np.ndarray, n_unlabeled: int, n_private: int,
                   shift: float, n_classes: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, list[int]]:
    """U's rows and the favoured classes ``H``.

    ``pool`` is the shuffled labelled pool whose rows ``n_unlabeled .. n_unlabeled +
    n_private`` are the private data (exactly those of S = 0); U is drawn from the other
    rows, the first ones of each class in pool order (a uniform sample, the pool being
    shuffled). ``y`` holds the labels of all rows.
    """
    candidates = np.concatenate([pool[:n_unlabeled], pool[n_unlabeled + n_private:]])
    labels = y[candidates]
    available = np.bincount(labels, minlength=n_classes)
    favoured = np.sort(rng.permutation(n_classes)[: max(1, n_classes // 2)])
    target = (1.0 - shift) * np.bincount(y[pool], minlength=n_classes) / len(pool)
    target[favoured] += shift / len(favoured)
    want = largest_remainder(n_unlabeled, target)
    short = np.flatnonzero(want > available)
    if len(short):
        c = int(short[0])
        raise FedLabelsError(f"unlabeled_shift {shift:g} needs {want[c]} examples of class {c} "
                             f"in U, but the {len(candidates)} labelled rows that are neither "
                             f"private nor test hold {available[c]}; use a smaller --private "
                             "or --unlabeled, or a smaller shift.")
    # rank of each row among the candidates of its class (pool order), without a Python loop
    order = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(available)[:-1]])
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels)) - np.repeat(starts, available)
    return candidates[rank < want[labels]], [int(c) for c in favoured]


def label_tv(y_a: np.ndarray, y_b: np.ndarray, n_classes: int) -> float:
    """Total-variation distance between the empirical label distributions of two sets."""
    pa = np.bincount(y_a, minlength=n_classes) / max(1, len(y_a))
    pb = np.bincount(y_b, minlength=n_classes) / max(1, len(y_b))
    return float(0.5 * np.abs(pa - pb).sum())


#: rows of b (elements) above which feature_smd sums its moments a block of rows at a time
_BLOCK_ELEMENTS = 1 << 24


def _moments(blocks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations of the rows of ``blocks`` together, in float64,
    summed :data:`_BLOCK_ELEMENTS` at a time: no float64 or concatenated copy of them all
    (for large images that copy was 8 bytes a pixel, twice the float32 rows themselves)."""
    n = sum(len(b) for b in blocks)
    step = max(1, _BLOCK_ELEMENTS // max(1, blocks[0].shape[1]))
    pieces = [b[i:i + step] for b in blocks for i in range(0, len(b), step)]
    mean = sum(p.sum(axis=0, dtype=np.float64) for p in pieces) / n
    var = sum(np.square(p - mean).sum(axis=0) for p in pieces) / n
    return mean, np.sqrt(var)


def feature_smd(X_a: np.ndarray, X_b: np.ndarray | Sequence[np.ndarray]) -> float:
    """Mean over features of ``|mean_a - mean_b| / sd_b`` (features constant in b skipped);
    ``X_b`` may be given as blocks of rows (the clients' own), read in place when large."""
    blocks = [X_b] if isinstance(X_b, np.ndarray) else list(X_b)
    mean_a = X_a.mean(axis=0, dtype=np.float64)
    if sum(b.size for b in blocks) > _BLOCK_ELEMENTS:
        mean_b, sd_b = _moments(blocks)
    else:  # as always: small sets are summed at once (the same figures as before)
        X_b = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        mean_b = X_b.mean(axis=0, dtype=np.float64)
        sd_b = X_b.std(axis=0, dtype=np.float64)
    used = sd_b > 1e-12
    if not used.any():
        return 0.0
    return float(np.mean(np.abs(mean_a - mean_b)[used] / sd_b[used]))


def measure_shift(shift: float, X_public: np.ndarray,
                  X_private: np.ndarray | Sequence[np.ndarray],
                  y_public: np.ndarray | None, y_private: np.ndarray | None, n_classes: int,
                  favoured: list[int] | None = None) -> dict[str, Any]:
    """The result's ``unlabeled_shift`` record: S, the favoured classes and the measures."""
    record: dict[str, Any] = {"S": shift}
    if favoured is not None:
        record["favoured_classes"] = favoured
    if y_public is not None and y_private is not None and n_classes:
        record["label_tv"] = round(label_tv(y_public, y_private, n_classes), 6)
    if X_public.ndim == 2:  # numeric features (text has none to compare)
        record["feature_smd"] = round(feature_smd(X_public, X_private), 6)
    return record
