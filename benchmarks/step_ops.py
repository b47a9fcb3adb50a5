"""Aten calls a step of clients trained together, the current step against the step before
2026-11-28 (autograd and unfused Adam), counted with ``TorchDispatchMode`` on the CPU: what a
GPU's host launches for a step, where the step is bound by the host.

    python benchmarks/step_ops.py                       # 5 clients of the paper's MLP
    python benchmarks/step_ops.py --clients 3 --hidden 16 --features 20
"""

from __future__ import annotations

import argparse
import sys
from itertools import pairwise
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from batched_overhead import autograd_version
from fedlabels.learners import batched, build_learner, parse_model_spec
from fedlabels.learners.batch_jobs import TrainJob


class Count(TorchDispatchMode):
    """Counts every aten call made under it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def calls_per_step(version: Any, clients: int, hidden: str, features: int) -> float:
    """Aten calls a step of ``clients`` MLPs (64 private + 64 auxiliary rows each): the
    difference of a 20- and a 10-step call, over 10 (the per-call work cancels)."""
    (spec,) = parse_model_spec(f"mlp(hidden={hidden})")
    models = [build_learner(spec, n_classes=10, random_state=i) for i in range(clients)]
    rng = np.random.default_rng(0)
    X = rng.random((200, features), dtype=np.float32)
    y = rng.integers(0, 10, 200)
    counts = []
    for steps in (5, 10, 20):  # the first call builds the networks and Adam's moments
        with Count() as count:
            version.train_together([TrainJob(m, X, y, steps, X, y) for m in models])
        counts.append(count.calls)
    return (counts[2] - counts[1]) / 10


def adam_calls(fused: bool, shapes: list[tuple[int, ...]]) -> int:
    """Aten calls of one Adam step over stacked tensors: ``foreach`` (CUDA's default) or
    fused (the stacked clients' Adam on CUDA since 2026-11-28)."""
    params = [torch.zeros(s, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.ones_like(p)
    opt = torch.optim.Adam(params, **({"fused": True} if fused else {"foreach": True}))
    opt.step()  # the moments are made
    with Count() as count:
        opt.step()
    return count.calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--hidden", default="512-512", help="the MLP's hidden layers")
    parser.add_argument("--features", type=int, default=784)
    args = parser.parse_args(argv)
    if args.clients < 1 or args.features < 1:
        parser.error("--clients and --features must be at least 1")
    torch.set_num_threads(1)
    before = calls_per_step(autograd_version(), args.clients, args.hidden, args.features)
    now = calls_per_step(batched, args.clients, args.hidden, args.features)
    dims = [args.features, *(int(h) for h in args.hidden.split("-")), 10]
    shapes = [s for i, o in pairwise(dims)
              for s in ((args.clients, o, i), (args.clients, o))]
    foreach, fused = adam_calls(False, shapes), adam_calls(True, shapes)
    # on the CPU both versions step with the unfused one-tensor Adam: its calls, counted
    # apart, leave the gather, forward, loss and backward
    single = [torch.zeros(s, requires_grad=True) for s in shapes]
    for p in single:
        p.grad = torch.ones_like(p)
    opt = torch.optim.Adam(single, foreach=False)
    opt.step()
    with Count() as count:
        opt.step()
    rest_before, rest_now = before - count.calls, now - count.calls
    print(f"{args.clients} clients, mlp(hidden={args.hidden}), {args.features} features: "
          f"gather, forward, loss and backward {rest_before:.0f} -> {rest_now:.0f} aten calls "
          f"a step; Adam foreach {foreach} -> fused {fused}; a CUDA step "
          f"{rest_before + foreach:.0f} -> {rest_now + fused:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
