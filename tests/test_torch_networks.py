"""Torch networks as learners: the papers' CNNs, ResNet-18, your own module (TorchModel and
``module:`` specs) through the methods, state round trips, augmentation, DP-SGD."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

import fedlabels as fl
from conftest import digits_with_sizes
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.cnn import BUILDERS
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.learners.torch_net import TorchNetClassifier, guess_shape


def _count(model: nn.Module) -> int:
    """Parameters plus batch-norm running statistics (Keras counts both as parameters)."""
    buffers = sum(b.numel() for n, b in model.named_buffers() if "num_batches" not in n)
    return sum(p.numel() for p in model.parameters()) + buffers


def test_cifar10_network_has_the_papers_table_10_parameter_count():
    table_10 = [896, 128, 9248, 128, 18496, 256, 36928, 256, 73856, 512, 147584, 512,
                262272, 512, 1290]  # the Parameters column of the FedCT paper's Table 10
    assert _count(BUILDERS["cifar10"]((3, 32, 32), 10)) == sum(table_10)


def test_small_cnn_and_resnet18_have_their_published_sizes():
    # McMahan et al. 2017's MNIST CNN: 1,663,370 parameters; ResNet-18 (CIFAR): 11,173,962
    small = BUILDERS["small"]((1, 28, 28), 10)
    assert sum(p.numel() for p in small.parameters()) == 1_663_370
    resnet = BUILDERS["resnet18"]((3, 32, 32), 10)
    assert sum(p.numel() for p in resnet.parameters()) == 11_173_962


@pytest.mark.parametrize("arch", sorted(BUILDERS))
@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 12, 10)])
def test_every_architecture_adapts_to_the_input_shape(arch, shape):
    kwargs = {"width": 4} if arch == "resnet18" else {}
    model = BUILDERS[arch](shape, 7, **kwargs).eval()
    with torch.no_grad():
        assert model(torch.zeros(3, *shape)).shape == (3, 7)


def test_shape_is_guessed_from_square_feature_counts_and_refused_otherwise():
    assert guess_shape(784) == (1, 28, 28) and guess_shape(3072) == (3, 32, 32)
    assert guess_shape(64) == (1, 8, 8) and guess_shape(30) is None
    learner = TorchNetClassifier("small", n_classes=2, random_state=0)
    with pytest.raises(FedLabelsError, match="no recorded image shape; set shape=C-H-W"):
        learner.initialise(30, 2)


def test_specs_parse_check_and_build():
    (spec,) = parse_model_spec("cnn(arch=svhn,lr=0.01,augment=true,shape=1-8-8)")
    learner = build_learner(spec, n_classes=10, random_state=3)
    assert isinstance(learner, TorchNetClassifier) and learner.network == "svhn"
    assert learner.learning_rate == 0.01 and learner.input_shape == (1, 8, 8)
    for bad, message in [("cnn(arch=vgg)", "arch must be one of"),
                         ("cnn(depth=3)", "unknown parameter"),
                         ("resnet18(width=0)", "width must be an integer >= 1"),
                         ("cnn(shape=8-8)", "shape must be C-H-W"),
                         ("module:nowhere_at_all:f", "cannot import 'nowhere_at_all'"),
                         ("module:user_nets:nothing",  # and which file was imported
                          r"has no 'nothing' \(model module:user_nets:nothing; imported "
                          r"from \S*user_nets\S*\.py\)"),
                         ("module:user_nets", "use module:PACKAGE.MODULE:FACTORY")]:
        with pytest.raises(FedLabelsError, match=message):
            parse_model_spec(bad)


def _oracle_mlp_weights(X, y, hidden, n_classes, seed, steps, batch):
    """The FedCT paper's MLP trained by a plain torch loop: seeded uniform init, the
    learner's minibatch order (a permutation per epoch from default_rng(seed)), Adam."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [X.shape[1], *hidden, n_classes]
    layers = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    with torch.no_grad():
        for p in model.parameters():
            fan = p.shape[1] if p.dim() > 1 else len(p)
            p.uniform_(-1 / np.sqrt(fan), 1 / np.sqrt(fan), generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    order, pos = rng.permutation(len(y)), 0
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(steps):
        if pos + batch > len(y):
            order, pos = rng.permutation(len(y)), 0
        idx = torch.from_numpy(order[pos : pos + batch])
        pos += batch
        opt.zero_grad()
        nn.functional.cross_entropy(model(Xt[idx]), yt[idx]).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def test_mlp_on_the_cpu_trains_exactly_as_a_plain_torch_loop():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 12)).astype(np.float32)
    y = rng.integers(0, 3, 150)
    learner = TorchMLPClassifier((16, 8), n_classes=3, random_state=5, batch_size=32)
    learner.place("cpu", "fp32")
    learner.train_steps(X, y, 11)
    expected = _oracle_mlp_weights(X, y, (16, 8), 3, 5, 11, 32)
    np.testing.assert_array_equal(learner.get_weights(), expected)


