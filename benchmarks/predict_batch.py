"""A CNN's prediction time on the CPU per ``predict_batch_size``, side by side in one process.

Random 28x28 grey images (Fashion-MNIST's shape, seeded), a network trained two steps; each
repetition predicts all rows once per chunk size (the order rotates), and a size's figure
is the median over repetitions of its time divided by that of 1024 in the same repetition
(wall and CPU time), so a machine busy with other work biases no size. Every size's
probabilities must equal the first prediction's to rounding. docs/neural.md has figures.

Usage::

    nice -n 10 python benchmarks/predict_batch.py --threads 1 --n 10000 --reps 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from fedlabels.learners.torch_net import TorchNetClassifier


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--arch", default="small", help="a built-in architecture (default small)")
    p.add_argument("--n", type=int, default=10_000, help="rows predicted (default 10000)")
    p.add_argument("--reps", type=int, default=8, help="repetitions (default 8)")
    p.add_argument("--sizes", default="128,256,512,1024", help="chunk sizes; 1024 is the base")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    sizes = sorted({*(int(s) for s in args.sizes.split(",")), 1024})
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    X = rng.random((args.n, 784), dtype=np.float32)
    model = TorchNetClassifier(args.arch, n_classes=10, random_state=args.seed)
    model.train_steps(X[:512], rng.integers(0, 10, 512), 2)
    model.set_params(predict_batch_size=1024)
    first = model.predict_proba(X)  # also the warm-up
    wall: dict[int, list[float]] = {b: [] for b in sizes}
    cpu: dict[int, list[float]] = {b: [] for b in sizes}
    for rep in range(args.reps):
        for size in sizes[rep % len(sizes):] + sizes[: rep % len(sizes)]:
            model.set_params(predict_batch_size=size)
            start, start_cpu = time.perf_counter(), time.process_time()
            proba = model.predict_proba(X)
            wall[size].append(time.perf_counter() - start)
            cpu[size].append(time.process_time() - start_cpu)
            np.testing.assert_allclose(proba, first, rtol=1e-4, atol=1e-6)
    print(f"arch={args.arch} n={args.n} threads={torch.get_num_threads()} reps={args.reps} "
          f"seed={args.seed} torch={torch.__version__}")
    for size in sizes:
        ratio = statistics.median(w / b for w, b in zip(wall[size], wall[1024], strict=True))
        ratio_cpu = statistics.median(c / b for c, b in zip(cpu[size], cpu[1024], strict=True))
        print(f"  {size:>5} rows: wall median {statistics.median(wall[size]):6.2f} s, CPU "
              f"median {statistics.median(cpu[size]):6.2f} s; time / time of 1024: wall "
              f"{ratio:.2f}, CPU {ratio_cpu:.2f}")


if __name__ == "__main__":
    main()
