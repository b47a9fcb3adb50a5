"""Clients' DP-SGD steps run together (DP-FedAvg with record-level DP, DP-FedCT's labellers
and DP site models, on one accelerator).

Each client's step is :func:`fedlabels.learners.dpsgd.dpsgd_steps`'s: a Poisson sample of its
private records drawn from **its own secret generator**, each example's gradient clipped to
norm C, N(0, σ²C²) noise from the same generator added to the clipped sum, the clipped
gradients of a minibatch of public auxiliary rows added, the sum divided by ``q·n`` plus the
auxiliary batch, and Adam. Here the clients' samples are stacked (padded to the largest), one
forward and one backward pass of the stacked networks give every example's output gradient,
and the per-example norms and clipped sums come in closed form for a stack of ``Linear`` and
``ReLU`` layers (as in :func:`~fedlabels.learners.dpsgd.clipped_gradient_sum`), with batched
matrix products. Every client draws its sample and its noise from its own generator in the
order it draws them alone, so with the same generators the result equals the one-by-one
steps up to floating-point rounding; the noise is still drawn by the client's generator,
where it is added, and each client's privacy accounting (done by its caller per step) is
unchanged. Other networks without batch normalisation or buffers (a CNN, your own module)
get every example's gradient from ``torch.func`` (``vmap`` over the clients of ``vmap`` over
the examples of ``grad``, :class:`PerExampleSums`), clipped and summed the same way, clients
in chunks whose per-example gradients fit in memory.

The noise is drawn on the host (the secret generator is numpy's, seeded from the OS CSPRNG):
per step, one normal per parameter per client, the clients' draws in parallel threads
(:func:`noise_threads`; each from its own generator, so the streams are those of the
one-by-one steps), copied to the device in one transfer. On CUDA the next step's draws are
made while the device computes the current one, into the other of two page-locked buffers
(:class:`NoiseBuffers`), whose copy does not block the host.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import nn

from fedlabels.learners.batch_jobs import DPSGDJob
from fedlabels.learners.batched import (
    RowPool,
    architecture_of,
    aux_rows,
    batch_key,
    stacked_adam,
    stacked_state,
    write_back,
)
from fedlabels.learners.dpsgd import clip_scale
from fedlabels.learners.resident_rows import ResidentRows
from fedlabels.learners.stacked_mlp import linear_relu, linear_stack
from fedlabels.learners.torch_mlp import adam_step


def _biased_linear_stack(model: nn.Module) -> bool:
    """Whether ``model`` is a stack of ``Linear`` layers with biases and ``ReLU`` (what
    :func:`~fedlabels.learners.stacked_mlp.linear_stack` runs and the clipped sums expect: a
    weight and a bias per layer)."""
    return linear_relu(model) and all(type(m) is nn.ReLU or m.bias is not None
                                      for m in model)


def _per_example_kind(learner: Any) -> str | None:
    """How a built learner's DP-SGD steps run together: ``"linear"`` (a stack of ``Linear``
    layers with biases and ``ReLU``: per-example norms in closed form), ``"func"`` (any
    other network without batch statistics or buffers, dropout included, its inputs rows or
    images: a CNN, your own module; per-example gradients by ``torch.func``), or ``None``
    (alone)."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.learners.torch_net import TorchNetClassifier

    inputs = type(learner)._inputs
    if inputs is TorchMLPClassifier._inputs and _biased_linear_stack(learner.model_):
        return "linear"
    # batch statistics mix a batch's examples (DP-SGD refuses them); a buffer would be read
    # from the stacked network's meta copy
    arch = architecture_of(learner.model_)
    if arch is None or arch.batch_norm or arch.buffers:
        return None
    return "func" if inputs in (TorchMLPClassifier._inputs, TorchNetClassifier._inputs) \
        else None


def dpsgd_groups(jobs: Sequence[DPSGDJob]) -> list[list[int]]:
    """Indices of ``jobs`` whose DP-SGD steps can run together, in groups."""
    groups: dict[Any, list[int]] = {}
    alone: list[list[int]] = []
    for i, job in enumerate(jobs):
        ln = job.learner
        key = batch_key(ln)
        # a learner that augments images crops and flips alone (the stacked step does not)
        if key is None or _per_example_kind(ln) is None or getattr(ln, "augment", False):
            alone.append([i])
            continue
        config = (float(job.config.noise_multiplier), float(job.config.sample_rate),
                  float(job.config.clip))
        aux = job.X_aux is not None and job.y_aux is not None and len(job.y_aux) > 0
        groups.setdefault((key, int(job.n_steps), config, aux), []).append(i)
    return list(groups.values()) + alone


