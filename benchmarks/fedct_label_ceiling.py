"""How good must the labels on U be? A FedCT client trained on fixed labels of known quality.

A FedCT client learns from its private data and U labelled by the consensus. This script
takes the consensus out of the loop: each client trains, with FedCT's own training step
(one minibatch of its private data and one of U per step, ``train_steps`` with U as the
auxiliary set) and the same number of local steps as a FedCT run, on U labelled once by a
fixed labeller, and reports its test accuracy beside the labels' accuracy on U. Labellers:

* ``own``: the client's own local-only model (self-training);
* ``vote``: the majority vote of the m local-only models (FedCT's first consensus after a
  private warm-up as long as the run);
* ``pooled``: one model trained on all m clients' private data together, with as many
  steps in all as the m clients take (a labeller about as accurate as FedAvg's global
  model; its test accuracy is recorded beside the others);
* ``true``: U's true labels (the ceiling of any label on U).

::

    python benchmarks/fedct_label_ceiling.py --setting fashion --seeds 0,1,2
    python benchmarks/fedct_label_ceiling.py --setting fashion_cnn --unlabeled 2000 \\
        --steps 400 --seeds 0,1,2

Settings are those of ``benchmarks/fedct_beyond.py`` (``fashion``: m = 5, 2,000 private
images each, |U| = 10,000, the paper's MLP; ``fashion_cnn``: the same with
``cnn(arch=small)``). Each finished seed appends one JSON line to ``--out`` (default
``benchmarks/results/fedct_label_ceiling_<setting>.jsonl``; a seed already there is skipped) and the
summary over seeds is printed and written beside it (``.md``). One torch thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedct_beyond import SETTINGS, interval, load
from fedlabels.consensus import majority_vote
from fedlabels.core.files import write_atomic
from fedlabels.learners.specs import build_learner, parse_model_spec
from fedlabels.runs.loop import derive_seeds

LABELLERS = ("own", "vote", "pooled", "true")


def fresh(spec: Any, fed: Any, seed: int) -> Any:
    """A new learner for ``spec`` as a run builds it (seeded, image shape set)."""
    learner = build_learner(spec, n_classes=fed.n_classes, random_state=seed)
    shape = fed.info.get("image_shape")
    if shape is not None and callable(getattr(learner, "use_dataset_shape", None)):
        learner.use_dataset_shape(shape)
    return learner


def accuracy(learner: Any, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(learner.predict(X) == y))


def one_seed(setting: dict[str, Any], name: str, seed: int, steps: int) -> dict[str, Any]:
    """Every labeller's label accuracy on U and the clients' mean test accuracy."""
    fed = load(setting, seed)
    spec = parse_model_spec(setting["model"])[0]
    seeds, server_seed = derive_seeds(seed, len(fed.clients))
    U, y_U = fed.X_public, fed.y_public
    assert y_U is not None, "the ceiling needs U's true labels"
    t0 = time.process_time()
    local = []
    for client, s in zip(fed.clients, seeds, strict=True):
        model = fresh(spec, fed, s)
        model.train_steps(client.X, client.y, steps)
        local.append(model)
    local_votes = np.stack([m.predict(U) for m in local])
    pooled = fresh(spec, fed, server_seed)
    pooled.train_steps(np.concatenate([c.X for c in fed.clients]),
                       np.concatenate([c.y for c in fed.clients]), steps * len(fed.clients))
    vote = majority_vote(local_votes, fed.n_classes)
    row: dict[str, Any] = {
        "setting": name, "seed": seed, "steps": steps,
        "local_acc": float(np.mean([accuracy(m, fed.X_test, fed.y_test) for m in local])),
        "pooled_test_acc": accuracy(pooled, fed.X_test, fed.y_test), "labellers": {}}
    n = len(local)
    labels_by = {"own": list(local_votes), "vote": [vote] * n,
                 "pooled": [pooled.predict(U)] * n, "true": [y_U] * n}  # per client
    for labeller in LABELLERS:
        accs, label_accs = [], []
        for client, s, labels in zip(fed.clients, seeds, labels_by[labeller], strict=True):
            student = fresh(spec, fed, s)
            student.train_steps(client.X, client.y, steps, U, labels)
            accs.append(accuracy(student, fed.X_test, fed.y_test))
            label_accs.append(float(np.mean(labels == y_U)))
        row["labellers"][labeller] = {"label_acc_on_U": float(np.mean(label_accs)),
                                      "student_acc": float(np.mean(accs))}
        print(f"  {name} seed {seed} {labeller}: labels {np.mean(label_accs):.4f} right, "
              f"student {np.mean(accs):.4f}", flush=True)
    row["cpu_s"] = round(time.process_time() - t0, 1)
    return row


def summarise(rows: list[dict[str, Any]]) -> str:
    """Markdown: per setting and labeller, label accuracy on U and student accuracy."""
    lines = ["| setting | steps | labels on U from | seeds | labels right on U | "
             "client test acc (± 95 % CI) |", "|---|---|---|---|---|---|"]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["setting"], row["steps"]), []).append(row)
    for (setting, steps), group in sorted(groups.items()):
        seeds = ",".join(str(r["seed"]) for r in group)
        lines.append(f"| {setting} | {steps} | (local only, no U) | {seeds} | — | "
                     f"{interval(np.array([r['local_acc'] for r in group]))} |")
        lines.append(f"| {setting} | {steps} | (the pooled labeller itself) | {seeds} | — | "
                     f"{interval(np.array([r['pooled_test_acc'] for r in group]))} |")
        for labeller in LABELLERS:
            lab = np.array([r["labellers"][labeller]["label_acc_on_U"] for r in group])
            stu = np.array([r["labellers"][labeller]["student_acc"] for r in group])
            lines.append(f"| {setting} | {steps} | {labeller} | {seeds} | {lab.mean():.4f} | "
                         f"{interval(stu)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=("fashion", "fashion_cnn"), required=True)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--steps", type=int, default=1000,
                        help="local steps per client (FedCT's T); the pooled labeller takes "
                        "m times as many")
    parser.add_argument("--unlabeled", type=int, default=None, help="|U|; default: the setting's")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    setting = dict(SETTINGS[args.setting])
    name = args.setting
    if args.unlabeled:
        setting["unlabeled"] = args.unlabeled
        name += f" U={args.unlabeled}"
    out = Path(args.out or f"benchmarks/results/fedct_label_ceiling_{args.setting}.jsonl")
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {(r["setting"], r["seed"], r["steps"]) for r in rows}
    for seed in (int(s) for s in args.seeds.split(",")):
        if (name, seed, args.steps) in done:
            print(f"{name} seed {seed} steps {args.steps}: kept from {out}, not rerun "
                  "(give --out NEW to measure it again)", file=sys.stderr)
            continue
        rows.append(one_seed(setting, name, seed, args.steps))
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
    table = summarise(rows)
    write_atomic(out.with_suffix(".md"), table)
    print(table)


if __name__ == "__main__":
    main()