def test_device_cpu_and_auto_give_the_run_of_no_device_on_a_cpu_machine():
    if torch.cuda.is_available():
        pytest.skip("auto means CUDA here")
    fed = fl.load_federation("digits", clients=3, seed=0)
    runs = [fl.run("fedct", fed, model="mlp(hidden=16)", rounds=2, period=4, seed=0,
                   progress=False, **kw) for kw in ({}, {"device": "cpu"}, {"device": "auto"})]
    weights = [np.concatenate([m.get_weights() for m in r.client_models]) for r in runs]
    np.testing.assert_array_equal(weights[0], weights[1])
    np.testing.assert_array_equal(weights[0], weights[2])
    assert runs[2].extra["device"]["devices"] == ["cpu"]
    assert runs[2].extra["device"]["asked"] == "auto"
    assert runs[0].extra["device"]["precision"] == "fp32"


def test_bf16_autocast_runs_on_the_cpu_and_stays_close_to_fp32():
    fed = fl.load_federation("digits", clients=3, seed=0)
    a = fl.run("fedct", fed, model="cnn(arch=small)", rounds=1, period=3, seed=0,
               progress=False)
    b = fl.run("fedct", fed, model="cnn(arch=small)", rounds=1, period=3, seed=0,
               progress=False, precision="bf16")
    assert b.extra["device"]["precision"] == "bf16"
    wa, wb = (np.concatenate([m.get_weights() for m in r.client_models]) for r in (a, b))
    assert not np.array_equal(wa, wb)  # bf16 really changed the arithmetic
    assert np.abs(wa - wb).max() < 0.05  # three Adam steps of lr 1e-3 move a weight <= 3e-3 each


def _train_then_state(learner, X, y):
    learner.train_steps(X, y, 3)
    return learner.state_dict()


def test_cnn_state_round_trip_with_batch_norm_and_augmentation():
    rng = np.random.default_rng(1)
    X = rng.random((40, 64), dtype=np.float32)
    y = rng.integers(0, 4, 40)
    make = lambda: TorchNetClassifier("cifar10", n_classes=4, random_state=2, batch_size=8,  # noqa: E731
                                      augment=True)
    a = make()
    state = _train_then_state(a, X, y)
    assert state["model.5.num_batches_tracked"].dtype == np.int64
    b = make()
    b.load_state_dict(state)
    a.train_steps(X, y, 4)
    b.train_steps(X, y, 4)
    np.testing.assert_array_equal(a.get_weights(), b.get_weights())
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    other = TorchNetClassifier("svhn", n_classes=4, random_state=2)
    with pytest.raises(FedLabelsError, match="network='cifar10', this learner has 'svhn'"):
        other.load_state_dict(state)


def test_augmentation_gives_padded_crops_and_flips_of_each_image():
    learner = TorchNetClassifier("small", n_classes=2, random_state=0, augment=True)
    learner.initialise(64, 2)
    images = torch.arange(5 * 64, dtype=torch.float32).reshape(5, 1, 8, 8) + 1
    out = learner._augment(images.clone())
    padded = nn.functional.pad(images, (1, 1, 1, 1))  # pad = 8 // 8
    for i in range(5):
        candidates = [padded[i, :, r : r + 8, c : c + 8] for r in range(3) for c in range(3)]
        candidates += [t.flip(-1) for t in candidates]
        assert any(torch.equal(out[i], t) for t in candidates)
    again = TorchNetClassifier("small", n_classes=2, random_state=0, augment=True)
    again.initialise(64, 2)
    assert torch.equal(again._augment(images.clone()), out)  # the learner's seeded generator


