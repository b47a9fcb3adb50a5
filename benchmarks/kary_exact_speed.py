"""CPU seconds of DP-FedCT kary's calibration by the exact k-ary accountant: this tree's
``privacy/kary_exact.py`` against an earlier one (``--before FILE``, e.g. from git), side by
side in one process, each run twice in turn from empty caches; and the two ε the exact
accountant gives at the calibrated per-round ε (docs/privacy.md, DP-FedCT's k-ary RR)::

    git show 2c16fa4:src/fedlabels/privacy/kary_exact.py > /tmp/kary_exact_before.py
    python benchmarks/kary_exact_speed.py --before /tmp/kary_exact_before.py
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from types import ModuleType

import fedlabels.privacy.accounting as accounting
import fedlabels.privacy.kary_exact as current
from fedlabels.privacy.accounting import calibrate_kary_round_epsilon

NAME = "fedlabels.privacy.kary_exact"


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("kary_exact_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clear(module: ModuleType) -> None:
    for name in dir(module):
        cache_clear = getattr(getattr(module, name), "cache_clear", None)
        if callable(cache_clear):
            cache_clear()


def calibrate(module: ModuleType, total: float, rounds: int, labels: int,
              k: int) -> tuple[float, float, float]:
    """(CPU-s, the per-round ε, the run's ε by ``module``) with ``module`` as the
    accountant the calibration imports."""
    clear(module)
    clear(accounting)  # the calibration and RDP's memoised values too
    sys.modules[NAME] = module
    try:
        start = time.process_time()
        eps_round = calibrate_kary_round_epsilon(total, 1e-5, rounds, labels, k)
        spent = time.process_time() - start
        p = k / (math.exp(eps_round / labels) + k - 1)
        return spent, eps_round, module.kary_epsilon_exact(rounds * labels, p, k, 1e-5)
    finally:
        sys.modules[NAME] = current


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="an earlier kary_exact.py")
    ap.add_argument("--setting", default="8,50,2000,10",
                    help="total ε, rounds, s*_labels, classes (default: n = 10⁵)")
    args = ap.parse_args()
    total, rounds, labels, k = (float(v) if i == 0 else int(v)
                                for i, v in enumerate(args.setting.split(",")))
    before = load(args.before)
    calibrate(current, 1.0, 2, 5, 3)  # imports (scipy) outside the timings
    calibrate(before, 1.0, 2, 5, 3)
    for turn in range(2):
        for label, module in (("before", before), ("now", current)):
            cpu, eps_round, eps = calibrate(module, total, int(rounds), int(labels), int(k))
            print(f"turn {turn} {label:6s} {cpu:6.2f} CPU-s  ε per round {eps_round!r}  "
                  f"run's ε {eps!r}")


if __name__ == "__main__":
    main()
