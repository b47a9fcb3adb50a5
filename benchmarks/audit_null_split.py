"""Null control for the audit's member / non-member construction on Fashion-MNIST.

The audit draws members from a client's private set (Fashion-MNIST's training split) and
non-members, attacker data and population points from the official test split. If the two
splits differed in distribution, attacks could separate them without any membership signal.
This control uses the audit's sizes and model, but the "members" are training-split records
that the target never saw (another client's): every AUC should be 0.5 up to noise.

Usage::

    nice -n 10 python benchmarks/audit_null_split.py --seed 0
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import fedlabels as fl
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.privacy.attacks import (
    evaluate_attack,
    label_frequency,
    lira_offline,
    rmia_offline,
    true_class_probability,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="mlp(hidden=256-256)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--n", type=int, default=500, help="candidates per side")
    args = parser.parse_args()
    torch.set_num_threads(1)
    fed = fl.load_federation("fashion_mnist", clients=5, unlabeled=20_000,
                             private_per_client=args.n, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    spec = parse_model_spec(args.model)[0]
    Xt, yt = fed.X_test, fed.y_test
    order = rng.permutation(len(yt))
    n = args.n
    non, att, pop = order[:n], order[n : 3 * n], order[3 * n : 4 * n]
    target = build_learner(spec, n_classes=10, random_state=1)
    target.train_steps(fed.clients[0].X, fed.clients[0].y, args.steps)
    refs = []
    for j in range(4):
        sub = rng.choice(att, n, replace=False)
        ref = build_learner(spec, n_classes=10, random_state=10 + j)
        ref.train_steps(Xt[sub], yt[sub], args.steps)
        refs.append(ref)
    # "members": client 1's training-split records, never seen by the target (client 0)
    Xc = np.concatenate([fed.clients[1].X[:n], Xt[non]])
    yc = np.concatenate([fed.clients[1].y[:n], yt[non]])
    membership = np.r_[np.ones(n), np.zeros(n)]
    probs, probs_z = target.predict_proba(Xc), target.predict_proba(Xt[pop])
    px, pz = true_class_probability(probs, yc), true_class_probability(probs_z, yt[pop])
    pxr = np.stack([true_class_probability(r.predict_proba(Xc), yc) for r in refs])
    pzr = np.stack([true_class_probability(r.predict_proba(Xt[pop]), yt[pop]) for r in refs])
    lx = label_frequency(probs.argmax(axis=1)[None], yc)
    lz = label_frequency(probs_z.argmax(axis=1)[None], yt[pop])
    scores = {"loss": px, "lira": lira_offline(px, pxr), "rmia": rmia_offline(px, pxr, pz, pzr),
              "label-only:gap": lx, "rmia (hard labels)": rmia_offline(lx, pxr, lz, pzr)}
    for name, s in scores.items():
        print(f"{name:<20} AUC {evaluate_attack(name, s, membership).auc:.3f}")
    print(f"reference p(y|x): training split {pxr.mean(0)[:n].mean():.3f}, "
          f"test split {pxr.mean(0)[n:].mean():.3f}")


if __name__ == "__main__":
    main()