def test_hidden_features_of_a_cnn_and_refusal_for_a_non_sequential_module():
    from user_nets import Residual

    rng = np.random.default_rng(0)
    X = rng.random((10, 64), dtype=np.float32)
    y = rng.integers(0, 3, 10)
    cnn = TorchNetClassifier("small", n_classes=3, random_state=0).train_steps(X, y, 1)
    assert cnn.hidden_features(X).shape == (10, 512)
    own = fl.TorchModel(Residual, n_classes=3, random_state=0).train_steps(X, y, 1)
    with pytest.raises(FedLabelsError, match=r"not an nn\.Sequential"):
        own.hidden_features(X)


def test_a_cnn_predicts_in_chunks_of_256_on_a_cpu_and_the_chunk_changes_no_probability():
    """By default a network predicts 256 rows per forward pass on a CPU (faster than 1024
    for the small CNN on one thread, docs/neural.md) and 1024 on a GPU; an explicit
    predict_batch_size wins, and the chunking changes the probabilities by rounding only."""
    rng = np.random.default_rng(0)
    X = rng.random((600, 64), dtype=np.float32)
    y = rng.integers(0, 3, 600)
    cnn = TorchNetClassifier("small", n_classes=3, random_state=0).train_steps(X, y, 2)
    assert cnn.predict_batch_size is None and cnn.predict_step() == 256
    chunks: list[int] = []
    hook = cnn.model_.register_forward_pre_hook(lambda _, args: chunks.append(len(args[0])))
    by_default = cnn.predict_proba(X)
    assert chunks == [256, 256, 88]
    hook.remove()
    for size in (1, 100, 1024):
        cnn.set_params(predict_batch_size=size)
        assert cnn.predict_step() == size
        np.testing.assert_allclose(cnn.predict_proba(X), by_default, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(cnn.hidden_features(X), cnn.hidden_features(X, 256),
                                   rtol=1e-5, atol=1e-6)
    on_gpu = TorchNetClassifier("small", n_classes=3)
    on_gpu.device = "cuda:0"  # the choice only: no GPU needed
    assert on_gpu.predict_step() == 1024
    with pytest.raises(FedLabelsError, match="predict_batch_size must be an integer >= 1"):
        TorchNetClassifier("small", n_classes=3, predict_batch_size=0).train_steps(X, y, 1)


def test_your_own_module_through_fedct_with_unequal_clients_and_partial_participation():
    from user_nets import tiny_mlp

    fed = digits_with_sizes((40, 90, 160), n_unlabeled=400, n_test=300)
    result = fl.run("fedct", fed, model=fl.TorchModel(tiny_mlp, lr=3e-3), rounds=6,
                    period=25, seed=0, progress=False, participation=2)
    assert result.final["mean_accuracy"] > 0.5  # ten classes: chance is 0.1
    assert [len(r.participants) for r in result.rounds] == [2] * 6
    assert all(isinstance(m, TorchNetClassifier) for m in result.client_models)


def test_your_own_module_through_fedavg_sends_its_weights():
    from user_nets import tiny_cnn

    fed = digits_with_sizes((30, 70, 120), n_unlabeled=200, n_test=300)
    result = fl.run("fedavg", fed, model=fl.TorchModel(tiny_cnn, lr=3e-3), rounds=4,
                    period=20, seed=0, progress=False)
    assert result.final["mean_accuracy"] > 0.3
    n_params = 1 * 4 * 9 + 4 + 4 * 64 * 10 + 10  # conv 1->4 (3x3), linear 256 -> 10
    up = result.rounds[0].bytes_up[0]
    assert 4 * n_params < up < 4 * n_params + 2048  # float32 weights plus the header
    model = result.client_models[0]
    assert model.input_shape == (1, 8, 8)  # it names input_shape: it got the digits' shape


@pytest.mark.parametrize("method", ["dd", "ds-fl", "feddf", "dp-fedavg"])
def test_your_own_module_through_the_other_weight_and_distillation_methods(method):
    from user_nets import tiny_mlp

    fed = digits_with_sizes((30, 60, 90), n_unlabeled=150, n_test=200)
    options = {"epsilon": 5.0} if method == "dp-fedavg" else {}
    result = fl.run(method, fed, model=fl.TorchModel(tiny_mlp), rounds=2, period=5,
                    seed=0, progress=False, options=options)
    assert len(result.final["client_accuracies"]) == 3


def test_dpsgd_with_your_own_module_and_a_refusal_for_batch_norm():
    from fedlabels.learners.dpsgd import _clipped_sum_func, clipped_gradient_sum

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    xb, yb = torch.randn(9, 6), torch.randint(0, 3, (9,))
    closed, n1 = clipped_gradient_sum(mlp, xb, yb, 0.7)
    generic, n2 = _clipped_sum_func(mlp, xb, yb, 0.7)  # torch.func path on the same MLP
    torch.testing.assert_close(n1, n2)
    for a, b in zip(closed, generic, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    from user_nets import tiny_cnn

    fed = digits_with_sizes((40, 60, 80), n_unlabeled=150, n_test=200)
    options = {"mechanism": "dpsgd", "epsilon": 8.0}
    result = fl.run("dp-fedct", fed, model=fl.TorchModel(tiny_cnn), rounds=2, period=4,
                    seed=0, progress=False, options=options)
    assert result.extra["privacy"]["guarantee"] in ("formal", "conditional")
    with pytest.raises(FedLabelsError, match="batch normalisation"):
        fl.run("dp-fedct", fed, model="cnn(arch=cifar10)", rounds=1, period=2, seed=0,
               progress=False, options=options)


def test_module_spec_from_the_command_line(tmp_path):
    import json

    from fedlabels.cli import main

    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", "digits", "--clients", "3",
                 "--model", "module:user_nets:tiny_mlp(lr=0.003,batch_size=32)",
                 "--rounds", "2", "--period", "5", "--output", str(out),
                 "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["model"] == "module:user_nets:tiny_mlp(lr=0.003,batch_size=32)"
    assert data["federation"]["image_shape"] == [1, 8, 8]
    assert data["device"]["devices"] == ["cpu"]


def test_a_result_names_your_own_network_as_a_spec_does(tmp_path):
    """fl.TorchModel's result recorded models ['TorchNetClassifier', ...] and the
    configuration's model as a repr holding a memory address, so it said neither which
    module nor which factory trained; now the spec that names it, as --model writes it."""
    import functools
    import json

    from user_nets import tiny_cnn

    def with_width(n_classes, input_shape, width=4):
        return tiny_cnn(n_classes, input_shape)

    fed = digits_with_sizes((30, 40, 50), n_unlabeled=100, n_test=50)
    result = fl.run("local", fed, model=fl.TorchModel(tiny_cnn, lr=3e-3, batch_size=16),
                    rounds=1, period=2, seed=0, progress=False)
    spec = "module:user_nets:tiny_cnn(lr=0.003,batch_size=16)"
    assert result.models == [spec] * 3 and result.config["model"] == spec
    (again,) = parse_model_spec(spec)  # what it records runs from the command line too
    assert again.params == {"factory": "user_nets:tiny_cnn", "lr": 0.003, "batch_size": 16}
    partial = fl.TorchModel(functools.partial(with_width, width=8), shape=(1, 8, 8))
    result = fl.run("local", fed, model=[partial, "dt", partial], rounds=1, period=2,
                    seed=0, progress=False)
    name = ("module:test_torch_networks:test_a_result_names_your_own_network_as_a_spec_does"
            ".<locals>.with_width(width=8,shape=1-8-8)")
    assert result.models == [name, "decision_tree", name]
    assert result.config["model"] == f"{name},dt,{name}"
    result.save(tmp_path / "r.json")
    assert " at 0x" not in (tmp_path / "r.json").read_text()
    assert json.loads((tmp_path / "r.json").read_text())["models"][0] == name


def test_a_result_names_your_loss_settings():
    """torch's repr of a loss shows none of its settings, so a run with
    CrossEntropyLoss(label_smoothing=0.1) recorded loss=CrossEntropyLoss(), the same as the
    default loss's; now the settings that differ from the class's defaults."""
    import torch
    from torch import nn

    from user_nets import tiny_mlp

    smoothed = fl.TorchModel(tiny_mlp, loss=nn.CrossEntropyLoss(label_smoothing=0.1))
    assert smoothed.spec_text() == \
        "module:user_nets:tiny_mlp(loss=CrossEntropyLoss(label_smoothing=0.1))"
    weighted = fl.TorchModel(tiny_mlp, loss=nn.CrossEntropyLoss(weight=torch.ones(3),
                                                                reduction="sum"))
    assert weighted.spec_text() == \
        "module:user_nets:tiny_mlp(loss=CrossEntropyLoss(reduction='sum',weight=tensor[3]))"
    plain = fl.TorchModel(tiny_mlp, loss=nn.CrossEntropyLoss())
    assert plain.spec_text() == "module:user_nets:tiny_mlp(loss=CrossEntropyLoss())"