def noise_threads(device: str | torch.device, n_clients: int) -> int:
    """Host threads that draw a group's noise (each client's from its own generator, in
    parallel: numpy releases the GIL while it fills an array): on a GPU, whose host cores
    are otherwise idle while the group trains, the usable cores; on the CPU, the training
    threads (:func:`fedlabels.core.threads.torch_threads`, default 1). At most one per
    client."""
    from fedlabels.core.threads import available_cores, torch_threads

    cores = torch_threads() if torch.device(device).type == "cpu" else available_cores()
    return max(1, min(int(cores), int(n_clients)))


def dpsgd_together(jobs: Sequence[DPSGDJob], rows: ResidentRows | None = None,
                   threads: int | None = None) -> None:
    """Run every job's DP-SGD steps: compatible learners in one vectorised pass per step,
    the rest one by one; each learner ends as if it had trained alone with its generator.
    ``threads``: host threads drawing the noise (default :func:`noise_threads`)."""
    from fedlabels.learners.dpsgd import dpsgd_steps

    for group in dpsgd_groups(jobs):
        if len(group) == 1:
            job = jobs[group[0]]
            dpsgd_steps(job.learner, job.X, job.y, job.n_steps, job.config, job.rng,
                        job.X_aux, job.y_aux, job.aux_index)
        else:
            chosen = [jobs[i] for i in group]
            n = noise_threads(chosen[0].learner.device, len(chosen)) if threads is None \
                else max(1, min(int(threads), len(chosen)))
            if n == 1:
                _dpsgd_group(chosen, rows, map)
            else:
                with ThreadPoolExecutor(n, thread_name_prefix="fedlabels-noise") as pool:
                    _dpsgd_group(chosen, rows, pool.map)


class _Sources:
    """A group's rows on the device (private rows, the shared public rows once) and labels,
    with each client's offsets, its auxiliary cursor and its auxiliary row map."""

    def __init__(self, jobs: Sequence[DPSGDJob], device: torch.device,
                 rows: ResidentRows | None) -> None:
        pool = RowPool(int(jobs[0].learner.n_features_in_))
        labels: list[np.ndarray] = []
        n_labels = 0
        self.clients: list[tuple[int, int, int, int, Any, np.ndarray | None]] = []
        for job in jobs:
            y = np.asarray(job.y, dtype=np.int64)
            x_at, y_at = pool.place(np.asarray(job.X)), n_labels
            labels.append(y)
            n_labels += len(y)
            xa_at = ya_at = 0
            aux, rows_of_aux = None, None
            n_aux = 0 if job.X_aux is None or job.y_aux is None else len(job.y_aux)
            if n_aux:
                Xa = np.asarray(job.X_aux)
                rows_of_aux = aux_rows(job.aux_index, n_aux, len(Xa))
                xa_at, ya_at = pool.place(Xa), n_labels
                labels.append(np.asarray(job.y_aux, dtype=np.int64))
                n_labels += n_aux
                aux = job.learner._cursor(1, n_aux)  # as dpsgd_steps: public, seeded order
            self.clients.append((x_at, y_at, xa_at, ya_at, aux, rows_of_aux))
        self.x = pool.tensor(device, rows)
        self.y = torch.from_numpy(np.concatenate([*labels, [0]])).to(device)
        self.pad = (pool.n_rows, n_labels)


def _dpsgd_group(jobs: list[DPSGDJob], rows: ResidentRows | None,
                 mapper: Callable[..., Iterable[np.ndarray]]) -> None:
    learners = [j.learner for j in jobs]
    for ln in learners:
        ln._resident()
    first = learners[0]
    device = torch.device(first.device)
    params, _ = stacked_state(learners)
    opt = stacked_adam(learners, params)
    linear = _per_example_kind(first) == "linear"
    forward = linear_stack(first.model_, params) if linear else None
    sums = None if linear else PerExampleSums(first)
    stacked = list(params.values())  # the network's parameters: the noise's order
    shapes = [tuple(p.shape[1:]) for p in stacked]
    sizes = [int(np.prod(s)) for s in shapes]
    config = jobs[0].config
    sigma_c, q, clip = (float(config.noise_multiplier) * float(config.clip),
                        float(config.sample_rate), float(config.clip))
    sources = _Sources(jobs, device, rows)
    n_private = [len(j.y) for j in jobs]
    buffers = NoiseBuffers(len(jobs), sum(sizes), device)
    for ln in learners:
        if not ln.model_.training:
            ln.model_.train()

    def draw(step: int) -> list[np.ndarray]:
        """Every client's Poisson sample and noise for ``step``, each from its own generator
        in dpsgd_steps' order (clients in parallel threads: no generator is shared), the
        noise into the step's host buffer."""
        noise = buffers.host(step)

        def secret_draws(c: int) -> np.ndarray:
            rng = jobs[c].rng
            idx = np.flatnonzero(rng.random(n_private[c]) < q)
            rng.standard_normal(out=noise[c], dtype=np.float32)
            return idx

        return list(mapper(secret_draws, range(len(jobs))))

    n_steps = int(jobs[0].n_steps)
    samples = draw(0) if n_steps else []
    for step in range(n_steps):
        drawn, weights = [], []
        for c, idx in enumerate(samples):  # the public minibatches: the learners' cursors
            aux = sources.clients[c][4]
            aidx = aux.next() if aux is not None else None
            drawn.append((idx, aidx))
            weights.append(q * n_private[c] + (0 if aidx is None else len(aidx)))
        index, mask = _index(drawn, sources)
        x = sources.x[index[0].to(device)]
        y = sources.y[index[1].to(device)]
        on_device = buffers.to_device(step)
        if forward is not None:
            summed = _clipped_sums(forward, x, y, mask.to(device), clip)
        else:
            assert sums is not None
            summed = sums(params, x, y, mask.to(device), clip)
        scale = torch.tensor(weights, dtype=torch.float32, device=device)
        at = 0
        for p, g, shape, size in zip(stacked, summed, shapes, sizes, strict=True):
            z = on_device[:, at : at + size].view(len(jobs), *shape)
            at += size
            p.grad = (g + z * sigma_c) / scale.view(-1, *[1] * len(shape))
        adam_step(opt)
        if step + 1 < n_steps:  # the host draws the next step while a GPU computes this one
            samples = draw(step + 1)
    write_back(learners, params, opt)
    for ln in learners:
        ln.steps_ += int(jobs[0].n_steps)


