"""A server's crafted weights must not make DP-SGD show, without noise, which records it used.

Record-level DP-FedAvg takes its starting weights from the server. Finite weights can still
overflow on chosen records only: a first-layer unit ``A (x_k - t)`` that is 0 below the
threshold t and about 1e29 above it, times an output weight 1e30, gives an infinite logit
and a NaN gradient for exactly the records with ``x_k > t``. Before the fix that NaN went
into the clipped sum, so the client's update was NaN if and only if such a record had been
sampled: membership, with no noise (ε = ∞). Now a non-finite per-example gradient adds
nothing, like a record that was not sampled.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlabels.api import load_federation
from fedlabels.comm import Message
from fedlabels.learners.dpsgd import clipped_gradient_sum
from test_deviating_server import _role_factory, honest
from test_method_contract import CLIENTS, DATASET, SEED, Case

RECORD = Case("dp-fedavg", {"epsilon": 8.0, "level": "record"})


def _crafted(model: torch.nn.Sequential, feature: int, threshold: float) -> None:
    """Weights that overflow (an infinite logit) on records with x[feature] > threshold."""
    linear = [m for m in model if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for layer in linear:
            layer.weight.zero_()
            layer.bias.zero_()
        linear[0].weight[0, feature] = 1e30
        linear[0].bias[0] = -1e30 * threshold
        for layer in linear[1:]:  # carry unit 0 on, scaled up past float32's range
            layer.weight[0, 0] = 1e30


def test_crafted_global_weights_do_not_reveal_which_records_were_sampled() -> None:
    fed = load_federation(DATASET, clients=CLIENTS, seed=SEED)
    traces, _ = honest(RECORD, fed)
    message = next(m for m in traces[0] if m.kind == "dpfedavg.train")
    client = _role_factory(RECORD, fed)(0)
    client.ensure_built()
    X = np.asarray(client.data.X, dtype=np.float32)
    threshold = float(np.median(X[:, 0]))  # half of the client's records are targets
    _crafted(client.learner.model_, 0, threshold)
    weights = np.asarray(client.learner.get_weights(), dtype=np.float32)
    assert np.isfinite(weights).all()  # what the client's check on the weights lets in

    reply = client.handle(Message(message.kind, arrays={"weights": weights},
                                  config=dict(message.config)))
    assert np.isfinite(reply.arrays["update"]).all()  # NaN on main: a target was sampled


def test_a_record_with_a_non_finite_gradient_adds_nothing_to_the_clipped_sum() -> None:
    """The oracle: the clipped sum of a batch with the targets equals that of the batch
    without them (their presence changes nothing the noise has to hide)."""
    fed = load_federation(DATASET, clients=CLIENTS, seed=SEED)
    client = _role_factory(RECORD, fed)(0)
    client.ensure_built()
    X = np.asarray(client.data.X, dtype=np.float32)
    y = np.asarray(client.data.y, dtype=np.int64)
    threshold = float(np.median(X[:, 0]))
    model = client.learner.model_
    _crafted(model, 0, threshold)
    inputs = client.learner._inputs(torch.from_numpy(X), False)
    targets = X[:, 0] > threshold
    assert 0 < targets.sum() < len(y)
    with_them, _ = clipped_gradient_sum(model, inputs, torch.from_numpy(y), 1.0)
    keep = torch.from_numpy(~targets)
    without, _ = clipped_gradient_sum(model, inputs[keep], torch.from_numpy(y)[keep], 1.0)
    for a, b in zip(with_them, without, strict=True):
        assert torch.isfinite(a).all()
        assert torch.equal(a, b)


@pytest.mark.parametrize("fast", [True, False])
def test_both_clipping_paths_leave_out_non_finite_examples(fast: bool) -> None:
    """The linear-stack formula and torch.func's per-example gradients agree on it."""
    from fedlabels.learners import dpsgd

    fed = load_federation(DATASET, clients=CLIENTS, seed=SEED)
    client = _role_factory(RECORD, fed)(0)
    client.ensure_built()
    X = np.asarray(client.data.X, dtype=np.float32)
    y = torch.from_numpy(np.asarray(client.data.y, dtype=np.int64))
    model = client.learner.model_
    _crafted(model, 0, float(np.median(X[:, 0])))
    inputs = client.learner._inputs(torch.from_numpy(X), False)
    sums = (dpsgd.clipped_gradient_sum(model, inputs, y, 1.0) if fast
            else dpsgd._clipped_sum_func(model, inputs, y, 1.0))[0]
    assert all(torch.isfinite(s).all() for s in sums)


def test_clients_trained_together_leave_out_non_finite_examples_too() -> None:
    """The simulator's batched DP-SGD (clients' steps in one pass) keeps the same rule."""
    from fedlabels.learners.batched_dpsgd import dpsgd_groups, dpsgd_together
    from fedlabels.learners.dpsgd import DPSGDConfig
    from test_batched_clients import digits_clients, learners
    from test_batched_distill_dpsgd import dp_jobs

    clients, _, _ = digits_clients((40, 75, 61))
    models = learners("mlp(hidden=16)", 3)
    jobs = dp_jobs(models, clients, 3, DPSGDConfig(1.0, 0.5, 1.0), 0)
    for model, (X, _) in zip(models, clients, strict=True):
        column = int(np.argmax(X.std(axis=0)))
        _crafted(model.model_, column, float(np.median(X[:, column])))
    assert dpsgd_groups(jobs) == [[0, 1, 2]]  # really batched
    dpsgd_together(jobs, threads=1)
    assert all(np.isfinite(m.get_weights()).all() for m in models)


def test_clients_trained_together_with_any_network_leave_them_out_too() -> None:
    """The batched torch.func path (a network that is not a plain Linear/ReLU stack)."""
    from fedlabels.learners.batched_dpsgd import dpsgd_groups, dpsgd_together
    from fedlabels.learners.dpsgd import DPSGDConfig
    from fedlabels.learners.torch_net import TorchNetClassifier
    from test_batched_clients import digits_clients
    from test_batched_distill_dpsgd import dp_jobs
    from user_nets import shared_relu

    clients, _, _ = digits_clients((40, 75, 61))
    models = [TorchNetClassifier(shared_relu, n_classes=10, random_state=i)
              for i in range(3)]
    jobs = dp_jobs(models, clients, 3, DPSGDConfig(1.0, 0.5, 1.0), 0)
    for model, (X, _) in zip(models, clients, strict=True):
        column = int(np.argmax(X.std(axis=0)))
        _crafted(model.model_, column, float(np.median(X[:, column])))
    assert dpsgd_groups(jobs) == [[0, 1, 2]]
    dpsgd_together(jobs, threads=1)
    assert all(np.isfinite(m.get_weights()).all() for m in models)
