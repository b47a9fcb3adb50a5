"""Exact duplicate texts shared by the test set and the training data.

A random row split puts copies of one text on both sides: a test text that a client holds
(privately or in U) is scored as unseen, and the test accuracy is inflated by every such
copy a model has memorised. The count is recorded in the federation's ``info``
(``test_texts_seen``) and a warning names it once it reaches :data:`WARN_SHARE` of the test
set; deduplicating the table first is the user's call (it is their data).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import numpy as np

from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

#: share of the test texts seen in training at which a warning is given
WARN_SHARE = 0.01


def test_texts_seen(X_test: np.ndarray, seen: Iterable[np.ndarray], column: str = "text") -> int:
    """Number of test texts that occur verbatim among the ``seen`` texts (private and U);
    warns when they are at least :data:`WARN_SHARE` of the test set (``column``: the texts'
    column, named in the advice)."""
    known: set[str] = set()
    for texts in seen:
        known.update(str(t) for t in texts)
    n = sum(str(t) in known for t in X_test)
    if len(X_test) and n >= WARN_SHARE * len(X_test):
        warnings.warn(FedLabelsWarning(
            f"{n} of the {len(X_test)} test texts ({n / len(X_test):.1%}) also occur verbatim "
            "in the clients' private texts or in U, so the test accuracy counts them as unseen "
            "and is inflated; drop duplicate texts from the table first (pandas: "
            f"df.drop_duplicates(subset={column!r}))."), stacklevel=user_stacklevel())
    return n
