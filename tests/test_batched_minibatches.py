"""The batched step's minibatches, gathered on the device in one op per step, equal the
batches built client by client (each learner's rows indexed on the host, concatenated with
its pseudo-labelled rows, passed through its ``_inputs``, padded, stacked): same rows, same
order, same labels and weights, same random crops, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.batched import TrainJob, _Batches, batch_groups, stacked_inputs
from fedlabels.learners.torch_mlp import TorchMLPClassifier


class ScaledMLP(TorchMLPClassifier):
    """An ``_inputs`` the batched step does not know: it must run client by client."""

    def _inputs(self, xb: torch.Tensor, train: bool) -> torch.Tensor:
        return xb * 2.0 + 1.0


def built(spec, n, seed=0):
    if spec == "scaled":
        return [ScaledMLP(hidden_layer_sizes=(8,), n_classes=10, random_state=seed + i)
                for i in range(n)]
    (s,) = parse_model_spec(spec)
    return [build_learner(s, n_classes=10, random_state=seed + i) for i in range(n)]


def jobs_for(models, sizes, aux, seed=0, min_aux=20):
    """Unequal clients on digits; ``aux``: none, "own" (each client its own pseudo-labelled
    rows), "index" (one shared U gathered by aux_index) or "weighted" (index and w_aux), at
    least ``min_aux`` of them (64: every client's auxiliary batch full)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    U = X[1000:1500]  # one array every client shares
    rng = np.random.default_rng(seed)
    jobs, start = [], 0
    for m, n in zip(models, sizes, strict=True):
        Xc, yc = X[start : start + n], y[start : start + n]
        start += n
        if aux == "none":
            jobs.append(TrainJob(m, Xc, yc, 3))
        elif aux == "own":
            k = int(rng.integers(min_aux, min_aux + 70))
            jobs.append(TrainJob(m, Xc, yc, 3, X[1500 : 1500 + k].copy(),
                                 rng.integers(0, 10, k)))
        else:
            index = np.sort(rng.choice(len(U), size=int(rng.integers(max(30, min_aux), 200)),
                                       replace=False))
            w = rng.random(len(index)).astype(np.float32) if aux == "weighted" else None
            jobs.append(TrainJob(m, Xc, yc, 3, U, rng.integers(0, 10, len(index)), w,
                                 aux_index=index))
    for job in jobs:  # build the networks as train_together does
        job.learner._ensure_initialised(np.asarray(job.X, np.float32), np.asarray(job.y))
    return jobs


def client_by_client(jobs):
    """The batched step's minibatches as they were built before: an independent oracle."""
    cursors = []
    for job in jobs:
        ln, n_aux = job.learner, 0 if job.y_aux is None else len(job.y_aux)
        cursors.append((ln._cursor(0, len(job.y)), ln._cursor(1, n_aux), n_aux))
    while True:
        xs, ys, ws = [], [], []
        for job, (main, aux, n_aux) in zip(jobs, cursors, strict=True):
            idx = torch.from_numpy(main.next())
            xb = torch.from_numpy(np.asarray(job.X, np.float32))[idx]
            yb = torch.from_numpy(np.asarray(job.y, np.int64))[idx]
            wb = None
            if n_aux:
                aidx = torch.from_numpy(aux.next())
                Xa = torch.from_numpy(np.asarray(job.X_aux, np.float32))
                rows = aidx if job.aux_index is None else torch.from_numpy(job.aux_index)[aidx]
                if job.w_aux is not None:
                    wb = torch.cat([torch.ones(len(idx)), torch.from_numpy(job.w_aux)[aidx]])
                xb = torch.cat([xb, Xa[rows]])
                yb = torch.cat([yb, torch.from_numpy(np.asarray(job.y_aux, np.int64))[aidx]])
            xs.append(job.learner._inputs(xb, True))
            ys.append(yb)
            ws.append((torch.ones(len(yb)) if wb is None else wb) / len(yb))
        width = max(len(y) for y in ys)
        yield (torch.stack([torch.cat([x, x.new_zeros((width - len(x), *x.shape[1:]))])
                            for x in xs]),
               torch.stack([torch.cat([y, y.new_zeros(width - len(y))]) for y in ys]),
               torch.stack([torch.cat([w, w.new_zeros(width - len(w))]) for w in ws]))


@pytest.mark.parametrize("aux", ["none", "own", "index", "weighted"])
@pytest.mark.parametrize("spec", ["mlp(hidden=16)", "cnn(arch=small,augment=true)",
                                  "module:user_nets:tiny_cnn", "scaled"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("planned", [False, True])
@pytest.mark.parametrize("batches_of", ["unequal", "equal"])
def test_gathered_minibatches_equal_those_built_client_by_client(spec, aux, device, planned,
                                                                batches_of):
    # unequal: two clients below the batch size of 64 (each client's index written in a
    # loop); equal: every client's private and auxiliary batches full (one stacked index)
    sizes, min_aux = ((40, 75, 130, 61, 9), 20) if batches_of == "unequal" else \
        ((70, 75, 130, 99, 64), 64)
    ours, theirs = built(spec, 5), built(spec, 5)
    # planned: the 5 steps' indices drawn at once and copied together (not for a learner
    # that draws augmentations between steps from the same generator)
    batches = _Batches(jobs_for(ours, sizes, aux, min_aux=min_aux), torch.device(device),
                       steps=5 if planned else None)
    assert len(batches._planned) == (5 if planned and "augment" not in spec else 0)
    oracle = client_by_client(jobs_for(theirs, sizes, aux, min_aux=min_aux))  # on the CPU
    for _ in range(5):  # past the end of an epoch: cursors reshuffle
        x, y, w, lens = batches.next()
        assert x.device.type == y.device.type == w.device.type == device
        x = stacked_inputs(ours, x, lens).cpu()
        y, w = y.cpu(), w.cpu()
        x_ref, y_ref, w_ref = next(oracle)
        assert x.shape == x_ref.shape and y.shape == y_ref.shape
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref) and torch.equal(w, w_ref)
        assert lens == [int((r > 0).sum()) for r in w_ref]
        assert (len(set(lens)) == 1) == (batches_of == "equal")
    for a, b in zip(ours, theirs, strict=True):  # the learners' generators moved alike
        assert a.rng_.bit_generator.state == b.rng_.bit_generator.state


def test_a_shared_u_is_placed_on_the_device_once():
    models = built("mlp(hidden=16)", 4)
    jobs = jobs_for(models, (40, 75, 130, 61), "index")
    batches = _Batches(jobs, torch.device("cpu"))
    assert batches.x.shape == (40 + 75 + 130 + 61 + 500 + 1, 64)  # + the zero padding row
    assert len(batch_groups(jobs)) == 1


def test_aux_index_outside_x_aux_is_refused_not_read_from_another_client():
    models = built("mlp(hidden=16)", 2)
    jobs = jobs_for(models, (40, 75), "index")
    jobs[1].aux_index = jobs[1].aux_index + 500  # rows 500.. are past U's end
    with pytest.raises(FedLabelsError, match="aux_index has rows outside X_aux's 500"):
        _Batches(jobs, torch.device("cpu"))
    jobs = jobs_for(models, (40, 75), "own")
    jobs[0].X_aux = jobs[0].X_aux[:5]
    with pytest.raises(FedLabelsError, match="X_aux has 5 rows"):
        _Batches(jobs, torch.device("cpu"))
