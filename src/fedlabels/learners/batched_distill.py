"""Clients' ``distill_steps`` calls run together (DD, FedMD, DS-FL on one accelerator).

A learner's distillation step is ``weight · mean_j H(P[j], softmax(f(X_soft[j])))`` over one
minibatch of its soft targets plus, with private rows, the mean cross-entropy of one
minibatch of them (:meth:`fedlabels.learners.torch_mlp.TorchMLPClassifier.distill_steps`).
Here every client's step is one row of a stacked batch: its soft rows, then its private
rows, then padding; the targets are the soft rows' probabilities and the private rows' one-hot
labels (the soft cross-entropy of a one-hot target is the cross-entropy), weighted
``weight / soft rows`` and ``1 / private rows`` (padding 0), so the summed loss is the sum of
the clients' own losses and one backward pass and one stacked Adam step
(:func:`fedlabels.learners.batched.stacked_adam`) update them all. Minibatches come from each
learner's own cursors, created and drawn in the order ``distill_steps`` draws them; the result
equals the one-by-one calls up to floating-point rounding. Learners that augment images (whose
draws follow each forward pass) and learners that cannot train together distil alone.

Networks with batch normalisation or dropout run a step as their clients do alone: two
forward passes, the soft rows' and then the private rows' (each with its own batch
statistics, each client's running statistics updated twice), in groups whose clients' batches
are of one size (no padding); with dropout each client draws its soft pass's seed after its
soft minibatch and its private pass's after its private one, from its own generator, as
alone, and the group's masks come from those seeds (each client's its own: equal to the
sequential run in distribution, not in draws).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fedlabels.learners.batch_jobs import DistillJob
from fedlabels.learners.batched import (
    RowPool,
    batch_key,
    client_seed,
    graphable,
    group_seed,
    stack_for_training,
    stacked_inputs,
    stochastic,
    write_back,
    write_back_buffers,
)
from fedlabels.learners.step_graphs import replay_steps
from fedlabels.learners.torch_mlp import adam_step

#: at most about this many index entries are planned (copied to the device) at once
_PLAN_ENTRIES = 1 << 21


def distill_groups(jobs: Sequence[DistillJob]) -> list[list[int]]:
    """Indices of ``jobs`` that can distil together, in groups (singletons distil alone)."""
    groups: dict[Any, list[int]] = {}
    alone: list[list[int]] = []
    for i, job in enumerate(jobs):
        key = batch_key(job.learner)
        private = job.X is not None and job.y is not None and len(job.y) > 0
        if key is None or getattr(job.learner, "augment", False):
            alone.append([i])
        else:  # batch statistics, dropout: clients whose batches are of one size together
            sizes = distill_sizes(job) if stochastic(job.learner) else None
            groups.setdefault((key, int(job.n_steps), private, sizes), []).append(i)
    return list(groups.values()) + alone


def distill_sizes(job: DistillJob) -> tuple[int, int]:
    """A job's rows per step: its soft batch and its private batch."""
    size = int(job.learner.batch_size)
    n_private = 0 if job.X is None or job.y is None else len(job.y)
    return min(len(job.X_soft), size), min(n_private, size)


def distill_together(jobs: Sequence[DistillJob], graphs: bool = False) -> int:
    """Run every job's ``distill_steps``: compatible learners in one vectorised pass per
    step, the rest one by one; each learner ends as if it had distilled alone. ``graphs``:
    replay each group's step as a CUDA graph where it can
    (:mod:`fedlabels.learners.step_graphs`). The number of groups that did."""
    graphed = 0
    for group in distill_groups(jobs):
        if len(group) == 1:
            job = jobs[group[0]]
            job.learner.distill_steps(job.X_soft, job.P_soft, job.n_steps, X=job.X, y=job.y,
                                      weight=job.weight)
        else:
            graphed += _distill_group([jobs[i] for i in group], graphs)
    return graphed


