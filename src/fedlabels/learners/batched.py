"""Many clients' torch learners trained together: one vectorised step for all of them.

:func:`train_together` takes the same ``train_steps`` calls that the clients would make one
after another and runs them as one: the clients' parameters are stacked
(as ``torch.func.stack_module_state`` does), one forward/backward pass over ``vmap`` of
``functional_call`` computes every client's loss on its own minibatch (for the MLP, batched
matrix products and its gradients by hand: :mod:`fedlabels.learners.stacked_mlp`), and one
Adam step on the stacked tensors updates them all (Adam is elementwise, so this is each
client's own Adam; torch's fused Adam on CUDA). Minibatches are drawn from each learner's
own cursor, in the order ``train_steps`` draws them, and padded to a common size with rows
of weight 0, so clients of unequal sizes train together; the weights, Adam moments and
counters are written back into each learner.
The result equals the sequential run up to floating-point rounding (summation order); on
the CPU, MLP clients whose batches are full train bit for bit as alone.

:func:`predict_together` does the same for ``predict_proba``: the clients' stacked weights
run one ``vmap``'d forward pass per chunk of rows (``predict_batch_size`` rows of every
client at once), so a round's predictions of U, or of the test set, are one batched call.

Learners can train together (:func:`batch_groups`) when they are torch classifiers of one
architecture on one device with the default loss and Adam of the same hyper-parameters and
step count; anything else trains on its own. Batch normalisation trains together: each
client's running statistics are its own stacked buffers, updated in place as its network
would update them, and clients whose batches differ in size (a client with fewer rows than
a batch) form groups of their own, so no padding row enters a batch's statistics; the
result equals the sequential run up to rounding. Dropout trains together in distribution:
each client draws the seed of its step's masks from its own generator as it would alone
(so its minibatches and augmentations stay the sequential run's), and the group's masks
come from those seeds through ``vmap(randomness="different")`` (each client's masks
independent Bernoulli draws, as alone, but not the same draws). Other buffers are stacked
as they are; batch normalisation without a momentum (a cumulative average) trains alone.
The clients' ``distill_steps`` and DP-SGD steps run together in
:mod:`fedlabels.learners.batched_distill` and :mod:`fedlabels.learners.batched_dpsgd`,
with the helpers here (:class:`RowPool`, :func:`stacked_adam`, :func:`write_back`).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.batch_jobs import PredictJob, TrainJob
from fedlabels.learners.resident_rows import ResidentRows, memory_key
from fedlabels.learners.stacked_mlp import linear_relu, linear_stack
from fedlabels.learners.step_graphs import MIN_STEPS, replay_steps
from fedlabels.learners.torch_mlp import adam_step

#: the MLP's training step with its gradients by hand (:mod:`fedlabels.learners.stacked_mlp`);
#: False: through autograd, as before 2026-11-28 (``benchmarks/batched_overhead.py
#: --baseline autograd`` times the two side by side)
GRADIENTS_BY_HAND = True

#: devices whose stacked Adam is torch's fused one (one kernel for all the stacked tensors):
#: CUDA, where a step's launches are its cost. The CPU has one too (7 times faster on a step
#: of 5 clients' paper MLPs, one thread: 2.0 against 14.3 ms), but there the clients
#: trained together keep the arithmetic of each client's own Adam, which the CPU tests
#: compare them with (a CNN's distillation drifts past rounding from one step of another
#: Adam's rounding, as from a 1e-7 change of its weights)
FUSED_ADAM_DEVICES = ("cuda",)

#: why ``batch_clients=on`` refuses a run
NOT_BATCHABLE = ("batch_clients=on needs every client's learner to be a torch classifier that "
                 "trains batched (Adam, the default loss, batch normalisation with a momentum: "
                 "mlp, every cnn(arch=...), your own module so made); use batch_clients="
                 "auto or off.")


def _adam_state(learner: Any) -> tuple[int, tuple[Any, ...]]:
    opt = learner.optimizer_
    (group,) = opt.param_groups
    states = [opt.state.get(p, {}) for p in group["params"]]
    steps = {int(s["step"]) if "step" in s else 0 for s in states}
    if len(steps) != 1:
        return -1, ()
    hyper = (group["lr"], group["betas"], group["eps"], group["weight_decay"],
             group.get("amsgrad", False), group.get("maximize", False))
    return steps.pop(), hyper


def batchable(learner: Any) -> bool:
    """Whether this learner can train batched, judged before it is built: a torch
    classifier with Adam and the default loss (its network, where it is your own, is judged
    once built: :func:`batch_key`)."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    if not isinstance(learner, TorchMLPClassifier) or learner._target_dtype is not np.int64:
        return False
    if getattr(learner, "loss", None) is not None or getattr(learner, "optimizer", None):
        return False
    if hasattr(learner, "model_"):
        return batch_key(learner) is not None
    return True  # the MLP, a built-in CNN; a factory's network is seen when it is built


