"""CPU time of the copies a run of many torch clients makes of their learners' state, old
path against new, side by side in one process (alternating, best of ``--repeats``).

- models file: ``write_models_file`` of the clients' learners, the state taken without
  Adam's moments and each member's deflate test on its first 8 kB (new) against the state
  taken whole and filtered and a 64 kB test (old);
- checkpoint snapshot: ``own_copies`` (new: the learner's arrays, copied by its
  ``state_dict``, not copied again) against ``copied`` (old) of each client's state.

    python benchmarks/state_copies.py --clients 200 --repeats 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    from fedlabels.learners import torch_state
    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.method.state import copied, own_copies, prefixed
    from fedlabels.results import model_format
    from fedlabels.results.model_format import write_models_file

    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 16)).astype(np.float32)  # letter: 16 features, 26 classes
    y = np.arange(64) % 26
    models = [TorchMLPClassifier(hidden_layer_sizes=(512, 512), n_classes=26,
                                 random_state=s).train_steps(X, y, 2)
              for s in range(args.clients)]
    whole, sample = TorchMLPClassifier.state_dict, model_format.DEFLATE_SAMPLE

    def old_state(self: TorchMLPClassifier, **_: bool) -> dict:
        return torch_state.mlp_state_dict(self)

    def write(old: bool, path: Path) -> float:
        TorchMLPClassifier.state_dict = old_state if old else whole  # type: ignore[method-assign]
        model_format.DEFLATE_SAMPLE = 1 << 16 if old else sample
        try:
            start = time.process_time()
            write_models_file(path, {"models": models})
            return time.process_time() - start
        finally:
            TorchMLPClassifier.state_dict = whole  # type: ignore[method-assign]
            model_format.DEFLATE_SAMPLE = sample

    def snapshot(old: bool) -> float:
        start = time.process_time()
        for m in models:
            state = prefixed("learner", m.state_dict())
            (copied if old else own_copies)(state)
        return time.process_time() - start

    times: dict[str, list[float]] = {k: [] for k in
                                     ("file old", "file new", "snap old", "snap new")}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            times["file old"].append(write(True, Path(tmp) / "old.npz"))
            times["file new"].append(write(False, Path(tmp) / "new.npz"))
            times["snap old"].append(snapshot(True))
            times["snap new"].append(snapshot(False))
        same = (Path(tmp) / "old.npz").read_bytes() == (Path(tmp) / "new.npz").read_bytes()
    best = {k: min(v) for k, v in times.items()}
    print(f"{args.clients} clients, mlp (512, 512) on 16 features, 26 classes; "
          f"best of {args.repeats}, CPU seconds")
    print(f"models file: old {best['file old']:.3f}  new {best['file new']:.3f}  "
          f"ratio {best['file old'] / best['file new']:.2f}  same bytes: {same}")
    print(f"snapshot:    old {best['snap old']:.3f}  new {best['snap new']:.3f}  "
          f"ratio {best['snap old'] / best['snap new']:.2f}")


if __name__ == "__main__":
    main()
