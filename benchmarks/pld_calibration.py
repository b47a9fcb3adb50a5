"""σ of DP-FedAvg and DP-SGD at q < 1 calibrated to RDP's ε (before) and to the reported PLD
ε (now), their ratio, and the CPU seconds of each calibration (docs/privacy.md, DP-FedAvg
accounting).

Settings: DP-SGD's defaults (``example_rate`` 0.25, 20 rounds × 50 local steps = 1,000
steps) and DP-FedAvg's 20 rounds at ``sample_rate`` 0.1 and 0.5 (its default is 1, where σ
is the analytic Gaussian's, unchanged); δ = 1e-5. Each calibration runs in a fresh state
(every memo cleared, after one untimed calibration that pays the imports), RDP's first;
the PLD calibration includes its RDP bracket. The σ are
deterministic; CPU time is ``time.process_time`` of this process::

    nice -n 10 python benchmarks/pld_calibration.py --epsilons 1,2,4,8
    nice -n 10 python benchmarks/pld_calibration.py --epsilons "" \
        --edges 50:0.25:1000,20:0.01:10000,100:0.25:1000

``--edges`` adds rows at given ε:q:T (large ε, long runs) and the process's peak memory.
"""

from __future__ import annotations

import argparse
import resource
import time

from fedlabels.privacy import accounting
from fedlabels.privacy.gaussian_calibration import calibrate_gaussian

DELTA = 1e-5
#: (label, q, T): DP-SGD's defaults, DP-FedAvg's 20 rounds at two client-sampling rates
SETTINGS = [("dp-sgd (q 0.25, 1000 steps)", 0.25, 1000),
            ("dp-fedavg (q 0.1, 20 rounds)", 0.1, 20),
            ("dp-fedavg (q 0.5, 20 rounds)", 0.5, 20)]


def _fresh() -> None:
    for memo in (calibrate_gaussian, accounting.gaussian_epsilon, accounting.pld_of_one_step,
                 accounting._rdp_of_one_step):
        memo.cache_clear()


def _timed(epsilon: float, q: float, steps: int, name: str) -> tuple[float, str, float]:
    _fresh()
    start = time.process_time()
    cal = calibrate_gaussian(epsilon, DELTA, q, steps, name)
    return cal.sigma, cal.accountant, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epsilons", default="1,2,4,8")
    parser.add_argument("--edges", default="", help="ε:q:T,... rows of their own")
    args = parser.parse_args()
    settings = [(label, q, steps, e) for label, q, steps in SETTINGS
                for e in (float(e) for e in args.epsilons.split(",") if e)]
    for edge in (e for e in args.edges.split(",") if e):
        e, q, steps = edge.split(":")
        settings.append((f"q {q}, {steps} steps", float(q), int(steps), float(e)))
    calibrate_gaussian(3.0, DELTA, 0.3, 7, "pld")  # imports and first calls, not timed
    print("| setting | ε | σ RDP | σ PLD (accountant) | RDP/PLD | PLD ε at σ RDP | "
          "CPU-s RDP | CPU-s PLD |")
    print("|---|---|---|---|---|---|---|---|")
    for label, q, steps, epsilon in settings:
        rdp, _, cpu_rdp = _timed(epsilon, q, steps, "rdp")
        pld, name, cpu_pld = _timed(epsilon, q, steps, "pld")
        before = accounting.gaussian_epsilon(rdp, q, steps, DELTA, "pld")
        print(f"| {label} | {epsilon:g} | {rdp:.4f} | {pld:.4f} ({name}) | "
              f"{rdp / pld:.4f} | {before:.3f} | {cpu_rdp:.2f} | {cpu_pld:.2f} |")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    print(f"peak memory of this process: {peak:.0f} MB")


if __name__ == "__main__":
    main()