def batch_key(learner: Any) -> tuple[Any, ...] | None:
    """What learners must share to train together; ``None``: this one cannot."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    if not isinstance(learner, TorchMLPClassifier) or not hasattr(learner, "model_"):
        return None
    if learner._target_dtype is not np.int64 or getattr(learner, "loss", None) is not None:
        return None
    if type(learner.optimizer_) is not torch.optim.Adam:
        return None
    model = learner.model_
    arch = architecture_of(model)
    if arch is None:
        return None
    shapes = arch.params
    step, hyper = _adam_state(learner)
    if step < 0 or hyper[4] or hyper[5]:
        return None
    owned = learner.optimizer_.param_groups[0]["params"]
    if len(owned) != len(shapes) or any(tuple(p.shape) != shape
                                        for p, (_, shape) in zip(owned, shapes, strict=False)):
        return None  # Adam over other tensors than the network's, in its order
    return (type(learner), type(model), shapes, arch.buffers, arch.batch_norm, arch.dropout,
            learner.device, learner.precision, int(learner.batch_size), step, hyper,
            getattr(learner, "shape_", None), bool(getattr(learner, "augment", False)))


class Architecture(NamedTuple):
    """What two networks must share to be stacked, and what their training step does that a
    plain forward pass does not."""

    #: the parameters' names and shapes, in the network's order
    params: tuple[tuple[str, tuple[int, ...]], ...]
    #: the buffers' (batch normalisation's running statistics) names and shapes
    buffers: tuple[tuple[str, tuple[int, ...]], ...]
    #: batch statistics in training: a group's batches must be of one size (no padding)
    batch_norm: bool
    #: random masks in training: drawn afresh at every step (not planned ahead)
    dropout: bool
    #: batch statistics in evaluation too (batch normalisation without running statistics):
    #: such networks predict alone (a group's padding rows would enter the statistics)
    eval_batch_norm: bool


#: each network's :class:`Architecture` (None: it cannot be stacked), found once per
#: network: a round of 100 clients asks for it hundreds of times
_ARCHITECTURES: weakref.WeakKeyDictionary[nn.Module, Architecture | None] = \
    weakref.WeakKeyDictionary()


def architecture_of(model: nn.Module) -> Architecture | None:
    """The network's :class:`Architecture`; ``None`` where it has batch normalisation
    without a momentum (its cumulative average divides by a step count that ``vmap`` cannot
    read per client)."""
    if model not in _ARCHITECTURES:
        norm = nn.modules.batchnorm._BatchNorm
        modules = list(model.modules())
        blocked = any(isinstance(m, norm) and m.track_running_stats
                      and m.momentum is None for m in modules)
        _ARCHITECTURES[model] = None if blocked else Architecture(
            tuple((n, tuple(p.shape)) for n, p in model.named_parameters()),
            tuple((n, tuple(b.shape)) for n, b in model.named_buffers()),
            any(isinstance(m, norm) for m in modules),
            any(isinstance(m, nn.modules.dropout._DropoutNd) for m in modules),
            any(isinstance(m, norm) and not m.track_running_stats for m in modules))
    return _ARCHITECTURES[model]


def stochastic(learner: Any) -> bool:
    """Whether a built learner's training step uses batch statistics or random masks (batch
    normalisation, dropout): such learners train and distil in groups whose batches are of
    one size."""
    arch = architecture_of(learner.model_)
    return arch is None or arch.batch_norm or arch.dropout


def draws_each_step(learner: Any) -> bool:
    """Whether a learner draws from its generator between its minibatches (augmentations,
    dropout's seeds), so that a call's minibatches cannot be drawn ahead of its steps."""
    arch = architecture_of(learner.model_)
    return bool(getattr(learner, "augment", False)) or arch is None or arch.dropout


def dropout_seed(learners: Sequence[Any]) -> int:
    """The seed of a step's dropout masks for a group: each client draws its step's seed
    from its own generator, as its ``_forward`` does alone (so its later draws stay those of
    the sequential run), and the group's seed is made from them all."""
    return group_seed([client_seed(ln) for ln in learners])


def client_seed(learner: Any) -> int:
    """A forward pass's dropout seed, drawn from the learner's generator as alone."""
    return int(learner.rng_.integers(2**63 - 1))


def group_seed(seeds: Sequence[int]) -> int:
    """One seed for a group's masks, made from its clients' seeds."""
    return int(np.random.SeedSequence(list(seeds)).generate_state(1, np.uint64)[0] >> 1)


def step_sizes(job: TrainJob) -> tuple[int, int]:
    """A job's rows per step: its private batch and its auxiliary batch (a cursor draws
    batches of one size, all its rows where it has fewer than a batch)."""
    size = int(job.learner.batch_size)
    n_aux = len(job.y_aux) if job.X_aux is not None and job.y_aux is not None else 0
    return min(len(job.y), size), min(n_aux, size)


def batch_groups(jobs: Sequence[TrainJob]) -> list[list[int]]:
    """Indices of ``jobs`` that can train together, in groups (singletons train alone);
    unbuilt torch learners are built first, as their first ``train_steps`` would."""
    for job in jobs:
        ensure = getattr(job.learner, "_ensure_initialised", None)
        if callable(ensure) and not hasattr(job.learner, "model_"):
            ensure(np.ascontiguousarray(job.X, dtype=np.float32), np.asarray(job.y))
    groups: dict[Any, list[int]] = {}
    alone: list[list[int]] = []
    for i, job in enumerate(jobs):
        key = batch_key(job.learner)
        if key is None:
            alone.append([i])
        else:
            # batch statistics: only clients whose batches are of one size (no padding)
            arch = architecture_of(job.learner.model_)
            sizes = step_sizes(job) if arch is not None and arch.batch_norm else None
            groups.setdefault((key, int(job.n_steps), job.y_aux is not None and
                               len(job.y_aux) > 0, job.w_aux is not None, sizes),
                              []).append(i)
    return list(groups.values()) + alone


def train_together(jobs: Sequence[TrainJob], rows: ResidentRows | None = None,
                   graphs: bool = False, strict: bool = False) -> int:
    """Run every job's ``train_steps``: groups of compatible learners in one vectorised
    pass, the rest one by one. Each learner ends as if it had trained alone. ``rows``: a
    run's cache of its arrays on the device (:mod:`fedlabels.learners.resident_rows`);
    without one, the group's rows are copied to the device every call. ``graphs``: replay
    each group's step as a CUDA graph where it can (:mod:`fedlabels.learners.step_graphs`).
    ``strict`` (``batch_clients=on``): a learner that cannot train batched at all (seen once
    its network is built: your own module with batch normalisation or dropout) is an error,
    not trained alone. The number of groups that did replay a graph."""
    graphed = 0
    for group in batch_groups(jobs):
        chosen = [jobs[i] for i in group]
        if strict and len(chosen) == 1 and batch_key(chosen[0].learner) is None:
            raise FedLabelsError(NOT_BATCHABLE)
        if len(chosen) == 1:
            job = chosen[0]
            job.learner.train_steps(job.X, job.y, job.n_steps, job.X_aux, job.y_aux,
                                    job.w_aux, aux_index=job.aux_index)
        else:
            graphed += _train_group(chosen, rows, graphs)
    return graphed


def predict_groups(jobs: Sequence[PredictJob]) -> list[list[int]]:
    """Indices of ``jobs`` that can predict together: built learners that could train
    together (one architecture, device and precision) on inputs of one width."""
    groups: dict[Any, list[int]] = {}
    alone: list[list[int]] = []
    for i, job in enumerate(jobs):
        key = batch_key(job.learner)
        if key is None or job.X.ndim != 2 or job.X.shape[1] != job.learner.n_features_in_ \
                or architecture_of(job.learner.model_).eval_batch_norm:  # type: ignore[union-attr]
            alone.append([i])
        else:
            ln = job.learner
            groups.setdefault((type(ln), type(ln.model_), architecture_of(ln.model_),
                               ln.device, ln.precision, getattr(ln, "shape_", None)),
                              []).append(i)
    return list(groups.values()) + alone


def predict_together(jobs: Sequence[PredictJob], rows: ResidentRows | None = None) -> None:
    """Fill every job's ``out`` with its learner's ``predict_proba``: groups of compatible
    learners in one vectorised pass per chunk of rows, the rest one by one. ``rows`` as for
    :func:`train_together` (a shared input, such as U or the test set, stays on the
    device)."""
    for group in predict_groups(jobs):
        if len(group) == 1:
            job = jobs[group[0]]
            job.out = job.learner._predict_proba_alone(job.X)
        else:
            _predict_group([jobs[i] for i in group], rows)


def _same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are views of the same memory with the same layout."""
    return a is b or memory_key(a) == memory_key(b)


def graphable(learner: Any, device: torch.device, n_steps: int) -> bool:
    """Whether a group led by ``learner`` may replay its steps as a CUDA graph
    (:mod:`fedlabels.learners.step_graphs`): on CUDA, an MLP (:func:`linear_relu`), no
    image augmentation, at least :data:`~fedlabels.learners.step_graphs.MIN_STEPS` steps."""
    return (device.type == "cuda" and n_steps >= MIN_STEPS
            and not getattr(learner, "augment", False) and linear_relu(learner.model_))


def _predict_group(jobs: list[PredictJob], rows: ResidentRows | None = None) -> None:
    from torch.func import functional_call, vmap

    from fedlabels.learners.devices import autocast

    learners = [j.learner for j in jobs]
    for ln in learners:
        ln._resident()
        ln.model_.eval()
    first = learners[0]
    device = torch.device(first.device)
    params, buffers = stacked_state(learners)
    base = copy.deepcopy(first.model_).to("meta")
    shared = all(_same_rows(j.X, jobs[0].X) for j in jobs)  # one U: not copied per client

    def logits_of(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                  x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (x,))

    stack = linear_stack(base, params)
    # "different": a network that draws in evaluation too (F.dropout(training=True), Monte
    # Carlo dropout) draws each client's own numbers, as alone
    batched = vmap(logits_of, in_dims=(0, 0, None if shared else 0), randomness="different")
    n_rows = max(len(j.X) for j in jobs)
    resident = None
    if shared and rows is not None:  # on the CPU the tensor is the array itself: no copy
        X0 = jobs[0].X
        resident = rows.get((X0,), device, lambda: torch.from_numpy(
            np.ascontiguousarray(X0, dtype=np.float32)).to(device))
    outs = [np.empty((len(j.X), int(ln.n_outputs_)), dtype=np.float32)
            for j, ln in zip(jobs, learners, strict=True)]
    # predict_step() rows in all, as one learner's pass alone: a chunk of that many rows for
    # every client held m times its activations (DS-FL's mlp at 50 clients: 1.5 GB peak)
    step = max(1, first.predict_step() // len(jobs))
    with torch.no_grad():
        for start in range(0, n_rows, step):
            if resident is not None:
                x = first._inputs(resident[start : start + step], False)
            elif shared:
                x = first._inputs(torch.from_numpy(jobs[0].X[start : start + step])
                                  .to(device, non_blocking=True), False)
            else:
                width = min(step, n_rows - start)
                chunks = []
                for job, ln in zip(jobs, learners, strict=True):
                    xb = torch.from_numpy(job.X[start : start + width])
                    if len(xb) < width:
                        xb = torch.cat([xb, xb.new_zeros((width - len(xb), xb.shape[1]))])
                    chunks.append(ln._inputs(xb.to(device, non_blocking=True), False))
                x = torch.stack(chunks)
            with autocast(first.device, first.precision):
                logits = batched(params, buffers, x) if stack is None else stack(x)
            probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()
            for out, p in zip(outs, probs, strict=True):
                out[start : start + step] = p[: max(0, len(out) - start)]
    for job, out in zip(jobs, outs, strict=True):
        job.out = out


class RowPool:
    """The distinct row arrays of a group (an array several clients share, such as FedCT's
    U, once) as one float tensor on the device, with a zero row at ``n_rows`` for padding;
    :meth:`place` gives an array's first row in it."""

    def __init__(self, width: int) -> None:
        self.width = int(width)
        self.arrays: list[np.ndarray] = []
        self.keys: list[tuple[object, ...]] = []  # each array's memory_key
        self.starts: list[int] = []
        self._start_of: dict[tuple[object, ...], int] = {}
        self.n_rows = 0

    def place(self, a: np.ndarray) -> int:
        """Where ``a``'s rows start in the pool (added unless the same memory is there: one
        lookup by its memory, not a comparison with every array placed, which for a group
        of 100 clients' private arrays was half of a call's host work)."""
        key = memory_key(a)
        start = self._start_of.get(key)
        if start is not None:
            return start
        self._start_of[key] = self.n_rows
        self.starts.append(self.n_rows)
        self.arrays.append(a)
        self.keys.append(key)
        self.n_rows += len(a)
        return self.starts[-1]

    def tensor(self, device: torch.device, resident: ResidentRows | None = None
               ) -> torch.Tensor:
        """The pool on ``device`` (from ``resident`` while the same arrays come back)."""
        def build() -> torch.Tensor:
            x = torch.empty((self.n_rows + 1, self.width), dtype=torch.float32,
                            device=device)
            for a, at in zip(self.arrays, self.starts, strict=True):
                x[at : at + len(a)].copy_(torch.from_numpy(
                    np.ascontiguousarray(a, dtype=np.float32)))
            x[self.n_rows].zero_()
            return x

        return build() if resident is None else resident.get(self.arrays, device, build,
                                                              self.keys)


class _Batches:
    """A group's minibatches, drawn by each learner's own cursor exactly as ``train_steps``
    draws them, gathered on the device in one indexing op per step.

    The group's rows are copied to the device once (an array that several clients share,
    such as FedCT's U, once): one float tensor of every distinct ``X`` and ``X_aux`` plus
    a zero row for padding, and per client its labels and weights. A step is one small
    index tensor (client, slot) into them, so each client's batch holds its private rows,
    then its auxiliary rows, then padding of weight 0, as it did when built client by
    client.

    Given ``steps``, the indices of all the call's steps are drawn at once and copied to the
    device in one transfer, so the host does not wait on the device at every step (a copy
    from pageable memory waits for the kernels queued before it) and can queue the next
    steps while the device computes. The cursors draw in the same order as step by step, so
    the minibatches are the same; a learner that also draws augmentations from its
    generator between steps (``augment``) keeps the step-by-step draws.
    """

    def __init__(self, jobs: Sequence[TrainJob], device: torch.device,
                 resident: ResidentRows | None = None, steps: int | None = None) -> None:
        learners = [j.learner for j in jobs]
        width = int(learners[0].n_features_in_)
        pool = RowPool(width)
        place = pool.place
        ys, ws = [], []
        self.cursors, self.offsets, self.rows = [], [], []
        n_labels = 0
        for job, ln in zip(jobs, learners, strict=True):
            X = np.asarray(job.X)
            y = np.asarray(job.y, dtype=np.int64)
            if len(X) < len(y):
                raise FedLabelsError(f"X has {len(X)} rows for {len(y)} labels; pass one "
                                     "row per label.")
            n_aux = len(job.y_aux) if job.X_aux is not None and job.y_aux is not None else 0
            x_at, xa_at, rows = place(X), 0, None
            ys.append(y)
            ws.append(np.ones(len(y), dtype=np.float32))
            if n_aux:
                Xa = np.asarray(job.X_aux)
                if Xa.ndim != 2 or Xa.shape[1] != width:
                    raise FedLabelsError(f"X_aux has shape {Xa.shape}, the model was built "
                                         f"for {width} features.")
                rows = aux_rows(job.aux_index, n_aux, len(Xa))
                if rows is None and len(Xa) < n_aux:
                    raise FedLabelsError(f"X_aux has {len(Xa)} rows for {n_aux} labels; "
                                         "pass one row per label, or aux_index.")
                xa_at = place(Xa)
                ys.append(np.asarray(job.y_aux, dtype=np.int64))
                ws.append(np.ones(n_aux, dtype=np.float32) if job.w_aux is None
                          else np.asarray(job.w_aux, dtype=np.float32))
            self.cursors.append((ln._cursor(0, len(y)), ln._cursor(1, n_aux), n_aux > 0))
            self.offsets.append((x_at, xa_at, n_labels, n_labels + len(y)))
            self.rows.append(rows)
            n_labels += len(y) + n_aux
        # the pool is only read (gathered from), so a run's cache may keep it across calls
        self.x = pool.tensor(device, resident)
        self.y = torch.from_numpy(np.concatenate([*ys, [0]])).to(device)
        self.w = torch.from_numpy(np.concatenate([*ws, np.zeros(1, np.float32)])).to(device)
        self.pad = (pool.n_rows, n_labels)
        # a cursor draws batches of one size (all its rows where it has fewer than a batch),
        # so every step of the call has one shape: each client's private and auxiliary
        # batch sizes, its total, and the total as a (clients, 1) tensor on the device
        parts = [(min(main.n, main.batch_size), min(aux.n, aux.batch_size) if use_aux else 0)
                 for main, aux, use_aux in self.cursors]
        self.lens = [k + ka for k, ka in parts]
        self.sizes = torch.tensor([[max(n, 1)] for n in self.lens],
                                  dtype=torch.float32).to(device)
        # where every client's batches have the same sizes (the usual step), a step is
        # indexed for all clients at once: the sizes, and each client's offsets (x, x_aux,
        # y, y_aux) as columns
        self._equal = parts[0] if len(set(parts)) == 1 else None
        self._columns = np.array(self.offsets, dtype=np.int64).T[:, :, None]
        self._mapped = any(r is not None for r in self.rows)  # some U gathered by index
        self.device = device
        self._planned: list[torch.Tensor] = []
        if steps and not any(draws_each_step(ln) for ln in learners):
            self._plan(int(steps))

    def _plan(self, steps: int) -> None:
        """Draw ``steps`` steps' indices now and copy them to the device together."""
        draws = np.stack([self._draw() for _ in range(steps)])
        self._planned = list(torch.from_numpy(draws).to(self.device).unbind(0))
        self._planned.reverse()  # popped from the end, first step first

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
        """The next step's rows (clients, slots, features), labels, weights (each client's
        sum to its mean: 1 / its batch size per row, 0 on padding) and batch sizes."""
        at, sizes, lens = self.next_index()
        return (*self.gather(at, sizes), lens)

    def next_index(self) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """The next step's index (2, clients, slots) into the rows and labels on the device,
        the clients' batch sizes as a (clients, 1) float tensor there, and as a list."""
        at = self._planned.pop() if self._planned else \
            torch.from_numpy(self._draw()).to(self.device)
        return at, self.sizes, self.lens

    def gather(self, at: torch.Tensor, sizes: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows, labels and weights that index ``at`` selects (device work alone: what
        a CUDA graph of the step replays)."""
        return self.x[at[0]], self.y[at[1]], self.w[at[1]] / sizes

    def one_shape(self) -> bool:
        """Whether every step of the call is planned (a CUDA graph replays one shape: the
        steps of a call have one, :attr:`lens`, and a step drawn later would draw the
        learner's augmentations from its generator in between)."""
        return bool(self._planned)

    def _draw(self) -> np.ndarray:
        """One step's index (2, clients, slots) into the rows and labels, from the cursors.
        Each client draws its private batch, then its auxiliary one (its own generator's
        order)."""
        mains = [main.next() for main, _, _ in self.cursors]
        auxs = [aux.next() if use_aux else None for _, aux, use_aux in self.cursors]
        if self._equal is not None:
            return self._draw_equal(mains, auxs, *self._equal)
        index = np.empty((2, len(mains), max(self.lens)), dtype=np.int64)
        index[0], index[1] = self.pad
        for c, (idx, aidx, (x_at, xa_at, y_at, ya_at), rows) in enumerate(
                zip(mains, auxs, self.offsets, self.rows, strict=True)):
            k = len(idx)
            index[0, c, :k] = idx + x_at
            index[1, c, :k] = idx + y_at
            if aidx is not None:
                index[0, c, k : k + len(aidx)] = (aidx if rows is None else rows[aidx]) + xa_at
                index[1, c, k : k + len(aidx)] = aidx + ya_at
        return index

    def _draw_equal(self, mains: list[np.ndarray], auxs: list[np.ndarray | None], k: int,
                    ka: int) -> np.ndarray:
        """The index of a step whose clients all drew ``k`` private and ``ka`` auxiliary
        rows: one stacked array per part, each client's offsets added as columns."""
        x_at, xa_at, y_at, ya_at = self._columns
        index = np.empty((2, len(mains), k + ka), dtype=np.int64)
        main = np.stack(mains)
        np.add(main, x_at, out=index[0, :, :k])
        np.add(main, y_at, out=index[1, :, :k])
        if ka:
            aux = np.stack([a for a in auxs if a is not None])
            rows = np.stack([a if r is None else r[a] for a, r in
                             zip(aux, self.rows, strict=True)]) if self._mapped else aux
            np.add(rows, xa_at, out=index[0, :, k:])
            np.add(aux, ya_at, out=index[1, :, k:])
        return index


def aux_rows(aux_index: np.ndarray | None, n_aux: int, n_rows: int) -> np.ndarray | None:
    """``aux_index`` as rows of ``X_aux`` in [0, n_rows) (negative ones counted from the
    end, as indexing does), checked: out of range it would read another client's rows."""
    if aux_index is None:
        return None
    rows = np.asarray(aux_index, dtype=np.int64)
    if rows.shape != (n_aux,):
        raise FedLabelsError(f"aux_index has {rows.size} entries, y_aux {n_aux}; they must "
                             "be aligned.")
    if len(rows) and (rows.min() < -n_rows or rows.max() >= n_rows):
        raise FedLabelsError(f"aux_index has rows outside X_aux's {n_rows}; use indices in "
                             f"[0, {n_rows}).")
    return np.where(rows < 0, rows + n_rows, rows)


def stacked_inputs(learners: Sequence[Any], x: torch.Tensor,
                   lens: Sequence[int]) -> torch.Tensor:
    """What each learner's training ``_inputs`` makes of its rows, for the stacked batch
    (clients, slots, features) at once: nothing for the MLP, a reshape to images and the
    learners' own random crops and flips for the CNNs (padding rows stay zero). Any other
    ``_inputs`` runs client by client."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.learners.torch_net import TorchNetClassifier, crop_and_flip

    kind, first = type(learners[0]), learners[0]
    if kind._inputs is TorchMLPClassifier._inputs:
        return x
    shape = getattr(first, "shape_", None)
    if kind._inputs is TorchNetClassifier._inputs and (
            shape is None or kind._augment is TorchNetClassifier._augment):
        if shape is None:
            return x
        g, width = x.shape[:2]
        images = x.reshape(g * width, *shape)
        if first.augment:
            offsets = torch.zeros((g, width, 2), dtype=torch.int64)
            flips = torch.zeros((g, width), dtype=torch.bool)
            for c, (ln, n) in enumerate(zip(learners, lens, strict=True)):
                offsets[c, :n], flips[c, :n] = ln._augment_draws(n, shape[1])
            images = crop_and_flip(images, offsets.reshape(-1, 2), flips.reshape(-1))
        return images.reshape(g, width, *shape)
    rows = []
    for c, (ln, n) in enumerate(zip(learners, lens, strict=True)):
        xc = ln._inputs(x[c, :n], True)
        rows.append(torch.cat([xc, xc.new_zeros((x.shape[1] - n, *xc.shape[1:]))]))
    return torch.stack(rows)


def _train_group(jobs: list[TrainJob], rows: ResidentRows | None = None,
                 graphs: bool = False) -> bool:
    """Train one group together; with ``graphs``, replay a CUDA graph of the step where
    :func:`graphable` allows and every step has one shape. Whether it did."""
    from fedlabels.learners.devices import autocast

    learners = [j.learner for j in jobs]
    for ln in learners:
        ln._resident()
    for job in jobs:  # the checks train_steps makes
        X = np.asarray(job.X)
        if X.ndim != 2 or X.shape[1] != job.learner.n_features_in_:
            raise FedLabelsError(f"X has {X.shape[1] if X.ndim == 2 else X.shape} features, "
                                 f"the model was built for {job.learner.n_features_in_}.")
    first = learners[0]
    device = torch.device(first.device)
    n_steps = int(jobs[0].n_steps)
    capture = graphs and graphable(first, device, n_steps)
    params, opt, forward = stack_for_training(learners, capturable=capture)
    batches = _Batches(jobs, device, rows, steps=n_steps)
    capture = capture and batches.one_shape()
    by_hand = forward.by_hand(first.precision)

    def train_on(x_rows: torch.Tensor, y_all: torch.Tensor, w_all: torch.Tensor,
                 lens: list[int]) -> None:
        """One step on a gathered minibatch: forward, weighted loss, backward, Adam."""
        # each client draws its masks' seed, then its augmentations, as it does alone
        seed = dropout_seed(learners) if forward.masks else None
        x_all = stacked_inputs(learners, x_rows, lens)
        if by_hand:  # the MLP in fp32: its gradients without autograd (stacked_mlp)
            forward.stack.gradients(x_all, y_all, w_all)  # type: ignore[union-attr]
            adam_step(opt)
            return
        with autocast(first.device, first.precision, cache=not capture):
            out = forward(x_all, seed)
        losses = nn.functional.cross_entropy(out.float().reshape(-1, out.shape[-1]),
                                             y_all.reshape(-1), reduction="none")
        (losses.reshape(w_all.shape) * w_all).sum().backward()
        adam_step(opt)

    if capture:
        replay_steps(lambda at, sizes, lens: train_on(*batches.gather(at, sizes), lens),
                     batches.next_index, n_steps, opt, device)
    else:
        for _ in range(n_steps):
            opt.zero_grad(set_to_none=True)
            train_on(*batches.next())
    write_back(learners, params, opt)
    write_back_buffers(learners, forward.buffers)
    for ln in learners:
        ln.steps_ += n_steps
    return capture


class StackedForward:
    """The group's stacked forward pass in training mode (inputs (clients, rows, ...)):
    batched matrix products for an MLP, else ``vmap`` of ``functional_call`` over the
    stacked parameters and ``buffers`` (batch normalisation updates each client's running
    statistics in them, in place). A network with dropout (``masks``) takes the step's
    seed (:func:`dropout_seed`), its masks drawn from it, each client's its own."""

    def __init__(self, learners: Sequence[Any], params: dict[str, torch.Tensor],
                 buffers: dict[str, torch.Tensor]) -> None:
        from torch.func import functional_call, vmap

        base = copy.deepcopy(learners[0].model_).to("meta").train()

        def logits_of(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                      x: torch.Tensor) -> torch.Tensor:
            return functional_call(base, (p, b), (x,))

        arch = architecture_of(learners[0].model_)
        self.params, self.buffers = params, buffers
        self.masks = arch is not None and arch.dropout
        self.stack = linear_stack(base, params)
        # "different": each client's own random draws, also for a network that draws
        # outside nn.Dropout (F.dropout, torch.rand), which then draws from torch's global
        # generator together as it does alone
        self.batched = vmap(logits_of, randomness="different")
        self.devices = ([next(iter(params.values())).device]
                        if learners[0].device.startswith("cuda") else [])

    def by_hand(self, precision: str) -> bool:
        """Whether a step's gradients come from :meth:`LinearStack.gradients` (the MLP in
        fp32, while :data:`GRADIENTS_BY_HAND`), not autograd (bf16: autocast's casts)."""
        return GRADIENTS_BY_HAND and self.stack is not None and precision != "bf16"

    def __call__(self, x: torch.Tensor, seed: int | None = None) -> torch.Tensor:
        if self.stack is not None:
            return self.stack(x)
        if seed is None:
            return self.batched(self.params, self.buffers, x)
        with torch.random.fork_rng(devices=self.devices):
            torch.manual_seed(seed)
            return self.batched(self.params, self.buffers, x)


def stack_for_training(learners: Sequence[Any], capturable: bool = False) -> tuple[
        dict[str, torch.Tensor], torch.optim.Adam, StackedForward]:
    """The learners' parameters (and buffers) stacked (:func:`stacked_state`), one Adam
    over them (:func:`stacked_adam`; ``capturable``: its step counts on the device, for a
    CUDA graph) and the stacked forward pass (:class:`StackedForward`); the networks are
    put in training mode."""
    params, buffers = stacked_state(learners)
    opt = stacked_adam(learners, params, capturable)
    forward = StackedForward(learners, params, buffers)
    for ln in learners:
        if not ln.model_.training:
            ln.model_.train()
    return params, opt, forward


def write_back_buffers(learners: Sequence[Any], buffers: dict[str, torch.Tensor]) -> None:
    """Each learner's buffers (batch normalisation's running statistics and step count)
    from the stacked ones the group's steps updated."""
    if not buffers:
        return
    with torch.no_grad():
        for name, stacked in buffers.items():
            torch._foreach_copy_([ln.model_.get_buffer(name) for ln in learners],
                                 list(stacked.unbind(0)))


def stacked_state(learners: Sequence[Any]) -> tuple[dict[str, torch.Tensor],
                                                     dict[str, torch.Tensor]]:
    """The learners' parameters and buffers stacked along a new first axis, as
    ``torch.func.stack_module_state`` gives them (parameters detached leaves that require
    gradients). Networks without buffers (the MLP, the small CNN) are stacked from each
    learner's Adam list under the cached parameter names, without walking every network's
    modules (milliseconds for a call of 100 clients)."""
    model = learners[0].model_
    arch = architecture_of(model)
    if arch is None or arch.buffers:
        from torch.func import stack_module_state

        return stack_module_state([ln.model_ for ln in learners])
    owned = [_owned(ln) for ln in learners]
    with torch.no_grad():
        params = {name: torch.stack([own[k] for own in owned]).requires_grad_()
                  for k, (name, _) in enumerate(arch.params)}
    return params, {}


def _owned(learner: Any) -> list[torch.Tensor]:
    """A learner's parameters in its network's order, as its Adam holds them (what
    :func:`batch_key` checked; walking the network's modules for them cost 100 clients'
    calls milliseconds)."""
    params: list[torch.Tensor] = learner.optimizer_.param_groups[0]["params"]
    return params


def stacked_adam(learners: Sequence[Any], params: dict[str, torch.Tensor],
                 capturable: bool = False) -> torch.optim.Adam:
    """One Adam over the stacked parameters with the learners' hyper-parameters, step count
    and moments (stacked): each learner's own Adam, since Adam is elementwise. On
    :data:`FUSED_ADAM_DEVICES` its fused form (one kernel for every tensor, its step count
    on the device): the same update up to rounding, in two launches a step instead of a
    dozen. ``capturable``: replayable in a CUDA graph (the fused form is)."""
    group = learners[0].optimizer_.param_groups[0]
    device = next(iter(params.values())).device
    fused = device.type in FUSED_ADAM_DEVICES
    opt = torch.optim.Adam(list(params.values()), lr=group["lr"], betas=group["betas"],
                           eps=group["eps"], weight_decay=group["weight_decay"],
                           capturable=capturable, fused=fused or None)
    if fused:
        opt.register_step_pre_hook(_contiguous_grads)
    step, _ = _adam_state(learners[0])
    if step > 0:  # each learner's moments, stacked
        per = [[ln.optimizer_.state[p] for p in _owned(ln)] for ln in learners]
        on_device = capturable or fused
        for k, p in enumerate(params.values()):
            opt.state[p] = {
                "step": torch.tensor(float(step), dtype=torch.float32,
                                     device=p.device if on_device else None),
                "exp_avg": torch.stack([per[i][k]["exp_avg"] for i in range(len(learners))]),
                "exp_avg_sq": torch.stack([per[i][k]["exp_avg_sq"]
                                           for i in range(len(learners))])}
    return opt


def _contiguous_grads(opt: torch.optim.Optimizer, args: object, kwargs: object) -> None:
    """Before a fused Adam step, every gradient in contiguous memory: torch 2.13's fused
    Adam on the CPU reads a gradient's memory in order, whatever its strides (a transposed
    gradient, as ``vmap`` gives a convolution's weights, updated the wrong elements;
    ``tests/test_stacked_mlp.py``)."""
    del args, kwargs
    for group in opt.param_groups:
        for p in group["params"]:
            if p.grad is not None and not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()


def write_back(learners: Sequence[Any], params: dict[str, torch.Tensor],
               opt: torch.optim.Adam) -> None:
    """Each learner's weights and Adam moments from the stacked ones: one multi-tensor copy
    per parameter (and per moment) for all the learners, into their own tensors (a
    learner's first step gets fresh ones), rather than a copy per learner and tensor."""
    owned = [_owned(ln) for ln in learners]  # in ``params``' order
    # Adam steps every parameter together: one count (one read from a GPU, not one each)
    step = float(opt.state[next(iter(params.values()))]["step"])
    with torch.no_grad():
        for k, stacked in enumerate(params.values()):
            torch._foreach_copy_([own[k] for own in owned], list(stacked.unbind(0)))
            state = opt.state[stacked]
            moments: list[dict[str, torch.Tensor]] = []
            for ln, own in zip(learners, owned, strict=True):
                mine = ln.optimizer_.state.get(own[k])
                if not mine or "exp_avg" not in mine:
                    mine = {"exp_avg": torch.empty_like(own[k]),
                            "exp_avg_sq": torch.empty_like(own[k])}
                # Adam counts steps in place: every tensor its own step counter
                mine = {**mine, "step": torch.tensor(step)}
                ln.optimizer_.state[own[k]] = mine
                moments.append(mine)
            for key in ("exp_avg", "exp_avg_sq"):
                torch._foreach_copy_([m[key] for m in moments], list(state[key].unbind(0)))
