"""A run's arrays stay on the device between rounds (ResidentRows), and the MLP's stacked
forward pass as batched matrix products (linear_stack) equals vmap of functional_call."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap

from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.resident_rows import ResidentRows


def tensor_of(a):
    return lambda: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).clone()


def test_the_same_arrays_are_built_once_other_arrays_again():
    rows = ResidentRows()
    a, b = np.ones((10, 3), np.float32), np.zeros((10, 3), np.float32)
    first = rows.get((a, b), "cpu", tensor_of(a))
    assert rows.get((a, b), "cpu", tensor_of(a)) is first  # same memory: kept
    assert rows.get((a[:], b), "cpu", tensor_of(a)) is first  # a view of the same rows
    assert rows.get((b, a), "cpu", tensor_of(b)) is not first  # another order
    assert rows.get((a[:5], b), "cpu", tensor_of(a)) is not first  # other rows
    assert rows.get((a.copy(), b), "cpu", tensor_of(a)) is not first  # other memory
    assert rows.get((a, b), "meta", lambda: torch.empty(3, device="meta")) is not first
    assert (rows.builds, rows.hits) == (5, 2)


def test_least_recently_used_tensors_go_first_and_oversized_ones_are_not_kept():
    rows = ResidentRows(max_bytes=2 * 40)  # two tensors of 10 float32
    arrays = [np.full(10, i, np.float32) for i in range(4)]
    for a in arrays[:2]:
        rows.get((a,), "cpu", tensor_of(a))
    rows.get((arrays[0],), "cpu", tensor_of(arrays[0]))  # 0 used last: 1 goes first
    rows.get((arrays[2],), "cpu", tensor_of(arrays[2]))
    assert rows.nbytes == 80
    builds = rows.builds
    rows.get((arrays[0],), "cpu", tensor_of(arrays[0]))
    assert rows.builds == builds  # kept
    rows.get((arrays[1],), "cpu", tensor_of(arrays[1]))
    assert rows.builds == builds + 1  # dropped, built again
    big = np.zeros(100, np.float32)
    out = rows.get((big,), "cpu", tensor_of(big))
    assert out.shape == (100,) and rows.nbytes <= 80  # returned, not kept
    rows.clear()
    assert rows.nbytes == 0
    with pytest.raises(ValueError, match="max_bytes"):
        ResidentRows(max_bytes=-1)


def test_a_run_copies_its_rows_once_and_learns_what_it_learned_without_the_cache(
        monkeypatch):
    import fedlabels as fl
    from conftest import digits_with_sizes
    from fedlabels.learners import resident_rows

    made = []

    class Counting(resident_rows.ResidentRows):
        def __init__(self):
            super().__init__()
            made.append(self)

    class Never(resident_rows.ResidentRows):  # every call builds: the rows copied again
        def get(self, arrays, device, build, keys=None):
            self.builds += 1
            return build()

    fed = digits_with_sizes((40, 90, 150, 60), n_unlabeled=300, n_test=300)
    runs = {}
    for name, cls in (("cached", Counting), ("copied", Never)):
        monkeypatch.setattr("fedlabels.engines.together.ResidentRows", cls)
        runs[name] = fl.run("fedct", fed, model="mlp(hidden=32)", rounds=4, period=6,
                            seed=0, progress=False, batch_clients="on")
    (cache,) = made
    # built once each: the first round's pool (private rows alone: no consensus yet), the
    # pool of private rows and U from the second round on (kept for rounds 3 and 4), U
    # (predicted every round) and the test set (evaluated every round); the rest are hits
    assert (cache.builds, cache.hits) == (4, 2 + 3 + 3)
    for a, b in zip(runs["cached"].client_models, runs["copied"].client_models, strict=True):
        np.testing.assert_array_equal(a.get_weights(), b.get_weights())


def stacked(spec, n=3, n_features=12):
    (s,) = parse_model_spec(spec)
    models = []
    for i in range(n):
        ln = build_learner(s, n_classes=4, random_state=i)
        ln.initialise(n_features, 4)
        models.append(ln.model_)
    params, buffers = stack_module_state(models)
    return models, params, buffers


@pytest.mark.parametrize("spec", ["mlp(hidden=16-8)", "mlp(hidden=5)"])
def test_linear_stack_equals_vmap_of_functional_call(spec):
    from fedlabels.learners.stacked_mlp import linear_stack

    models, params, buffers = stacked(spec)
    base = models[0]
    forward = linear_stack(base, params)
    rng = np.random.default_rng(0)
    per_client = torch.from_numpy(rng.normal(size=(3, 7, 12)).astype(np.float32))
    shared = per_client[0]

    def logits(p, b, x):
        return functional_call(base, (p, b), (x,))

    np.testing.assert_allclose(forward(per_client).detach(),
                               vmap(logits)(params, buffers, per_client).detach(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(forward(shared).detach(),
                               vmap(logits, in_dims=(0, 0, None))(params, buffers,
                                                                   shared).detach(),
                               rtol=1e-5, atol=1e-6)
    for i, model in enumerate(models):  # and each client's own network
        np.testing.assert_allclose(forward(per_client)[i].detach(),
                                   model(per_client[i]).detach(), rtol=1e-5, atol=1e-6)
    # gradients reach every client's own weights
    forward(per_client).sum().backward()
    assert all(p.grad is not None and p.grad.shape[0] == 3 for p in params.values())


def _accumulator(p):
    """``p``'s gradient accumulator (the node autograd keeps while a graph holds it)."""
    return p.expand_as(p).grad_fn.next_functions[0][0]


@pytest.mark.parametrize("spec", ["mlp(hidden=16-8)", "cnn(arch=small)"])
def test_no_autograd_node_of_the_weights_outlives_a_step(spec):
    """Between two steps nothing keeps a parameter's gradient accumulator alive (a transpose
    made once, outside the step, did): a CUDA graph captured on a side stream needs each made
    on that stream, else its backward fails ("would make the legacy stream depend on a
    capturing blocking stream", torch 2.11 on an H200). A node still alive keeps a tag."""
    from fedlabels.learners.batched import stack_for_training

    (parsed,) = parse_model_spec(spec)
    learners = []
    for i in range(3):
        ln = build_learner(parsed, n_classes=4, random_state=i)
        ln.initialise(64, 4)
        learners.append(ln)
    params, opt, forward = stack_for_training(learners)
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(3, 5, 64)).astype(np.float32))
    shape = getattr(learners[0], "shape_", None)  # a CNN's images
    x = x if shape is None else x.reshape(3, 5, *shape)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        forward(x).sum().backward()
        opt.step()
        for p in params.values():
            _accumulator(p).metadata["seen"] = True
        gc.collect()
        assert all("seen" not in _accumulator(p).metadata for p in params.values())


def test_linear_stack_leaves_other_networks_to_vmap():
    from fedlabels.learners.stacked_mlp import linear_stack

    models, params, _ = stacked("cnn(arch=small)", n_features=64)
    assert linear_stack(models[0], params) is None
