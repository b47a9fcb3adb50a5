"""FREDY: student accuracy vs ε per query, for 5, 15 and 25 teachers (Fashion-MNIST).

For each ensemble size n the teachers are trained once with ``fedlabels.run("fredy", ...)``
(R_T FedAvg rounds of b local steps; each teacher keeps its last local model). Their votes on
Q queries from U are counted once; the Laplace noise only enters at aggregation, so for every
ε the script draws fresh noise (:func:`fedlabels.privacy.noisy_max.laplace_noisy_max`),
trains a fresh student (same spec and seed for every ε) on the labelled queries and tests it.
ε = inf is the noise-free vote. Privacy is accounted per ε both ways (docs/baselines.md):
``eps_formal`` with L1 sensitivity 2n (FedAvg teachers are not disjoint) and
``eps_if_disjoint`` with sensitivity 2, each the tightest of basic / RDP / PLD at δ = 1e-5.

Usage::

    nice -n 10 python benchmarks/fredy_sweep.py --seed 0 --out results/fredy

Writes ``sweep.csv``, ``sweep.md`` and ``fredy_sweep.png``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch

import fedlabels as fl
from fedlabels.consensus import vote_counts
from fedlabels.core.files import write_atomic
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.privacy.events import DISJOINT_TEACHERS, LaplaceNoisyMaxEvent
from fedlabels.privacy.noisy_max import laplace_noisy_max, laplace_scale
from fedlabels.privacy.vote_accounting import account_laplace

EPSILONS = (0.01, 0.1, 0.2, 0.5, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teachers", default="5,15,25")
    parser.add_argument("--private", type=int, default=7500, help="total private examples")
    parser.add_argument("--unlabeled", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--teacher-rounds", type=int, default=10)
    parser.add_argument("--period", type=int, default=50)
    parser.add_argument("--student-steps", type=int, default=1000)
    parser.add_argument("--noise-seeds", type=int, default=2)
    parser.add_argument("--model", default="mlp(hidden=256-256)")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/fredy")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    spec = parse_model_spec(args.model)[0]
    rows = []
    for n in (int(t) for t in args.teachers.split(",")):
        t0 = time.perf_counter()
        fed = fl.load_federation("fashion_mnist", clients=n, private=args.private,
                                 unlabeled=args.unlabeled, seed=args.seed)
        # teachers: R_T FedAvg rounds; rounds=1 keeps the built-in student short (unused)
        result = fl.run("fredy", fed, model=args.model, rounds=1, period=args.period,
                        seed=args.seed, progress=False,
                        options={"teacher_rounds": args.teacher_rounds,
                                 "epsilon_per_query": 1.0,
                                 "queries": args.queries})
        teachers = result.client_models
        teacher_acc = float(np.mean([np.mean(t.predict(fed.X_test) == fed.y_test)
                                     for t in teachers]))
        rng = np.random.default_rng([args.seed, n])
        queries = np.sort(rng.choice(len(fed.X_public), args.queries, replace=False))
        Xq = fed.X_public[queries]
        votes = np.stack([t.predict(Xq) for t in teachers])
        counts = vote_counts(votes, fed.n_classes)
        truth = fed.y_public[queries]
        t_teach = time.perf_counter() - t0
        for eps in (math.inf, *EPSILONS):
            accs, label_accs = [], []
            for s in range(args.noise_seeds if math.isfinite(eps) else 1):
                if math.isfinite(eps):
                    # seeded noise on purpose: a reproducible utility measurement of the
                    # mechanism, not a private release (a run draws it from OS entropy)
                    labels = laplace_noisy_max(counts, eps,
                                               np.random.default_rng([args.seed, n, s])).labels
                else:
                    labels = counts.argmax(axis=1)
                student = build_learner(spec, n_classes=fed.n_classes, random_state=args.seed)
                student.train_steps(Xq, labels, args.student_steps)
                accs.append(float(np.mean(student.predict(fed.X_test) == fed.y_test)))
                label_accs.append(float(np.mean(labels == truth)))
            row = {"teachers": n, "epsilon_per_query": eps, "student_acc": np.mean(accs),
                   "student_acc_min": np.min(accs), "student_acc_max": np.max(accs),
                   "label_acc": np.mean(label_accs), "teacher_acc": teacher_acc,
                   "noise_seeds": len(accs)}
            if math.isfinite(eps):
                b = laplace_scale(eps)
                formal = account_laplace([LaplaceNoisyMaxEvent(b, 2.0 * n, args.queries)],
                                         args.delta)
                disjoint = account_laplace([LaplaceNoisyMaxEvent(
                    b, 2.0, args.queries, DISJOINT_TEACHERS)], args.delta)
                row.update(eps_formal=formal.epsilon, eps_formal_accountant=formal.accountant,
                           eps_if_disjoint=disjoint.epsilon,
                           eps_if_disjoint_accountant=disjoint.accountant)
            rows.append(row)
            print(row, flush=True)
        print(f"teachers={n}: teacher phase {t_teach:.0f} s, total "
              f"{time.perf_counter() - t0:.0f} s", flush=True)

    import pandas as pd

    frame = pd.DataFrame(rows)
    write_atomic(out / "sweep.csv", frame.to_csv(index=False))
    lines = ["| teachers | ε per query | student ACC | label ACC | teacher ACC | "
             "ε total (formal, Δ₁ = 2n) | ε total (if disjoint, Δ₁ = 2) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = r["epsilon_per_query"]
        if math.isfinite(eps):
            formal = f"{r['eps_formal']:.4g} ({r['eps_formal_accountant']})"
            disjoint = f"{r['eps_if_disjoint']:.4g} ({r['eps_if_disjoint_accountant']})"
        else:
            formal = disjoint = "∞ (no noise)"
        lines.append(f"| {r['teachers']} | {eps:g} | {r['student_acc']:.4f} | "
                     f"{r['label_acc']:.4f} | {r['teacher_acc']:.4f} | {formal} | {disjoint} |")
    write_atomic(out / "sweep.md", "\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for n, part in frame.groupby("teachers"):
        noisy = part[np.isfinite(part["epsilon_per_query"])]
        line, = ax.plot(noisy["epsilon_per_query"], noisy["student_acc"], marker="o",
                        label=f"{n} teachers")
        clean = part[~np.isfinite(part["epsilon_per_query"])]["student_acc"]
        if len(clean):
            ax.axhline(float(clean.iloc[0]), color=line.get_color(), ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("ε per query (Laplace scale 2/ε; disjoint-teacher reading)")
    ax.set_ylabel("student test accuracy")
    ax.set_title(f"FREDY on Fashion-MNIST, {args.queries} queries (dotted: no noise)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "fredy_sweep.png", dpi=120)


if __name__ == "__main__":
    main()
