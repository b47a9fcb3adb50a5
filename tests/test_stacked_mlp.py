"""The stacked MLP's training gradients by hand (``LinearStack.gradients``) equal autograd's
(float64, against ``loss.backward()`` of the same weighted cross-entropy), the clients'
training step takes them without autograd where it can, and the fused Adam of a GPU's
stacked clients updates every element as the unfused one does, whatever a gradient's
strides."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedlabels.learners.batch_jobs import DistillJob
from fedlabels.learners.batched import TrainJob, stacked_adam, train_together
from fedlabels.learners.batched_distill import distill_together
from fedlabels.learners.stacked_mlp import linear_relu, linear_stack
from test_batched_clients import digits_clients, learners

NETWORKS = {
    "mlp": lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 5), nn.ReLU(),
                                 nn.Linear(5, 4)),
    "relu first, a layer without bias": lambda: nn.Sequential(
        nn.ReLU(), nn.Linear(6, 7, bias=False), nn.ReLU(), nn.Linear(7, 4)),
    "two relus in a row": lambda: nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.ReLU(),
                                                nn.Linear(5, 4)),
    "one linear layer": lambda: nn.Sequential(nn.Linear(6, 4)),
    "two linear layers in a row": lambda: nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 4)),
}


def stacked_params(make, n_clients, seed=0):
    torch.manual_seed(seed)
    nets = [make().double() for _ in range(n_clients)]
    names = [n for n, _ in nets[0].named_parameters()]
    params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in nets])
              .requires_grad_() for n in names}
    return nets[0], params


@pytest.mark.parametrize("targets", ["classes", "distributions"])
@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_gradients_by_hand_equal_autograds(name, targets):
    """Hard labels (FedCT's step) and soft targets (distillation's: some rows summing to
    0.7, as a weighted target may, and padding rows of zeros)."""
    base, params = stacked_params(NETWORKS[name], 3)
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.normal(size=(3, 9, 6)))
    w = torch.from_numpy(rng.random((3, 9)))
    w[1, 5:] = 0.0  # a client's padding rows: weight 0
    w[2, 0] = 0.0
    if targets == "classes":
        y = torch.from_numpy(rng.integers(0, 4, size=(3, 9)))
    else:
        y = torch.from_numpy(rng.dirichlet(np.ones(4), size=(3, 9)))
        y[0, :4] *= 0.7
        y[1, 5:] = 0.0
    stack = linear_stack(base, params)
    assert stack is not None

    out = stack(x)
    if targets == "classes":
        losses = nn.functional.cross_entropy(out.reshape(-1, 4), y.reshape(-1),
                                             reduction="none").reshape(w.shape)
    else:
        losses = -(y * torch.log_softmax(out, dim=-1)).sum(dim=-1)
    (losses * w).sum().backward()
    expected = {n: p.grad.clone() for n, p in params.items()}
    for p in params.values():  # set, not added to, as after zero_grad(set_to_none=True)
        p.grad = torch.full_like(p, 7.0)

    stack.gradients(x, y, w)
    for n, p in params.items():
        np.testing.assert_allclose(p.grad.numpy(), expected[n].numpy(), rtol=1e-12,
                                   atol=1e-14, err_msg=n)
    # the padding rows changed nothing: client 1 alone, without them, has the same
    alone = {n: p[1:2].detach().clone().requires_grad_() for n, p in params.items()}
    linear_stack(base, alone).gradients(x[1:2, :5], y[1:2, :5], w[1:2, :5])
    for n, p in alone.items():
        np.testing.assert_allclose(p.grad[0].numpy(), expected[n][1].numpy(), rtol=1e-12,
                                   atol=1e-14, err_msg=n)


def test_a_layer_used_twice_is_not_stacked_by_hand():
    """Its two uses share one weight, whose gradient is the sum of both: it runs as vmap of
    functional_call, which ties them (the stack keyed its layers by position and would not
    have found the second's weights)."""
    shared = nn.Linear(4, 4)
    tied = nn.Sequential(shared, nn.ReLU(), shared)
    assert not linear_relu(tied)
    assert linear_stack(tied, {n: p.unsqueeze(0) for n, p in tied.named_parameters()}) \
        is None
    assert linear_relu(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)))


def test_a_relu_used_twice_trains_together_as_alone():
    """``named_children`` lists a module once, so a stack built from it dropped the second
    use of one ReLU object (outputs 0.15 off): such a network runs as vmap instead."""
    from user_nets import shared_relu

    net = shared_relu(6, 4)
    assert not linear_relu(net)
    clients, _, _ = digits_clients((70, 80))
    seq, bat = learners("module:user_nets:shared_relu", 2), \
        learners("module:user_nets:shared_relu", 2)
    for m, (X, y) in zip(seq, clients, strict=True):
        m.train_steps(X, y, 5)
    train_together([TrainJob(m, X, y, 5) for m, (X, y) in zip(bat, clients, strict=True)])
    for a, b in zip(seq, bat, strict=True):
        np.testing.assert_allclose(a.get_weights(), b.get_weights(), atol=1e-5)


