"""What a linear head on frozen MiniLM embeddings can reach with the labels a client has.

For the text setting of ``benchmarks/fedct_beyond.py`` (m = 10, |U| = 150, 2,000 private
texts, 500 test texts, same federations per seed) it fits scikit-learn's L2 logistic
regression, to convergence, for each inverse regularisation ``C`` of ``--cs``, on the
embeddings as they are and L2-normalised, and reports the mean test accuracy of:

* ``local``: each client on its 200 private texts;
* ``with_u``: each client on its private texts plus all of U *correctly* labelled (what a
  FedCT client could reach if every consensus label were right: its ceiling);
* ``pooled``: one model on all 2,000 private texts (what FedAvg approximates).

::

    python benchmarks/text_head_ceiling.py --datasets tweets,movie_reviews --seeds 0

Results: ``--out`` (JSON, one record per dataset, seed, features and C) and a table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

import fedlabels as fl
from fedlabels.core.files import write_atomic
from fedlabels.learners import build_learner, parse_model_spec

MODEL = "minilm(mode=frozen,max_len=64,batch=16)"


def embeddings(dataset: str, seed: int) -> dict[str, Any]:
    """The frozen encoder's embeddings of every part of the federation of ``seed``."""
    fed = fl.load_federation(dataset, clients=10, unlabeled=150, private=2000, test=500,
                             seed=seed)
    learner = build_learner(parse_model_spec(MODEL)[0], n_classes=fed.n_classes,
                            random_state=0).initialise(1, fed.n_classes)
    return {"X": [learner.hidden_features(c.X) for c in fed.clients],
            "y": [np.asarray(c.y) for c in fed.clients],
            "U": learner.hidden_features(fed.X_public), "yU": np.asarray(fed.y_public),
            "T": learner.hidden_features(fed.X_test), "yT": np.asarray(fed.y_test)}


def accuracies(emb: dict[str, Any], c: float, normalise: bool) -> dict[str, float]:
    def f(a: np.ndarray) -> np.ndarray:
        return a / np.linalg.norm(a, axis=1, keepdims=True) if normalise else a

    def acc(X: np.ndarray, y: np.ndarray) -> float:
        model = LogisticRegression(C=c, max_iter=5000).fit(f(X), y)
        return float(model.score(f(emb["T"]), emb["yT"]))

    pairs = list(zip(emb["X"], emb["y"], strict=True))
    return {"local": float(np.mean([acc(X, y) for X, y in pairs])),
            "with_u": float(np.mean([acc(np.vstack([X, emb["U"]]), np.r_[y, emb["yU"]])
                                     for X, y in pairs])),
            "pooled": acc(np.vstack(emb["X"]), np.concatenate(emb["y"]))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="tweets,movie_reviews")
    p.add_argument("--seeds", default="0")
    p.add_argument("--cs", default="0.1,1,10,100")
    p.add_argument("--out", default="benchmarks/results/text_head_ceiling.json")
    args = p.parse_args()
    records = []
    for dataset in args.datasets.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            emb = embeddings(dataset, seed)
            for normalise in (False, True):
                for c in (float(x) for x in args.cs.split(",")):
                    records.append({"dataset": dataset, "seed": seed, "C": c,
                                    "features": "l2" if normalise else "raw",
                                    **accuracies(emb, c, normalise)})
                    print(json.dumps(records[-1]), flush=True)
    write_atomic(Path(args.out), json.dumps({"command": "python benchmarks/text_head_ceiling.py "
                                             f"--datasets {args.datasets} --seeds {args.seeds}"
                                             f" --cs {args.cs}", "records": records}, indent=1))
    print("| dataset | seed | features | C | local (200) | with U labelled right (350) "
          "| pooled (2,000) |\n|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['dataset']} | {r['seed']} | {r['features']} | {r['C']:g} | "
              f"{r['local']:.4f} | {r['with_u']:.4f} | {r['pooled']:.4f} |")


if __name__ == "__main__":
    main()
