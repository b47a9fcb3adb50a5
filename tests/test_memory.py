"""Memory regressions: no per-client copy of U, float32 federations without float64 copies."""

import gzip
import tracemalloc

import numpy as np
import pytest
import torch

import fedlabels as fl
from fedlabels.data.lazy_rows import LazyRows
from fedlabels.data.registry import get_dataset
from fedlabels.downloads.cache import dataset_dir
from fedlabels.downloads.fetch import FASHION_MNIST
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.methods.fedct.fedct import FedCT


def _arrays(obj):
    """(name, array) for every ndarray / tensor attribute of ``obj``, one level into
    lists, tuples and dicts (a role's or learner's own state)."""
    for name, value in vars(obj).items():
        items = [value]
        if isinstance(value, list | tuple):
            items = list(value)
        elif isinstance(value, dict):
            items = list(value.values())
        for item in items:
            if isinstance(item, torch.Tensor):
                yield name, item.detach().numpy()
            elif isinstance(item, np.ndarray):
                yield name, item


def _assert_holds_no_copy_of(role, fed):
    """The role keeps U and the test set only as the federation's own arrays, and no other
    array it (or its learner) holds is anywhere near the size of U."""
    assert role.X_public is fed.X_public
    assert role.X_test is fed.X_test
    shared = (fed.X_public, fed.X_test, role.data.X, role.data.y, fed.y_test)
    limit = fed.X_public.nbytes // 4
    for owner in (role, role.learner):
        for name, arr in _arrays(owner):
            if any(arr is s for s in shared):
                continue
            assert not np.shares_memory(arr, fed.X_public), name
            assert arr.nbytes < limit, (f"client {role.cid}: {type(owner).__name__}.{name} "
                                        f"holds {arr.nbytes} bytes (U is {fed.X_public.nbytes})")


@pytest.fixture
def fedct_roles(monkeypatch):
    """The FedCT client roles that ``fl.run`` builds, recorded as they are made."""
    made = []
    make_client = FedCT.make_client

    def recording(self, *args, **kwargs):
        made.append(make_client(self, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(FedCT, "make_client", recording)
    return made


@pytest.mark.parametrize("model", ["mlp(hidden=8)", "dt"])
def test_fedct_clients_keep_labels_not_a_copy_of_U(model, fedct_roles):
    fed = fl.load_federation("digits", clients=5, seed=0)
    fl.run("fedct", fed, model=model, rounds=3, period=3, seed=0)
    assert len(fedct_roles) == 5
    for c in fedct_roles:
        _assert_holds_no_copy_of(c, fed)
        assert c.pseudo_index is None  # a majority vote never abstains: P is all of U
        assert len(c.pseudo_y) == len(fed.X_public)
        assert c.pseudo_X is fed.X_public  # the shared U itself, not a copy


@pytest.mark.parametrize("model", ["mlp(hidden=8)", "dt"])
def test_fedct_abstentions_keep_indices_only(model, fedct_roles):
    fed = fl.load_federation("digits", clients=5, seed=0)
    res = fl.run("fedct", fed, model=model, rounds=3, period=20, seed=0, quorum=0.6)
    # the clients last trained on the consensus of round 2 (it travels with round 3)
    coverage = res.rounds[1].server["consensus_coverage"]
    assert 0 < coverage < 1
    for c in fedct_roles:
        _assert_holds_no_copy_of(c, fed)
        assert c.pseudo_index is not None
        assert len(c.pseudo_index) == len(c.pseudo_y) == round(coverage * len(fed.X_public))
        assert np.array_equal(c.pseudo_X, fed.X_public[c.pseudo_index])  # made on access


def test_aux_index_trains_exactly_like_the_subset():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 6)).astype(np.float32), rng.integers(0, 3, 40)
    U, yU = rng.normal(size=(200, 6)).astype(np.float32), rng.integers(0, 3, 200)
    rows = np.flatnonzero(rng.random(200) < 0.6)
    w = rng.random(len(rows)).astype(np.float32)
    a = TorchMLPClassifier((8,), n_classes=3, batch_size=16, random_state=1)
    b = TorchMLPClassifier((8,), n_classes=3, batch_size=16, random_state=1)
    for _ in range(2):  # warm-started, cursors carried over between calls
        a.train_steps(X, y, 7, U[rows], yU[rows], w_aux=w)
        b.train_steps(X, y, 7, U, yU[rows], w_aux=w, aux_index=rows)
    assert np.array_equal(a.get_weights(), b.get_weights())
    with pytest.raises(fl.FedLabelsError, match="aligned"):
        b.train_steps(X, y, 1, U, yU[rows], aux_index=rows[:-1])