class _Plan:
    """A group's distillation minibatches: row and target indices per step, drawn from the
    learners' cursors exactly as ``distill_steps`` draws them, and the fixed row weights."""

    def __init__(self, jobs: Sequence[DistillJob], device: torch.device, steps: int,
                 masks: bool = False) -> None:
        self.remaining = int(steps)
        learners = [j.learner for j in jobs]
        n_classes = int(learners[0].n_outputs_)
        pool = RowPool(int(learners[0].n_features_in_))
        targets: list[np.ndarray] = []
        n_targets = 0
        self.parts: list[tuple[Any, Any, int, int, int, int]] = []
        sizes: list[tuple[int, int]] = []
        for job, ln in zip(jobs, learners, strict=True):
            Xs = np.asarray(job.X_soft)
            y = None if job.X is None or job.y is None or not len(job.y) else \
                np.asarray(job.y, dtype=np.int64)
            # the cursors are created in distill_steps' order: the private one first
            main = None if y is None else ln._cursor(0, len(y))
            soft = ln._cursor(2, len(Xs))
            xs_at, ts_at = pool.place(Xs), n_targets
            targets.append(np.asarray(job.P_soft, dtype=np.float32))
            n_targets += len(Xs)
            x_at = t_at = 0
            if y is not None:
                x_at, t_at = pool.place(np.asarray(job.X)), n_targets
                targets.append(np.eye(n_classes, dtype=np.float32)[y])
                n_targets += len(y)
            self.parts.append((soft, main, xs_at, ts_at, x_at, t_at))
            sizes.append((min(len(Xs), soft.batch_size),
                          0 if main is None else min(main.n, main.batch_size)))
        self.lens = [a + b for a, b in sizes]
        self.width = max(self.lens)
        weights = np.zeros((len(jobs), self.width), dtype=np.float32)
        for c, ((n_soft, n_private), job) in enumerate(zip(sizes, jobs, strict=True)):
            weights[c, :n_soft] = float(job.weight) / max(n_soft, 1)
            weights[c, n_soft : n_soft + n_private] = 1.0 / max(n_private, 1)
        self.x = pool.tensor(device)  # not kept: soft inputs change from round to round
        self.t = torch.from_numpy(np.concatenate(
            [*targets, np.zeros((1, n_classes), np.float32)])).to(device)
        self.w = torch.from_numpy(weights).to(device)
        self.pad = (pool.n_rows, n_targets)
        # each client's offsets as columns (soft rows, soft targets, rows, targets): a step
        # of equal batches is indexed for all clients at once
        self._columns = np.array([part[2:] for part in self.parts], dtype=np.int64).T[
            :, :, None]
        self._equal = len(set(sizes)) == 1  # every client's soft and private batch sizes
        self.device = device
        self._planned: list[torch.Tensor] = []
        # batch normalisation or dropout: a step's soft and private rows are two forward
        # passes (``soft_width`` rows, then the rest), and with dropout (``masks``) each
        # pass's seed is drawn right after its minibatch, step by step (not planned ahead)
        self.two_passes = any(stochastic(ln) for ln in learners)
        self.masks = masks
        self.soft_width = sizes[0][0]
        self.seeds: tuple[int | None, int | None] = (None, None)
        self._learners = learners

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next step's rows (clients, slots, features) and targets (clients, slots, C)."""
        return self.gather(self.next_index())

    def next_index(self) -> torch.Tensor:
        """The next step's index (2, clients, slots) into the rows and targets, on the
        device (every step of a call has this shape)."""
        if self.masks:
            self.remaining -= 1
            return torch.from_numpy(self._draw_seeded()).to(self.device)
        if not self._planned:  # the cursors draw no step beyond the call's
            chunk = min(self.remaining,
                        max(1, _PLAN_ENTRIES // (2 * len(self.parts) * self.width)))
            self.remaining -= chunk
            drawn = torch.from_numpy(np.stack([self._draw() for _ in range(chunk)]))
            self._planned = list(drawn.to(self.device).unbind(0))[::-1]
        return self._planned.pop()

    def gather(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows and targets that ``index`` selects (device work alone: what a CUDA
        graph of the step replays)."""
        return self.x[index[0]], self.t[index[1]]

    def _draw_seeded(self) -> np.ndarray:
        """One step's index, each client drawing as ``distill_steps`` does alone: its soft
        minibatch, its soft pass's dropout seed, its private minibatch, that pass's seed;
        the group's two seeds go to ``seeds``. The group's batches are of one size."""
        index = np.empty((2, len(self.parts), self.width), dtype=np.int64)
        ks = self.soft_width
        soft_seeds, main_seeds = [], []
        for c, (ln, (soft, main, xs_at, ts_at, x_at, t_at)) in enumerate(
                zip(self._learners, self.parts, strict=True)):
            sidx = soft.next()
            soft_seeds.append(client_seed(ln))
            index[0, c, :ks], index[1, c, :ks] = sidx + xs_at, sidx + ts_at
            if main is not None:
                idx = main.next()
                main_seeds.append(client_seed(ln))
                index[0, c, ks:], index[1, c, ks:] = idx + x_at, idx + t_at
        self.seeds = (group_seed(soft_seeds), group_seed(main_seeds) if main_seeds else None)
        return index

    def _draw(self) -> np.ndarray:
        """One step's index (2, clients, slots): each client draws its soft batch, then its
        private one (its own generator's order); where every client's batches have the same
        sizes, the index is built for all clients at once."""
        softs = [part[0].next() for part in self.parts]
        mains = [None if part[1] is None else part[1].next() for part in self.parts]
        if self._equal:
            xs_at, ts_at, x_at, t_at = self._columns
            ks = len(softs[0])
            index = np.empty((2, len(self.parts), self.width), dtype=np.int64)
            soft = np.stack(softs)
            np.add(soft, xs_at, out=index[0, :, :ks])
            np.add(soft, ts_at, out=index[1, :, :ks])
            if ks < self.width:  # every client has private rows
                main = np.stack([m for m in mains if m is not None])
                np.add(main, x_at, out=index[0, :, ks:])
                np.add(main, t_at, out=index[1, :, ks:])
            return index
        index = np.empty((2, len(self.parts), self.width), dtype=np.int64)
        index[0], index[1] = self.pad
        for c, (sidx, idx, (_, _, xs_at, ts_at, x_at, t_at)) in enumerate(
                zip(softs, mains, self.parts, strict=True)):
            k = len(sidx)
            index[0, c, :k], index[1, c, :k] = sidx + xs_at, sidx + ts_at
            if idx is not None:
                index[0, c, k : k + len(idx)] = idx + x_at
                index[1, c, k : k + len(idx)] = idx + t_at
        return index


def _distill_group(jobs: list[DistillJob], graphs: bool = False) -> bool:
    """Distil one group together; with ``graphs``, replay a CUDA graph of the step where
    :func:`~fedlabels.learners.batched.graphable` allows. Whether it did."""
    from fedlabels.learners.devices import autocast

    learners = [j.learner for j in jobs]
    for ln in learners:
        ln._resident()
    first = learners[0]
    device = torch.device(first.device)
    steps = int(jobs[0].n_steps)
    capture = graphs and graphable(first, device, steps)
    params, opt, forward = stack_for_training(learners, capturable=capture)
    plan = _Plan(jobs, device, steps, forward.masks) if steps > 0 else None
    by_hand = forward.by_hand(first.precision)

    def train_on(x_rows: torch.Tensor, target: torch.Tensor) -> None:
        """One step on a gathered minibatch: forward, weighted soft cross-entropy,
        backward, Adam."""
        assert plan is not None
        x_all = stacked_inputs(learners, x_rows, plan.lens)
        if by_hand:  # the MLP in fp32: its gradients without autograd (stacked_mlp)
            forward.stack.gradients(x_all, target, plan.w)  # type: ignore[union-attr]
            adam_step(opt)
            return
        with autocast(first.device, first.precision, cache=not capture):
            if plan.two_passes:  # the soft rows' pass, then the private rows', as alone
                ks, (soft_seed, private_seed) = plan.soft_width, plan.seeds
                outs = [forward(x_all[:, :ks], soft_seed)]
                if x_all.shape[1] > ks:
                    outs.append(forward(x_all[:, ks:], private_seed))
                out = torch.cat(outs, dim=1)
            else:
                out = forward(x_all)
        logp = torch.log_softmax(out.float(), dim=-1)
        (-(target * logp).sum(dim=-1) * plan.w).sum().backward()
        adam_step(opt)

    if capture and plan is not None:
        lens = plan.lens
        replay_steps(lambda at, _sizes, _lens: train_on(*plan.gather(at)),
                     lambda: (plan.next_index(), plan.w, lens), steps, opt, device)
    else:
        for _ in range(steps):
            assert plan is not None
            opt.zero_grad(set_to_none=True)
            train_on(*plan.next())
    if steps:
        write_back(learners, params, opt)
        write_back_buffers(learners, forward.buffers)
    for ln in learners:
        ln.steps_ += steps
    return capture
