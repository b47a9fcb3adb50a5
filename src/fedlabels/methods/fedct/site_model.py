"""Which consensus labels a DP-FedCT site's own model trains on (``site_model=private``).

The site's own model is trained without DP and never sent, so what it learns from U is a
local choice that costs no privacy and changes nothing a client releases:

* ``pseudo_filter="agree"`` keeps a consensus label only where the site's own model predicts
  the same class: a DP consensus that its private data contradicts is not learnt;
* ``own_confidence=τ``: where no consensus label is left, the site's own model labels the
  example itself when its top class probability is at least τ (self-training on U).

With the defaults (``none``, no τ) the consensus is used as it came, as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.consensus import ABSTAIN


def shapes_consensus(opts: Any) -> bool:
    """Whether the options change the consensus labels the site's own model trains on."""
    return (getattr(opts, "site_model", "dp") == "private"
            and (opts.pseudo_filter != "none" or opts.own_confidence is not None))


def site_labels(consensus: np.ndarray, proba: np.ndarray, classes: np.ndarray,
                opts: Any) -> np.ndarray:
    """The labels of U the site's own model trains on (``ABSTAIN``: none), from the round's
    ``consensus`` and the site model's class probabilities ``proba`` on U (columns
    ``classes``)."""
    own = np.asarray(classes)[np.argmax(proba, axis=1)]
    out = np.array(consensus, dtype=np.int64)
    if opts.pseudo_filter == "agree":
        out[out != own] = ABSTAIN
    if opts.own_confidence is not None:
        fill = (out == ABSTAIN) & (proba.max(axis=1) >= opts.own_confidence)
        out[fill] = own[fill]
    return out