@pytest.mark.parametrize("dataset", ["breast_cancer", "digits", "wine"])
def test_federations_are_float32(dataset):
    fed = fl.load_federation(dataset, clients=3, seed=0)
    for arr in (fed.X_public, fed.X_test, *(c.X for c in fed.clients)):
        assert arr.dtype == np.float32


@pytest.mark.parametrize("scale", ["public", "none"])
def test_make_federation_makes_no_float64_copy_of_the_data(scale):
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(100_000, 50)) * 3 + 1).astype(np.float32)
    y = rng.integers(0, 3, len(X))
    tracemalloc.start()
    try:
        fed = fl.make_federation(X, y, clients=4, unlabeled=10_000, private=10_000,
                                 test=5_000, scale=scale, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the old path widened all of X to float64 first (2 x X.nbytes), then copied the splits
    assert peak < X.nbytes, f"peak {peak} bytes for a {X.nbytes}-byte float32 X"
    for arr in (fed.X_public, fed.X_test, *(c.X for c in fed.clients)):
        assert arr.dtype == np.float32 and not np.shares_memory(arr, X)
    # the same numbers as z-scoring a float64 copy (statistics and arithmetic in float64)
    Xd = X.astype(np.float64)
    full = fl.make_federation(Xd, y, clients=4, unlabeled=10_000, private=10_000,
                              test=5_000, scale=scale, seed=0)
    assert np.array_equal(full.X_public, fed.X_public)
    assert np.array_equal(full.X_test, fed.X_test)
    assert all(np.array_equal(a.X, b.X) for a, b in zip(full.clients, fed.clients, strict=True))


def test_explicit_test_set_is_copied_not_shared():
    rng = np.random.default_rng(0)
    X, Xt = rng.random((300, 4), dtype=np.float32), rng.random((50, 4), dtype=np.float32)
    fed = fl.make_federation(X, rng.integers(0, 2, 300), X_test=Xt,
                             y_test=rng.integers(0, 2, 50), clients=3, unlabeled=100,
                             scale="none")
    assert np.array_equal(fed.X_test, Xt) and not np.shares_memory(fed.X_test, Xt)


def _write_idx(path, array, header):
    with gzip.open(path, "wb") as fh:
        fh.write(bytes(header) + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def test_fashion_images_stay_uint8_until_split():
    """A tiny fake Fashion-MNIST cache: the loader keeps pixels as uint8 (LazyRows) and the
    federation gets exactly the float32 values ``uint8 / 255`` (as an eager conversion)."""
    rng = np.random.default_rng(0)
    root = dataset_dir("fashion_mnist")
    root.mkdir(parents=True)
    images = rng.integers(0, 256, (300, 784), dtype=np.uint8)
    test_images = rng.integers(0, 256, (60, 784), dtype=np.uint8)
    labels, test_labels = np.arange(300) % 10, np.arange(60) % 10
    _write_idx(root / "train-images-idx3-ubyte.gz", images, [0] * 16)
    _write_idx(root / "train-labels-idx1-ubyte.gz", labels, [0] * 8)
    _write_idx(root / "t10k-images-idx3-ubyte.gz", test_images, [0] * 16)
    _write_idx(root / "t10k-labels-idx1-ubyte.gz", test_labels, [0] * 8)
    (root / FASHION_MNIST.marker).write_text("{}")

    raw = get_dataset("fashion_mnist").load()
    assert isinstance(raw.X, LazyRows) and raw.X.source.dtype == np.uint8
    assert np.array_equal(np.asarray(raw.X), images.astype(np.float32) / 255.0)
    fed = fl.load_federation("fashion_mnist", clients=3, unlabeled=100, private=60)
    assert fed.class_names[8] == "8" and fed.info["class_descriptions"][8] == "Bag"
    eager = fl.make_federation(images.astype(np.float32) / 255.0, labels, clients=3,
                               unlabeled=100, private=60,
                               X_test=test_images.astype(np.float32) / 255.0,
                               y_test=test_labels, scale="none", name="fashion_mnist")
    for a, b in [(fed.X_public, eager.X_public), (fed.X_test, eager.X_test),
                 *((c.X, d.X) for c, d in zip(fed.clients, eager.clients, strict=True))]:
        assert a.dtype == np.float32 and np.array_equal(a, b)
