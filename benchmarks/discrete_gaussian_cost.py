"""DP-FedAvg's ``noise="discrete"`` next to the continuous Gaussian (docs/privacy.md §5,
"Discrete noise"): ε at equal σ, the sampler's cost and a client's serialized payload.

* ε: the run's ε at δ = 1e-5 by each noise's accountants, q = 1 (T = 100) and q = 0.1
  (T = 1000), σ = 0.7 ... 4; the discrete column also at the continuous run's noise std in
  model units (σ·S, i.e. σ_eff = σS/(γΔ) at the default grid). Deterministic.
* σ calibrated to ε = 8 over 50 rounds (q = 1 and q = 0.1) by each noise's accountant.
* cost: ``sample_discrete_gaussian`` against ``Generator.normal`` for d = 669,706 (MLP
  784-512-512-10), interleaved in one process (best and median of ``--reps``), at the default
  grid's σΔ (σ = 1) and at a noise std of 5 grid units. Timings depend on the load.
* payload: ``encode_message`` of one client's update (float32; the default grid; a grid
  coarse enough for int16).

    nice -n 10 python benchmarks/discrete_gaussian_cost.py --reps 7
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fedlabels.comm import Message
from fedlabels.comm.codec import encode_message
from fedlabels.core.randomness import numpy_generator
from fedlabels.privacy.accounting import default_gaussian_accountants, tightest_gaussian
from fedlabels.privacy.discrete_accounting import discrete_gaussian_epsilon
from fedlabels.privacy.discrete_gaussian import (
    default_grid,
    encode_update,
    integer_sensitivity,
    sample_discrete_gaussian,
)

D = 669_706  # MLP 784-512-512-10
DELTA = 1e-5


def epsilons() -> None:
    grid = default_grid(1.0, D)
    shrink = 1.0 / (integer_sensitivity(1.0, grid, D) * grid)  # σ_eff / σ at equal noise std
    print("| q, T | σ | continuous ε (accountant) | discrete ε (rdp) | discrete ε at σS |")
    print("|---|---|---|---|---|")
    for q, rounds in ((1.0, 100), (0.1, 1000)):
        for sigma in (0.7, 1.0, 2.0, 4.0):
            cont = tightest_gaussian(sigma, q, rounds, DELTA, default_gaussian_accountants(q))
            disc = discrete_gaussian_epsilon(sigma, q, rounds, DELTA)
            same_std = discrete_gaussian_epsilon(sigma * shrink, q, rounds, DELTA)
            print(f"| {q:g}, {rounds} | {sigma:g} | {cont.epsilon:.4g} ({cont.accountant}) | "
                  f"{disc:.4g} | {same_std:.4g} |")


def calibrated() -> None:
    from fedlabels.privacy.discrete_accounting import calibrate_discrete_noise_multiplier
    from fedlabels.privacy.gaussian_calibration import calibrate_noise_multiplier

    for q in (1.0, 0.1):
        cont = calibrate_noise_multiplier(8.0, DELTA, q, 50)
        disc = calibrate_discrete_noise_multiplier(8.0, DELTA, q, 50)
        print(f"σ for ε = 8 over 50 rounds at q = {q:g}: continuous {cont:.4g}, "
              f"discrete {disc:.4g} ({disc / cont - 1:+.1%})")


def cost(reps: int) -> None:
    rng = numpy_generator()
    sd_default = integer_sensitivity(1.0, default_grid(1.0, D), D)
    for sd in (sd_default, 5.0):
        normal, discrete = [], []
        for _ in range(reps):
            t = time.perf_counter()
            rng.normal(0.0, sd, D)
            normal.append(time.perf_counter() - t)
            t = time.perf_counter()
            sample_discrete_gaussian(sd, D, rng)
            discrete.append(time.perf_counter() - t)
        print(f"noise std {sd:.1f}: normal best {min(normal) * 1e3:.1f} ms (median "
              f"{statistics.median(normal) * 1e3:.1f}), discrete best "
              f"{min(discrete) * 1e3:.1f} ms (median {statistics.median(discrete) * 1e3:.1f})")


def payload() -> None:
    update = (np.random.default_rng(0).standard_normal(D) * 1e-3).astype(np.float32)
    sizes = {"float32 (continuous)": update}
    for grid in (default_grid(1.0, D), 1.0 / 32_000):
        z, _ = encode_update(update, 1.0, grid)
        sizes[f"grid {grid:.3g} ({z.dtype})"] = z
    for name, arr in sizes.items():
        msg = Message("dpfedavg.update", arrays={"update": arr}, config={"norm": 0.123})
        print(f"payload {name}: {len(encode_message(msg)):,} bytes")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    epsilons()
    calibrated()
    cost(args.reps)
    payload()


if __name__ == "__main__":
    main()
