"""Many clients' torch learners trained together: one vectorised step for all of them.

:func:`train_together` takes the same ``train_steps`` calls that the clients would make one
after another and runs them as one: the clients' parameters are stacked
(``torch.func.stack_module_state``), one forward/backward pass over ``vmap`` of
``functional_call`` computes every client's loss on its own minibatch, and one Adam step on
the stacked tensors updates them all (Adam is elementwise, so this is each client's own
Adam). Minibatches are drawn from each learner's own cursor, in the order ``train_steps``
draws them, and padded to a common size with rows of weight 0, so clients of unequal sizes
train together; the weights, Adam moments and counters are written back into each learner.
The result equals the sequential run up to floating-point rounding (summation order).

:func:`predict_together` does the same for ``predict_proba``: the clients' stacked weights
run one ``vmap``'d forward pass per chunk of rows (``predict_batch_size`` rows of every
client at once), so a round's predictions of U, or of the test set, are one batched call.

Learners can train together (:func:`batch_groups`) when they are torch classifiers of one
architecture on one device with the default loss and Adam of the same hyper-parameters and
step count, without batch normalisation or dropout (whose batch statistics and random masks
``vmap`` would not reproduce); anything else trains on its own.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.batch_jobs import PredictJob, TrainJob


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
    classifier with Adam and the default loss, no batch normalisation, no dropout."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    if not isinstance(learner, TorchMLPClassifier) or learner._target_dtype is not np.int64:
        return False
    if getattr(learner, "loss", None) is not None or getattr(learner, "optimizer", None):
        return False
    if hasattr(learner, "model_"):
        return batch_key(learner) is not None
    network = getattr(learner, "network", None)  # None: the MLP; a factory: seen when built
    return network is None or network == "small" or not isinstance(network, str)


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
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm | nn.modules.dropout._DropoutNd)
           for m in model.modules()):
        return None
    step, hyper = _adam_state(learner)
    if step < 0 or hyper[4] or hyper[5]:
        return None
    shapes = tuple((n, tuple(p.shape)) for n, p in model.named_parameters())
    return (type(learner), type(model), shapes, learner.device, learner.precision,
            int(learner.batch_size), step, hyper, getattr(learner, "shape_", None),
            bool(getattr(learner, "augment", False)))


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
            groups.setdefault((key, int(job.n_steps), job.y_aux is not None and
                               len(job.y_aux) > 0, job.w_aux is not None), []).append(i)
    return list(groups.values()) + alone


def train_together(jobs: Sequence[TrainJob]) -> None:
    """Run every job's ``train_steps``: groups of compatible learners in one vectorised
    pass, the rest one by one. Each learner ends as if it had trained alone."""
    for group in batch_groups(jobs):
        chosen = [jobs[i] for i in group]
        if len(chosen) == 1:
            job = chosen[0]
            job.learner.train_steps(job.X, job.y, job.n_steps, job.X_aux, job.y_aux,
                                    job.w_aux, aux_index=job.aux_index)
        else:
            _train_group(chosen)


def predict_groups(jobs: Sequence[PredictJob]) -> list[list[int]]:
    """Indices of ``jobs`` that can predict together: built learners that could train
    together (one architecture, device and precision) on inputs of one width."""
    groups: dict[Any, list[int]] = {}
    alone: list[list[int]] = []
    for i, job in enumerate(jobs):
        key = batch_key(job.learner)
        if key is None or job.X.ndim != 2 or job.X.shape[1] != job.learner.n_features_in_:
            alone.append([i])
        else:
            (kind, model_type, shapes, device, precision, *_rest) = key
            groups.setdefault((kind, model_type, shapes, device, precision,
                               getattr(job.learner, "shape_", None)), []).append(i)
    return list(groups.values()) + alone


def predict_together(jobs: Sequence[PredictJob]) -> None:
    """Fill every job's ``out`` with its learner's ``predict_proba``: groups of compatible
    learners in one vectorised pass per chunk of rows, the rest one by one."""
    for group in predict_groups(jobs):
        if len(group) == 1:
            job = jobs[group[0]]
            job.out = job.learner._predict_proba_alone(job.X)
        else:
            _predict_group([jobs[i] for i in group])


def _same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are views of the same memory with the same layout."""
    return a is b or (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
                      and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _predict_group(jobs: list[PredictJob]) -> None:
    from torch.func import functional_call, stack_module_state, vmap

    from fedlabels.learners.devices import autocast

    learners = [j.learner for j in jobs]
    for ln in learners:
        ln._resident()
        ln.model_.eval()
    first = learners[0]
    device = torch.device(first.device)
    params, buffers = stack_module_state([ln.model_ for ln in learners])
    base = copy.deepcopy(first.model_).to("meta")
    shared = all(_same_rows(j.X, jobs[0].X) for j in jobs)  # one U: not copied per client

    def logits_of(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                  x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (x,))

    batched = vmap(logits_of, in_dims=(0, 0, None if shared else 0))
    n_rows = max(len(j.X) for j in jobs)
    outs = [np.empty((len(j.X), len(ln.classes_)), dtype=np.float32)
            for j, ln in zip(jobs, learners, strict=True)]
    step = int(first.predict_batch_size)
    with torch.no_grad():
        for start in range(0, n_rows, step):
            if shared:
                x = first._inputs(torch.from_numpy(jobs[0].X[start : start + step])
                                  .to(device, non_blocking=True), False)
            else:
                width = min(step, n_rows - start)
                rows = []
                for job, ln in zip(jobs, learners, strict=True):
                    xb = torch.from_numpy(job.X[start : start + width])
                    if len(xb) < width:
                        xb = torch.cat([xb, xb.new_zeros((width - len(xb), xb.shape[1]))])
                    rows.append(ln._inputs(xb.to(device, non_blocking=True), False))
                x = torch.stack(rows)
            with autocast(first.device, first.precision):
                logits = batched(params, buffers, x)
            probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()
            for out, p in zip(outs, probs, strict=True):
                out[start : start + step] = p[: max(0, len(out) - start)]
    for job, out in zip(jobs, outs, strict=True):
        job.out = out


class _Source:
    """One client's data as ``train_steps`` sees it: private rows and the auxiliary set."""

    def __init__(self, job: TrainJob) -> None:
        ln = job.learner
        self.X = torch.from_numpy(np.ascontiguousarray(job.X, dtype=np.float32))
        self.y = torch.from_numpy(np.asarray(job.y, dtype=np.int64))
        self.n_aux = len(job.y_aux) if job.X_aux is not None and job.y_aux is not None else 0
        self.main = ln._cursor(0, len(self.y))
        self.aux = ln._cursor(1, self.n_aux)
        if self.n_aux:
            self.Xa = torch.from_numpy(np.ascontiguousarray(job.X_aux, dtype=np.float32))
            self.ya = torch.from_numpy(np.asarray(job.y_aux, dtype=np.int64))
            self.rows = None if job.aux_index is None else torch.from_numpy(
                np.asarray(job.aux_index, dtype=np.int64))
            if self.rows is not None and self.rows.shape != self.ya.shape:
                raise FedLabelsError(f"aux_index has {self.rows.numel()} entries, y_aux "
                                     f"{len(self.ya)}; they must be aligned.")
            self.wa = None if job.w_aux is None else torch.from_numpy(
                np.asarray(job.w_aux, dtype=np.float32))

    def batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The next minibatch, drawn exactly as ``train_steps`` draws it."""
        idx = torch.from_numpy(self.main.next())
        xb, yb, wb = self.X[idx], self.y[idx], None
        if self.n_aux:
            aidx = torch.from_numpy(self.aux.next())
            if self.wa is not None:
                wb = torch.cat([torch.ones(len(idx)), self.wa[aidx]])
            xa = self.Xa[aidx] if self.rows is None else self.Xa[self.rows[aidx]]
            xb, yb = torch.cat([xb, xa]), torch.cat([yb, self.ya[aidx]])
        return xb, yb, wb


def _train_group(jobs: list[TrainJob]) -> None:
    from torch.func import functional_call, stack_module_state, vmap

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
    models = [ln.model_ for ln in learners]
    params, buffers = stack_module_state(models)
    names = list(params)
    base = copy.deepcopy(models[0]).to("meta")
    group = first.optimizer_.param_groups[0]
    opt = torch.optim.Adam(list(params.values()), lr=group["lr"], betas=group["betas"],
                           eps=group["eps"], weight_decay=group["weight_decay"])
    step, _ = _adam_state(first)
    if step > 0:  # each learner's moments, stacked
        per = [[ln.optimizer_.state[p] for p in ln.model_.parameters()] for ln in learners]
        for k, p in enumerate(params.values()):
            opt.state[p] = {
                "step": torch.tensor(float(step)),
                "exp_avg": torch.stack([per[i][k]["exp_avg"] for i in range(len(jobs))]),
                "exp_avg_sq": torch.stack([per[i][k]["exp_avg_sq"]
                                           for i in range(len(jobs))])}

    def logits_of(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
                  x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (x,))

    batched = vmap(logits_of)
    sources = [_Source(j) for j in jobs]
    for ln in learners:
        ln.model_.train()
    for _ in range(int(jobs[0].n_steps)):
        drawn = [s.batch() for s in sources]
        width = max(len(yb) for _, yb, _ in drawn)
        xs, ys, ws = [], [], []
        for ln, (xb, yb, wb) in zip(learners, drawn, strict=True):
            x = ln._inputs(xb.to(device), True)
            pad = width - len(yb)
            weight = torch.ones(len(yb)) if wb is None else wb
            weight = weight / len(yb)  # train_steps takes the mean over its own batch
            if pad:
                x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
                yb = torch.cat([yb, yb.new_zeros(pad)])
                weight = torch.cat([weight, weight.new_zeros(pad)])
            xs.append(x)
            ys.append(yb)
            ws.append(weight)
        x_all = torch.stack(xs)
        y_all, w_all = torch.stack(ys).to(device), torch.stack(ws).to(device)
        opt.zero_grad(set_to_none=True)
        with autocast(first.device, first.precision):
            out = batched(params, buffers, x_all)
        losses = nn.functional.cross_entropy(out.float().reshape(-1, out.shape[-1]),
                                             y_all.reshape(-1), reduction="none")
        (losses.reshape(w_all.shape) * w_all).sum().backward()
        opt.step()
    for i, ln in enumerate(learners):  # write weights and Adam moments back
        with torch.no_grad():
            for name, p in ln.model_.named_parameters():
                p.copy_(params[name][i])
        for k, p in enumerate(ln.model_.parameters()):
            state = opt.state[params[names[k]]]
            ln.optimizer_.state[p] = {"step": torch.tensor(float(state["step"])),
                                      "exp_avg": state["exp_avg"][i].clone(),
                                      "exp_avg_sq": state["exp_avg_sq"][i].clone()}
        ln.steps_ += int(jobs[0].n_steps)
