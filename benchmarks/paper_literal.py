"""Where the code departs from a paper's algorithm box: the literal reading, side by side.

Each case runs the method as built and as the paper writes it, same seeds, one process:

* ``fedct-union``: FedCT's local step as built (one private minibatch plus one equal-size
  pseudo-labelled minibatch of U per step, the published code's mix) against Algorithm 1,
  line 3 read literally: minibatches drawn uniformly from D_i ∪ P (batch 64, and 128 to
  match the built step's 64 + 64 examples); local-only training for reference;
* ``fredy-uniform``: FREDY's teachers averaged by client size (as built) against the
  paper's uniform mean W = (1/T) Σ_t W_t (its Eq. 1 and Algorithm 1), on a Dirichlet split
  (unequal client sizes), nearly noise-free votes (ε per query 20) so that the averaging,
  not the Laplace draw (OS entropy, different in every run), is what differs;
* ``xclp-power``: XCLP's edge weight cos(πh/L)³ (the XCLP code's recipe, the default)
  against Algorithm 1, line 6: cos(πh/L), both with the one-hot Y (``balance=none``).

Usage::

    nice -n 10 python benchmarks/paper_literal.py --case fedct-union --seeds 0,1,2

Prints one line per run and a mean / min / max summary per variant.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import fedlabels as fl
from fedlabels.comm import Message
from fedlabels.method.base import TrainingData
from fedlabels.methods.fedct import fedct as fedct_module
from fedlabels.methods.teacher_student import fredy as fredy_module


@contextmanager
def union_sampling() -> Iterator[None]:
    """FedCT clients train on minibatches drawn uniformly from D_i ∪ P."""
    built = fedct_module.FedCTClient.training_data

    def union(self: fedct_module.FedCTClient) -> TrainingData:
        if self.pseudo_y is None or self.pseudo_X is None:
            return TrainingData(self.data.X, self.data.y)
        X = np.concatenate([self.data.X, self.pseudo_X]).astype(np.float32)
        return TrainingData(X, np.concatenate([self.data.y, self.pseudo_y]))

    fedct_module.FedCTClient.training_data = union  # type: ignore[method-assign]
    try:
        yield
    finally:
        fedct_module.FedCTClient.training_data = built  # type: ignore[method-assign]


@contextmanager
def uniform_teacher_average() -> Iterator[None]:
    """FREDY's server averages the teachers' weights uniformly (the paper's Eq. 1)."""
    built = fredy_module.size_weighted_average

    def uniform(replies: dict[int, Message], key: str = "weights",
                size_key: str = "n") -> np.ndarray:
        return np.mean([np.asarray(replies[c].arrays[key], dtype=np.float64)
                        for c in sorted(replies)], axis=0).astype(np.float32)

    fredy_module.size_weighted_average = uniform
    try:
        yield
    finally:
        fredy_module.size_weighted_average = built


@contextmanager
def as_built() -> Iterator[None]:
    yield


FEDCT = dict(dataset="digits", clients=5, unlabeled=800, private_per_client=80, rounds=10,
             period=20)
FREDY = dict(dataset="digits", clients=5, partition="dirichlet:0.3", unlabeled=400, rounds=5,
             period=20, options={"epsilon_per_query": 20.0, "teacher_rounds": 5})
XCLP = dict(dataset="digits", clients=5, private_per_client=250, unlabeled=100, test=300,
            rounds=1)
XCLP_OPTIONS = {"lsh_bits": 1024, "knn": 10, "alpha": 0.99, "labeled_fraction": 0.1,
                "test_points": 60, "balance": "none"}

# case -> [(variant, context, method, run parameters)]
Variant = tuple[str, Callable[[], Any], str, dict[str, Any]]
CASES: dict[str, list[Variant]] = {
    "fedct-union": [
        ("built: 64 private + 64 pseudo-labelled", as_built, "fedct",
         {**FEDCT, "model": "mlp(hidden=64)"}),
        ("paper literal: 64 from D ∪ P", union_sampling, "fedct",
         {**FEDCT, "model": "mlp(hidden=64)"}),
        ("paper literal: 128 from D ∪ P", union_sampling, "fedct",
         {**FEDCT, "model": "mlp(hidden=64,batch_size=128)"}),
        ("local only", as_built, "local", {**FEDCT, "model": "mlp(hidden=64)"}),
    ],
    "fredy-uniform": [
        ("built: size-weighted", as_built, "fredy", {**FREDY, "model": "mlp(hidden=64)"}),
        ("paper: uniform", uniform_teacher_average, "fredy",
         {**FREDY, "model": "mlp(hidden=64)"}),
    ],
    "xclp-power": [
        ("built: cos^3", as_built, "xclp", {**XCLP, "options": {**XCLP_OPTIONS, "power": 3.0}}),
        ("paper: cos", as_built, "xclp", {**XCLP, "options": {**XCLP_OPTIONS, "power": 1.0}}),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), required=True)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    for name, context, method, params in CASES[args.case]:
        params = dict(params)
        dataset = params.pop("dataset")
        accs = []
        for seed in seeds:
            with context():
                result = fl.run(method, dataset, seed=seed, progress=False, **params)
            accs.append(float(result.final["mean_accuracy"]))
            print(f"{args.case} | {name} | seed {seed} | {accs[-1]:.4f}", flush=True)
        a = np.array(accs)
        print(f"{args.case} | {name} | mean {a.mean():.4f} | min {a.min():.4f} | "
              f"max {a.max():.4f} | seeds {args.seeds}", flush=True)


if __name__ == "__main__":
    main()
