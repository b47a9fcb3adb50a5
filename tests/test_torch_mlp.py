import numpy as np
import pytest
import torch

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier


def _data(n=300, d=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)
    return X, y


def test_paper_fashion_architecture_has_669706_parameters():
    m = TorchMLPClassifier(hidden_layer_sizes=(512, 512)).initialise(784, 10)
    assert m.n_parameters == 669_706


def test_learns_and_warm_starts():
    X, y = _data()
    m = TorchMLPClassifier(hidden_layer_sizes=(32,), n_classes=3, random_state=0)
    m.train_steps(X, y, 5)
    acc_early = np.mean(m.predict(X) == y)
    w = m.get_weights().copy()
    m.train_steps(X, y, 300)
    assert m.steps_ == 305  # continued, not restarted
    assert np.mean(m.predict(X) == y) > max(acc_early, 0.85)
    assert not np.allclose(w, m.get_weights())


def test_same_seed_same_model_and_predictions():
    X, y = _data()
    a = TorchMLPClassifier(hidden_layer_sizes=(16,), n_classes=3, random_state=3)
    b = TorchMLPClassifier(hidden_layer_sizes=(16,), n_classes=3, random_state=3)
    a.train_steps(X, y, 20, X[:50], y[:50])
    b.train_steps(X, y, 20, X[:50], y[:50])
    assert np.array_equal(a.get_weights(), b.get_weights())


def test_prediction_is_batched_and_in_eval_mode(monkeypatch):
    X, y = _data(1000)
    m = TorchMLPClassifier(hidden_layer_sizes=(8,), n_classes=3, predict_batch_size=128,
                           random_state=0).fit(X, y)
    calls = []
    original = m.model_.forward

    def spy(x):
        calls.append((x.shape[0], m.model_.training, torch.is_grad_enabled()))
        return original(x)

    monkeypatch.setattr(m.model_, "forward", spy)
    proba = m.predict_proba(X)
    assert proba.shape == (1000, 3) and np.allclose(proba.sum(axis=1), 1, atol=1e-5)
    assert [c[0] for c in calls] == [128] * 7 + [104]
    assert all(not training and not grad for _, training, grad in calls)


def test_weights_round_trip_between_models():
    X, y = _data()
    a = TorchMLPClassifier(hidden_layer_sizes=(16,), n_classes=3, random_state=0).fit(X, y)
    b = TorchMLPClassifier(hidden_layer_sizes=(16,), n_classes=3, random_state=1).fit(X, y)
    b.set_weights(a.get_weights())
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    with pytest.raises(FedLabelsError, match="entries"):
        b.set_weights(np.zeros(3, dtype=np.float32))


def test_bad_parameters_and_unfitted_use():
    with pytest.raises(FedLabelsError, match="learning_rate"):
        TorchMLPClassifier(learning_rate=0).fit(*_data())
    with pytest.raises(FedLabelsError, match="not fitted"):
        TorchMLPClassifier().predict(np.zeros((2, 3), dtype=np.float32))


def test_adam_steps_without_torch_dynamo_equal_torchs_own_step():
    """torch 2.13 imports torch._dynamo (1-2 CPU-s, in every worker) the first time an
    optimizer is built or stepped, only to guard against torch.compile, which fedlabels never
    uses; :func:`adam_step` and the pre-filled guards avoid it. Torch's own step must give
    the same weights, and if torch changes the internals this relies on, this fails."""
    import subprocess
    import sys

    code = """
import sys
import torch
from fedlabels.learners.torch_mlp import adam_step

def trained(step):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = torch.randn(32, 6, generator=torch.Generator().manual_seed(1)), torch.arange(32) % 3
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        step(opt)
    return [p.detach().clone() for p in net.parameters()], opt.state_dict()

ours, ours_state = trained(adam_step)
assert "torch._dynamo" not in sys.modules, "adam_step imported torch._dynamo"
theirs, theirs_state = trained(lambda opt: opt.step())
assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), "weights differ"
assert str(ours_state) == str(theirs_state), "optimizer states differ"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_resting_model_keeps_no_gradients():
    """After its steps a client's model holds its weights and Adam's state, not a fourth
    copy of the model in gradients (1.2 MB per client of the default MLP on 64 features:
    300 resting clients kept 0.36 GB of gradients). Every step sets them afresh, so the
    next steps train as before."""
    from fedlabels.core.randomness import numpy_generator
    from fedlabels.learners.dpsgd import DPSGDConfig, dpsgd_steps

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 6)).astype(np.float32), np.arange(40) % 3
    P = np.full((40, 3), 1 / 3, dtype=np.float32)

    def trained(how):
        m = TorchMLPClassifier(hidden_layer_sizes=(8,), n_classes=3, random_state=0,
                               batch_size=8)
        how(m)
        return m

    for how in (lambda m: m.train_steps(X, y, 3), lambda m: m.distill_steps(X, P, 3, X, y),
                lambda m: (m.train_steps(X, y, 1),
                           dpsgd_steps(m, X, y, 2, DPSGDConfig(1.0, 0.25, 1.0),
                                       numpy_generator()))):
        m = trained(how)
        assert m.steps_ == 3
        assert all(p.grad is None for p in m.model_.parameters())
        assert len(m.optimizer_.state) == len(list(m.model_.parameters()))  # Adam's kept