def spy_backward(monkeypatch):
    calls = []
    original = torch.Tensor.backward

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", counted)
    return calls


@pytest.mark.parametrize("step", ["train", "distill"])
@pytest.mark.parametrize(("spec", "precision", "by_hand"), [
    ("mlp(hidden=16-8)", "fp32", True), ("mlp(hidden=16-8)", "bf16", False),
    ("cnn(arch=small)", "fp32", False)])
def test_the_mlps_step_runs_without_autograd(monkeypatch, spec, precision, by_hand, step):
    """The MLP in fp32 trains and distils together by hand; bf16 (autocast's casts) and
    networks that are not Linear/ReLU stacks go through autograd."""
    clients, (Xu, _), _ = digits_clients((40, 70, 55))
    models = learners(spec, 3)
    for m in models:
        m.place("cpu", precision)
    calls = spy_backward(monkeypatch)
    if step == "train":
        train_together([TrainJob(m, X, y, 4)
                        for m, (X, y) in zip(models, clients, strict=True)])
    else:
        soft = np.random.default_rng(0).dirichlet(np.ones(10), size=80).astype(np.float32)
        for m, (X, y) in zip(models, clients, strict=True):
            m._ensure_initialised(X, y)
        distill_together([DistillJob(m, Xu[:80], soft, 4, X, y, 0.5)
                          for m, (X, y) in zip(models, clients, strict=True)])
    assert all(m.steps_ == 4 for m in models)
    assert (len(calls) == 0) == by_hand


def test_fused_adam_updates_as_the_unfused_one_with_a_transposed_gradient(monkeypatch):
    """torch 2.13's fused CPU Adam read a transposed gradient's memory in order (the wrong
    elements moved); the stacked Adam makes each gradient contiguous first. Fused on the
    CPU here to run the fused kernel without a GPU."""
    import fedlabels.learners.batched as batched

    models = learners("mlp(hidden=8)", 2)
    clients, _, _ = digits_clients((30, 30))
    for m, (X, y) in zip(models, clients, strict=True):
        m.train_steps(X, y, 1)  # Adam's moments exist: the stacked ones continue them
    grads = {"0.weight": torch.randn(2, 64, 8).transpose(1, 2),  # (2, 8, 64), transposed
             "0.bias": torch.randn(2, 8), "2.weight": torch.randn(2, 10, 8),
             "2.bias": torch.randn(2, 10)}
    assert not grads["0.weight"].is_contiguous()
    updated = {}
    for fused in (False, True):
        monkeypatch.setattr(batched, "FUSED_ADAM_DEVICES", ("cpu",) if fused else ())
        params = {n: torch.stack([dict(m.model_.named_parameters())[n].detach()
                                  for m in models]).requires_grad_() for n in grads}
        opt = stacked_adam(models, params)
        assert bool(opt.param_groups[0]["fused"]) == fused
        for n, p in params.items():
            p.grad = grads[n].clone()  # strides kept: 0.weight's stays transposed
        assert not params["0.weight"].grad.is_contiguous()
        opt.step()
        updated[fused] = {n: p.detach().clone() for n, p in params.items()}
    for n in grads:
        np.testing.assert_allclose(updated[True][n].numpy(), updated[False][n].numpy(),
                                   rtol=1e-6, atol=1e-8, err_msg=n)


def test_full_batches_train_together_bit_for_bit_as_alone():
    """The step by hand does autograd's arithmetic (log_softmax's backward, each client's
    products in the layout of its own), so on the CPU MLP clients whose batches are full
    (no padding row in a product's sum) train together exactly as alone; through autograd
    the stacked step rounded otherwise, and over 35 steps of 100 clients a weight drifted
    2e-2 from its client's own run."""
    clients, (Xu, yu), _ = digits_clients((90, 75, 130, 99))
    seq, bat = learners("mlp(hidden=32-16)", 4), learners("mlp(hidden=32-16)", 4)
    rng = np.random.default_rng(0)
    picks = [np.sort(rng.choice(len(yu), size=70 + 20 * i, replace=False)) for i in range(4)]
    for _ in range(2):  # warm-started: the second call continues Adam's moments
        for m, (X, y), pick in zip(seq, clients, picks, strict=True):
            m.train_steps(X, y, 6, Xu, yu[pick], aux_index=pick)
        train_together([TrainJob(m, X, y, 6, Xu, yu[pick], aux_index=pick)
                        for m, (X, y), pick in zip(bat, clients, picks, strict=True)])
    for a, b in zip(seq, bat, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for key in sa:
            if key.startswith(("model.", "opt.")):
                np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
