"""DP-FedCT's DP-SGD labeller alone: its accuracy and its 5-model vote on U per setting.

For each setting (model spec, Adam learning rate, steps T, Poisson rate q, clip C) every
client of the Fashion-MNIST federation (5 clients, 2,000 private records each, PCA-64 of U)
trains one model with DP-SGD at ε = 8 (δ = 1e-5; σ calibrated for T steps at rate q, as
``dp-fedct --mechanism dpsgd`` does) on its private data alone, as the labeller of
``site_model=private`` does. Printed per setting: σ, the models' mean test accuracy, and
their vote on U: the plurality's accuracy, and the coverage and accuracy of the qualified
majority (4 of 5 agree, ``quorum=0.8``). ``--ema`` also scores exponential moving averages
of the weights (post-processing; the steps then run one at a time). The DP noise is fresh
from the OS CSPRNG every run (docs/beyond_paper.md, "A DP labeller tuned for ε = 8")::

    python benchmarks/dp_labeller_sweep.py --grid coarse
    python benchmarks/dp_labeller_sweep.py --grid fine
    python benchmarks/dp_labeller_sweep.py --grid ema --ema 0.99,0.995,0.999
"""

from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

import numpy as np
import torch

import fedlabels as fl
from fedlabels.core.randomness import numpy_generator
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.dpsgd import DPSGDConfig, dpsgd_steps
from fedlabels.privacy.dpsgd_accounting import calibrate_dpsgd

MLP = "mlp(hidden=128)"


def _grid(name: str) -> list[dict[str, Any]]:
    """The settings of a named grid."""
    if name == "coarse":  # steps, q and learning rate at C = 1
        return [{"spec": MLP, "lr": lr, "T": T, "q": q, "C": 1.0}
                for T in (100, 300, 1000) for q in (0.1, 0.25, 0.5)
                for lr in (1e-3, 3e-3, 1e-2)]
    if name == "fine":  # width and clip at the run's T = 1,000, q = 0.25
        return ([{"spec": f"mlp(hidden={h})", "lr": lr, "T": 1000, "q": 0.25, "C": 1.0}
                 for h in (64, 256) for lr in (2e-3, 5e-3)]
                + [{"spec": MLP, "lr": lr, "T": 1000, "q": 0.25, "C": C}
                   for C in (0.3, 1.0, 3.0) for lr in (2e-3, 5e-3)])
    if name == "ema":
        return [{"spec": MLP, "lr": lr, "T": 1000, "q": 0.25, "C": 1.0} for lr in (3e-3, 1e-3)]
    raise SystemExit(f"unknown grid {name!r}; valid: coarse, fine, ema")


def _vote(votes: list[np.ndarray], truth: np.ndarray) -> dict[str, float]:
    """The plurality's accuracy on U, and the 4-of-5 majority's coverage and accuracy."""
    counts = np.stack([(np.stack(votes) == c).sum(0) for c in range(10)])
    top, label = counts.max(0), counts.argmax(0)
    kept = top >= 4
    return {"plurality_acc": round(float((label == truth).mean()), 4),
            "quorum0.8_coverage": round(float(kept.mean()), 3),
            "quorum0.8_acc": round(float((label[kept] == truth[kept]).mean()), 4)}


def run_setting(fed: fl.Federation, setting: dict[str, Any], seed: int,
                decays: list[float]) -> list[dict[str, Any]]:
    """One row per weight average (0: the last weights; then each EMA decay)."""
    sigma = calibrate_dpsgd(8.0, 1e-5, setting["q"], setting["T"])
    config = DPSGDConfig(sigma, setting["q"], setting["C"])
    scored: dict[float, tuple[list[float], list[np.ndarray]]] = {
        d: ([], []) for d in [0.0, *decays]}
    for k, client in enumerate(fed.clients):
        model = build_learner(parse_model_spec(setting["spec"])[0], n_classes=10,
                              random_state=seed * 100 + k)
        model.set_params(learning_rate=setting["lr"])
        rng = numpy_generator()  # the OS CSPRNG, as a DP client's
        if not decays:
            dpsgd_steps(model, client.X, client.y, setting["T"], config, rng)
            averages: dict[float, list[torch.Tensor]] = {}
        else:
            dpsgd_steps(model, client.X, client.y, 1, config, rng)
            averages = {d: [p.detach().clone() for p in model.model_.parameters()]
                        for d in decays}
            for _ in range(setting["T"] - 1):
                dpsgd_steps(model, client.X, client.y, 1, config, rng)
                with torch.no_grad():
                    for d, kept in averages.items():
                        for a, p in zip(kept, model.model_.parameters(), strict=True):
                            a.mul_(d).add_(p.detach(), alpha=1 - d)
        live = [p.detach().clone() for p in model.model_.parameters()]
        for d in [0.0, *decays]:
            with torch.no_grad():
                for p, w in zip(model.model_.parameters(), averages.get(d, live), strict=True):
                    p.copy_(w)
            scored[d][0].append(float((model.predict(fed.X_test) == fed.y_test).mean()))
            scored[d][1].append(np.asarray(model.predict(fed.X_public)))
    return [{**setting, "seed": seed, "ema": d, "sigma": round(sigma, 3),
             "dp_acc": round(float(np.mean(accs)), 4), **_vote(votes, fed.y_public)}
            for d, (accs, votes) in scored.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", default="coarse", help="coarse, fine or ema")
    ap.add_argument("--ema", default="", help="EMA decays to score too, e.g. 0.99,0.999")
    ap.add_argument("--unlabeled", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    decays = [float(d) for d in args.ema.split(",") if d]
    fed = fl.load_federation("fashion_mnist", clients=5, seed=args.seed,
                             unlabeled=args.unlabeled, private_per_client=2000, public_pca=64)
    for setting in _grid(args.grid):
        for row in run_setting(fed, setting, args.seed, decays):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
