"""Two of fedlabels' own costs in a run, before and after, side by side in one process.

* ``digest``: the fingerprint of a torch classifier's weights, which every evaluation of a
  client computes (600 calls in a 2-round run of 200 clients): SHA-256 of ``get_weights()``'s
  flat vector ("before") against :func:`fedlabels.method.base._weights_digest`, the same
  digest of the parameters where they lie ("after"); the default MLP (512-512) on 64
  features and 10 classes (digits').
* ``distributions``: the distribution of a library installed under another name
  (``xgboost`` as ``xgboost-cpu``), which provenance looks up once a run:
  ``importlib.metadata.packages_distributions()`` ("before") against
  :func:`fedlabels.core.provenance._distributions_of` ("after").

Each arm runs ``--reps`` blocks alternately; CPU time is ``time.process_time`` of this
process, so the ratio holds on a loaded machine better than wall-clock time. Both arms'
outputs are checked equal first.

    python benchmarks/own_costs.py --reps 5
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

import numpy as np


def _side_by_side(before: Callable[[], Any], after: Callable[[], Any], calls: int,
                  reps: int) -> tuple[float, float]:
    """Mean CPU seconds per call of each arm, their blocks alternating."""
    assert before() == after()
    spent = [0.0, 0.0]
    for _ in range(reps):
        for arm, fn in enumerate((before, after)):
            start = time.process_time()
            for _ in range(calls):
                fn()
            spent[arm] += time.process_time() - start
    return spent[0] / (calls * reps), spent[1] / (calls * reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    from fedlabels.core.provenance import _distributions_of
    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.method.base import _weights_digest

    mlp = TorchMLPClassifier(random_state=0).initialise(64, 10)
    rows = {
        "digest": _side_by_side(
            lambda: hashlib.sha256(np.ascontiguousarray(mlp.get_weights()).data).digest(),
            lambda: _weights_digest(mlp), 200, args.reps),
        "distributions": _side_by_side(
            lambda: metadata.packages_distributions().get("xgboost", []),
            lambda: _distributions_of("xgboost"), 3, args.reps),
    }
    for name, (before, after) in rows.items():
        print(f"{name:14s} before {before * 1e3:8.3f} ms  after {after * 1e3:8.3f} ms  "
              f"ratio {before / after:5.1f}")


if __name__ == "__main__":
    main()