#: the most bytes of per-example gradients a group holds at once on the CPU (clients are
#: taken in chunks of as many as fit; each client's are its sample's rows x its
#: parameters); on a GPU a quarter of its free memory when the group starts (the
#: scaled copies and temporaries take about as much again)
PER_EXAMPLE_BYTES = 1 << 30


def per_example_budget(device: torch.device) -> int:
    """Bytes of per-example gradients a group may hold at once on ``device``."""
    if device.type == "cuda":  # the gradients, their scaled copies and temporaries
        free, _ = torch.cuda.mem_get_info(device)
        return int(free) // 4
    return PER_EXAMPLE_BYTES


class PerExampleSums:
    """Per client, Σ_i clip_C(∇ℓ(x_i, y_i)) per parameter for any network without batch
    statistics or buffers (:func:`~fedlabels.learners.dpsgd.clipped_gradient_sum`'s
    ``torch.func`` form, stacked): ``vmap`` over the clients of ``vmap`` over the examples
    of ``grad`` of each example's cross-entropy through ``functional_call``; padding rows
    (mask 0) add nothing. Dropout draws each example's masks, as alone, so such a network's
    steps equal its own in distribution; without dropout, up to rounding. Clients go in
    chunks whose per-example gradients fit ``max_bytes`` (default
    :func:`per_example_budget`)."""

    def __init__(self, first: Any, max_bytes: int | None = None) -> None:
        from torch.func import functional_call, grad, vmap

        # in training mode whatever mode the learner was left in (a prediction's eval):
        # dropout drops here as in dpsgd_steps, which puts the network in training mode
        base = copy.deepcopy(first.model_).to("meta").train()
        self.base = base

        def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor
                 ) -> torch.Tensor:
            out = functional_call(base, p, (xi.unsqueeze(0),))
            return nn.functional.cross_entropy(out.float(), yi.unsqueeze(0))

        # "different": dropout's masks each example's own, as alone (in distribution)
        self.per_client = vmap(vmap(grad(loss), in_dims=(None, 0, 0), randomness="different"),
                               randomness="different")
        self.shape = getattr(first, "shape_", None)  # the network's images, if any
        self.max_bytes = per_example_budget(torch.device(first.device)) \
            if max_bytes is None else int(max_bytes)

    def __call__(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                 mask: torch.Tensor, clip: float) -> list[torch.Tensor]:
        g, width = x.shape[:2]
        if self.shape is not None:  # as the learner's _inputs makes them
            x = x.reshape(g, width, *self.shape)
        detached = {n: p.detach() for n, p in params.items()}
        per_bytes = width * sum(p[0].numel() for p in detached.values()) * 4
        chunk = max(1, self.max_bytes // max(per_bytes, 1))
        sums = [torch.empty_like(p) for p in detached.values()]
        for start in range(0, g, chunk):
            part = slice(start, start + chunk)
            per = self.per_client({n: p[part] for n, p in detached.items()}, x[part],
                                  y[part])
            norms = torch.sqrt(sum(t.flatten(2).pow(2).sum(2) for t in per.values()))
            ok, scale = clip_scale(norms, clip)  # a non-finite gradient adds nothing
            real = (mask[part] > 0) & ok  # padding rows: left out, not multiplied by 0 (a
            # network whose gradient at a zero row is NaN would spread it)
            for k, t in enumerate(per.values()):
                shape = (*scale.shape, *[1] * (t.dim() - 2))
                sums[k][part] = torch.where(real.view(shape), t * scale.view(shape),
                                            t.new_zeros(())).sum(1)
        return sums


class NoiseBuffers:
    """Two host buffers of a step's noise (clients x parameters), used in turn: the host
    draws step t + 1's noise into one while step t's, in the other, is copied to the device
    and used there. On CUDA they are page-locked and copied without blocking the host (from
    pageable memory a copy waits for the device's earlier work and then moves at a fraction
    of the bus's speed: 268 MB a step for 100 clients of the paper's MLP), and a buffer is
    drawn into again only once the copy that read it has finished. Elsewhere a step has used
    its noise before the next is drawn: one buffer, which the CPU's step reads in place."""

    def __init__(self, n_clients: int, n_params: int, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.tensors = [torch.empty((n_clients, n_params), dtype=torch.float32,
                                    pin_memory=self.cuda) for _ in range(2 if self.cuda else 1)]
        self.copied: list[Any] = [None] * len(self.tensors)  # each buffer's last copy's event

    def host(self, step: int) -> np.ndarray:
        """``step``'s buffer, to draw into (once the device has read what it held)."""
        k = step % len(self.tensors)
        if self.copied[k] is not None:
            self.copied[k].synchronize()
            self.copied[k] = None
        array: np.ndarray = self.tensors[k].numpy()
        return array

    def to_device(self, step: int) -> torch.Tensor:
        """``step``'s noise on the device (the buffer itself on the CPU)."""
        k = step % len(self.tensors)
        if self.device.type == "cpu":
            return self.tensors[k]
        if not self.cuda:
            return self.tensors[k].to(self.device)
        out = self.tensors[k].to(self.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        self.copied[k] = event
        return out


def _index(drawn: Sequence[tuple[np.ndarray, np.ndarray | None]], sources: _Sources
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's index (2, clients, slots) into the rows and labels (each client's sample,
    then its auxiliary minibatch, then padding) and the mask of real rows."""
    lens = [len(i) + (0 if a is None else len(a)) for i, a in drawn]
    width = max(1, max(lens))
    index = np.empty((2, len(drawn), width), dtype=np.int64)
    index[0], index[1] = sources.pad
    mask = np.zeros((len(drawn), width), dtype=np.float32)
    for c, ((idx, aidx), (x_at, y_at, xa_at, ya_at, _, rows_of_aux)) in enumerate(
            zip(drawn, sources.clients, strict=True)):
        k = len(idx)
        index[0, c, :k], index[1, c, :k] = idx + x_at, idx + y_at
        if aidx is not None:
            rows = aidx if rows_of_aux is None else rows_of_aux[aidx]
            index[0, c, k : k + len(aidx)] = rows + xa_at
            index[1, c, k : k + len(aidx)] = aidx + ya_at
        mask[c, : lens[c]] = 1.0
    return torch.from_numpy(index), torch.from_numpy(mask)


def _clipped_sums(forward: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                  mask: torch.Tensor, clip: float) -> list[torch.Tensor]:
    """Per client, Σ_i clip_C(∇ℓ(x_i, y_i)) per parameter (weight, bias per layer), for
    stacked inputs (clients, slots, features); padding rows (mask 0) add nothing.

    Example i's gradient of a linear layer is ``b_i a_iᵀ`` and ``b_i`` (``a_i`` the layer's
    input, ``b_i`` the summed loss's gradient at its output), so its squared norm is
    ``Σ_layers ||b_i||² (||a_i||² + 1)`` and the clipped sums are ``(s ⊙ B)ᵀ A``.
    """
    taps: list[tuple[torch.Tensor, torch.Tensor]] = []
    h = forward(x, taps)  # the stacked MLP, each linear layer's input and output kept
    inputs, outputs = [a for a, _ in taps], [b for _, b in taps]
    losses = nn.functional.cross_entropy(h.reshape(-1, h.shape[-1]), y.reshape(-1),
                                         reduction="none")
    back = torch.autograd.grad((losses * mask.reshape(-1)).sum(), outputs)
    sq = sum((b.pow(2).sum(-1) * (a.pow(2).sum(-1) + 1.0))
             for a, b in zip(inputs, back, strict=True))
    ok, scale = clip_scale(torch.sqrt(torch.as_tensor(sq)), clip)  # non-finite: adds 0
    sums: list[torch.Tensor] = []
    for a, b in zip(inputs, back, strict=True):
        sb = torch.where(ok.unsqueeze(-1), b * scale.unsqueeze(-1), 0.0)
        sums += [torch.bmm(sb.transpose(1, 2), torch.where(ok.unsqueeze(-1), a, 0.0)),
                 sb.sum(dim=1)]
    return sums
