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


def _recorded_gradients(monkeypatch):
    """Each gradient ``train_steps`` / ``distill_steps`` hands to Adam, and the weights it
    was taken at, recorded."""
    from fedlabels.learners import torch_mlp

    seen, step = [], torch_mlp.adam_step

    def record(opt):
        params = [p for g in opt.param_groups for p in g["params"]]
        seen.append(([p.grad.detach().clone() for p in params],
                     [p.detach().clone() for p in params]))
        step(opt)

    monkeypatch.setattr(torch_mlp, "adam_step", record)
    return seen


@pytest.mark.parametrize("weighted", [False, True])
def test_a_step_is_the_gradient_of_the_mean_loss_on_private_and_pseudo_labelled_rows(
        monkeypatch, weighted):
    """Oracle: autograd of (Σ_private CE + Σ_aux w·CE) / (private rows + aux rows) at each
    step's weights, the auxiliary rows ``X_aux[aux_index]`` (unsorted, so not the first
    rows of ``X_aux``); a batch larger than either set takes every row. Two steps: the
    second's gradient is its own, not added to the first's."""
    X, y = _data(n=40)
    Xu, _ = _data(n=70, seed=1)
    rng = np.random.default_rng(3)
    index = rng.choice(len(Xu), size=25, replace=False)
    yu = rng.integers(0, 3, size=25)
    w = rng.uniform(0.1, 1.0, size=25).astype(np.float32) if weighted else None
    m = TorchMLPClassifier(hidden_layer_sizes=(8,), n_classes=3, batch_size=1000,
                           random_state=0).initialise(X.shape[1], 3)
    seen = _recorded_gradients(monkeypatch)
    m.train_steps(X, y, 2, X_aux=Xu, y_aux=yu, w_aux=w, aux_index=index)
    ce = torch.nn.functional.cross_entropy
    weights = torch.ones(25) if w is None else torch.from_numpy(w)
    names = [n for n, _ in m.model_.named_parameters()]
    assert len(seen) == 2
    for got, at in seen:
        params = {n: p.requires_grad_() for n, p in zip(names, at, strict=True)}

        def net(x, params=params):
            return torch.func.functional_call(m.model_, params, (torch.from_numpy(x),))

        loss = (ce(net(X), torch.from_numpy(y), reduction="sum")
                + (ce(net(Xu[index]), torch.from_numpy(yu), reduction="none")
                   * weights).sum()) / (40 + 25)
        want = torch.autograd.grad(loss, list(params.values()))
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)


def test_a_distillation_step_is_the_gradient_of_weighted_soft_plus_private_loss(
        monkeypatch):
    """Oracle: autograd of ``weight · mean_j H(P_j, softmax(f(X_soft_j))) + mean CE`` on the
    private rows, on a copy of the network (batches larger than the sets: every row)."""
    import copy

    X, y = _data(n=30)
    Xs, _ = _data(n=20, seed=2)
    P = np.random.default_rng(4).dirichlet(np.ones(3), size=20).astype(np.float32)
    m = TorchMLPClassifier(hidden_layer_sizes=(8,), n_classes=3, batch_size=1000,
                           random_state=0).initialise(X.shape[1], 3)
    before = copy.deepcopy(m.model_)
    seen = _recorded_gradients(monkeypatch)
    m.distill_steps(Xs, P, 1, X=X, y=y, weight=0.3)
    logp = torch.log_softmax(before(torch.from_numpy(Xs)), dim=1)
    loss = 0.3 * -(torch.from_numpy(P) * logp).sum(1).mean() + \
        torch.nn.functional.cross_entropy(before(torch.from_numpy(X)), torch.from_numpy(y))
    want = torch.autograd.grad(loss, list(before.parameters()))
    ((got, _),) = seen
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n, batch", [(6, 2), (7, 2), (5, 5)])
def test_every_epoch_of_minibatches_takes_each_row_once(n, batch):
    """A cursor's batches go through a permutation: the first n // batch batches hold
    distinct rows (an epoch whose rows divide into batches takes every row), the next
    batch starts a new permutation, and n <= batch is every row each step."""
    from fedlabels.learners.torch_state import BatchCursor

    cursor = BatchCursor(n, batch, np.random.default_rng(0))
    for _ in range(3):  # epochs
        rows = np.concatenate([cursor.next() for _ in range(max(1, n // batch))])
        assert len(rows) == len(set(rows.tolist())) == (n // batch) * batch
        if n % batch == 0 or n <= batch:
            assert sorted(rows.tolist()) == list(range(n))


def test_each_epoch_of_minibatches_is_a_new_permutation():
    """A cursor that kept its first permutation for good (no reshuffle between epochs)
    passed every test: each epoch still takes every row once. The next epoch's order is a
    new draw of the cursor's own generator (the same seed, the same sequence)."""
    from fedlabels.learners.torch_state import BatchCursor

    def epochs(seed: int) -> list[np.ndarray]:
        cursor = BatchCursor(100, 10, np.random.default_rng(seed))
        return [np.concatenate([cursor.next() for _ in range(10)]) for _ in range(3)]

    first = epochs(0)
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[1], first[2])
    rng = np.random.default_rng(0)  # the same generator, drawn as the cursor draws it
    assert [e.tolist() for e in first] == [rng.permutation(100).tolist() for _ in range(3)]
    assert all(np.array_equal(a, b) for a, b in zip(first, epochs(0), strict=True))
