"""What DP-FedAvg's PLD calibration buys in accuracy: the same runs with RDP's σ and with
PLD's σ for the same target (ε, δ), paired (docs/privacy.md, "DP-FedAvg's and DP-SGD's PLD
calibration").

Each repetition r loads the federation with seed r and runs both arms with run seed r, so
the data split, the model initialisation and the client sampling's seed are shared; the
noise is the OS CSPRNG's and differs. The difference PLD − RDP in mean test accuracy is
averaged over the repetitions with a Student-t 95 % interval. Settings (δ = 1e-5):

* ``client``: client-level DP-FedAvg, ``sample_rate`` q < 1, calibrated over the rounds.
* ``record``: record-level DP-FedAvg (``level=record``: DP-SGD at ``example_rate`` < 1,
  calibrated over rounds × period steps).
* ``fedct``: DP-FedCT ``mechanism=dpsgd`` (the same DP-SGD accountant and steps).

In every setting the RDP arm gives ``noise_multiplier`` as RDP's σ for the same (ε, δ, q,
compositions) (``calibrate_gaussian(..., "rdp")``; each DP-SGD client enforces it as its
own σ) and the PLD arm gives ``epsilon`` (the default calibration). Both report the PLD ε;
the σ each run used is read back from its result and checked.

The docs' run::

    nice -n 10 python benchmarks/pld_gain.py --reps 10

``--smoke`` runs tiny settings on digits (the test's).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

import fedlabels as fl
from fedlabels.privacy.gaussian_calibration import calibrate_gaussian

DELTA = 1e-5


@dataclass(frozen=True)
class Setting:
    """One configuration run in both arms."""

    name: str
    level: str  # client | record | fedct
    dataset: str
    clients: int
    private_per_client: int
    test: int
    model: str
    rounds: int
    period: int
    rate: float  # sample_rate (client) or example_rate (record)

    def steps(self) -> int:
        """The compositions σ is calibrated over: rounds (client) or DP-SGD steps (record)."""
        return self.rounds if self.level == "client" else self.rounds * self.period


SETTINGS = (
    Setting("record", "record", "letter", 5, 2000, 1000, "mlp(hidden=32,lr=0.01)", 10, 20, 0.05),
    Setting("fedct", "fedct", "letter", 5, 2000, 1000, "mlp(hidden=32,lr=0.01)", 10, 20, 0.05),
    Setting("client", "client", "letter", 200, 60, 1000, "mlp(hidden=32,lr=0.01)", 20, 10, 0.2),
)
SMOKE = (
    Setting("record", "record", "digits", 3, 0, 100, "mlp(hidden=8)", 2, 2, 0.5),
    Setting("fedct", "fedct", "digits", 3, 0, 100, "mlp(hidden=8)", 2, 2, 0.5),
    Setting("client", "client", "digits", 20, 0, 100, "mlp(hidden=8)", 2, 2, 0.5),
)


def rdp_sigma(epsilon: float, setting: Setting) -> float:
    """RDP's σ for the setting's target (the calibration used before PLD's)."""
    return calibrate_gaussian(epsilon, DELTA, setting.rate, setting.steps(), "rdp").sigma


def run_arm(fed: Any, setting: Setting, epsilon: float, arm: str, seed: int) -> dict[str, Any]:
    """One run of ``arm`` (rdp | pld): its accuracy, σ and reported (PLD) ε."""
    options: dict[str, Any] = {"delta": DELTA}
    options.update({"epsilon": epsilon} if arm == "pld"
                   else {"noise_multiplier": rdp_sigma(epsilon, setting)})
    if setting.level == "client":
        options["sample_rate"] = setting.rate
    else:
        options.update(example_rate=setting.rate,
                       **({"level": "record"} if setting.level == "record"
                          else {"mechanism": "dpsgd"}))
    method = "dp-fedct" if setting.level == "fedct" else "dp-fedavg"
    res = fl.run(method, fed, model=setting.model, rounds=setting.rounds,
                 period=setting.period, seed=seed, eval_every=setting.rounds,
                 progress=False, options=options)
    privacy = (res.extra or {})["privacy"]
    expected = (rdp_sigma(epsilon, setting) if arm == "rdp" else calibrate_gaussian(
        epsilon, DELTA, setting.rate, setting.steps(), "pld").sigma)
    if not math.isclose(privacy["noise_multiplier"], expected, rel_tol=1e-12):
        raise SystemExit(f"{setting.name} {arm}: the run used σ {privacy['noise_multiplier']}, "
                         f"expected {expected}")
    return {"accuracy": float((res.final or {})["mean_accuracy"]),
            "sigma": float(privacy["noise_multiplier"]),
            "epsilon_reported": float(privacy["epsilon"])}


def interval(diffs: Sequence[float]) -> tuple[float, float, float]:
    """Mean of the paired differences and its Student-t 95 % interval (nan with one)."""
    d = np.asarray(diffs, dtype=float)
    mean = float(d.mean())
    if d.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))
    return mean, mean - half, mean + half


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epsilons", default="1,8")
    parser.add_argument("--reps", type=int, default=10, help="paired repetitions (seeds 0..)")
    parser.add_argument("--settings", default="record,fedct,client")
    parser.add_argument("--smoke", action="store_true", help="tiny settings on digits")
    parser.add_argument("--out", default=None, help="JSON of every run (default: none)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    known = {s.name: s for s in (SMOKE if args.smoke else SETTINGS)}
    wanted = [s for s in args.settings.split(",") if s]
    if unknown := [s for s in wanted if s not in known]:
        raise SystemExit(f"unknown setting(s) {unknown}; choose from {sorted(known)}")
    if args.reps < 1:
        raise SystemExit(f"--reps must be at least 1, got {args.reps}")
    epsilons = [float(e) for e in args.epsilons.split(",") if e]
    if args.out and Path(args.out).exists():
        raise SystemExit(f"{args.out} exists; name a new --out (a record is never overwritten)")
    start = time.process_time()
    runs: list[dict[str, Any]] = []
    print("| setting | ε | σ RDP | σ PLD | PLD ε at σ RDP | acc RDP | acc PLD | "
          "PLD − RDP (95 % CI) |")
    print("|---|---|---|---|---|---|---|---|")
    for setting in (known[name] for name in wanted):
        for epsilon in epsilons:
            pairs = []
            for seed in range(args.reps):
                fed = fl.load_federation(setting.dataset, clients=setting.clients, seed=seed,
                                         private_per_client=setting.private_per_client or None,
                                         test=setting.test, unlabeled=setting.test)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the class-absence caveats of small splits
                    pair = {arm: run_arm(fed, setting, epsilon, arm, seed)
                            for arm in ("rdp", "pld")}
                runs.append({"setting": setting.name, "epsilon": epsilon, "seed": seed, **pair})
                pairs.append(pair)
            mean, low, high = interval([p["pld"]["accuracy"] - p["rdp"]["accuracy"]
                                        for p in pairs])
            acc = {arm: float(np.mean([p[arm]["accuracy"] for p in pairs]))
                   for arm in ("rdp", "pld")}
            first = pairs[0]
            print(f"| {setting.name} | {epsilon:g} | {first['rdp']['sigma']:.4f} | "
                  f"{first['pld']['sigma']:.4f} | {first['rdp']['epsilon_reported']:.3f} | "
                  f"{acc['rdp']:.4f} | {acc['pld']:.4f} | "
                  f"{mean:+.4f} [{low:+.4f}, {high:+.4f}] |", flush=True)
            if args.out:  # after each row, so a stopped run keeps its rows
                Path(args.out).write_text(json.dumps({"reps": args.reps, "runs": runs},
                                                     indent=1))
    print(f"CPU seconds of this process: {time.process_time() - start:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
