"""Plaintext propagation core: LSH, Hamming, kNN graph, sparse solve, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.propagation.core import (
    GraphSpec,
    check_params,
    hamming_matrix,
    knn_graph,
    knn_graph_from_hamming,
    label_propagation,
    labels_and_confidence,
    lsh_bits,
    lsh_projection,
    one_hot,
    propagate,
    unpack_bits,
)


def _blobs(n: int = 300, d: int = 8, c: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(c, d))
    y = rng.integers(0, c, n)
    return centers[y] + rng.normal(size=(n, d)), y


def test_hamming_matches_bitwise_count():
    rng = np.random.default_rng(1)
    V = rng.normal(size=(50, 6))
    for n_bits in (1, 13, 64, 100):
        bits = lsh_bits(V, lsh_projection(3, n_bits, 6))
        H = hamming_matrix(bits, bits, n_bits)
        raw = unpack_bits(bits, n_bits)
        brute = (raw[:, None, :] != raw[None, :, :]).sum(axis=2)
        assert np.array_equal(H, brute)
        assert np.all(np.diag(H) == 0)


def test_projection_is_shared_and_seeded():
    a = lsh_projection(b"\x01" * 32, 16, 4)
    assert np.array_equal(a, lsh_projection(b"\x01" * 32, 16, 4))
    assert not np.array_equal(a, lsh_projection(b"\x02" * 32, 16, 4))


def test_cosine_estimate_tracks_true_cosine():
    rng = np.random.default_rng(2)
    V = rng.normal(size=(40, 10))
    n_bits = 4096
    bits = lsh_bits(V, lsh_projection(0, n_bits, 10))
    est = np.cos(np.pi * hamming_matrix(bits, bits, n_bits) / n_bits)
    Vn = V / np.linalg.norm(V, axis=1, keepdims=True)
    assert np.abs(est - Vn @ Vn.T).max() < 0.1


def test_blocked_graph_equals_dense_and_is_normalised():
    X, _ = _blobs()
    spec = GraphSpec(k=7, n_bits=96)
    bits = lsh_bits(X, lsh_projection(5, 96, X.shape[1]))
    W1 = knn_graph(bits, spec, block=37)
    W2 = knn_graph_from_hamming(hamming_matrix(bits, bits, 96), spec)
    assert (W1 != W2).nnz == 0
    assert (knn_graph(bits, spec, block=3) != W2).nnz == 0  # blocks narrower than k
    assert abs(W1 - W1.T).max() < 1e-15  # symmetric
    assert np.all(W1.diagonal() == 0)
    assert np.max(np.abs(sp.linalg.eigsh(W1, k=1, which="LM")[0])) <= 1 + 1e-9


def test_cg_solution_matches_direct_solve():
    X, y = _blobs(n=200)
    y_part = np.where(np.arange(200) % 10 == 0, y, -1)
    bits = lsh_bits(X, lsh_projection(0, 64, X.shape[1]))
    W = knn_graph(bits, GraphSpec(k=6, n_bits=64))
    Z = propagate(W, y_part, 3, 0.95)
    dense = np.linalg.solve(np.eye(200) - 0.95 * W.toarray(), one_hot(y_part, 3))
    np.testing.assert_allclose(Z, dense, atol=1e-8)


def test_labels_and_confidence():
    Z = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.2, 0.7, -0.1]])
    labels, conf = labels_and_confidence(Z)
    assert labels.tolist()[:2] == [0, 0] and labels[3] == 1
    np.testing.assert_allclose(conf[:3], [1.0, 0.0, 0.0], atol=1e-12)
    assert 0 < conf[3] < 1


def test_propagation_labels_blobs_well():
    X, y = _blobs(n=400)
    y_part = np.where(np.arange(400) % 20 == 0, y, -1)
    labels, conf, _ = label_propagation(X, y_part, 3, k=8, n_bits=256, alpha=0.99)
    assert np.mean(labels == y) > 0.95
    assert conf.min() >= 0 and conf.max() <= 1


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"k": 10}, "smaller than the number of points"),
    ({"k": 3, "alpha": 1.0}, "alpha"),
    ({"k": 3, "alpha": 0.0}, "alpha"),
    ({"k": 3, "n_bits": 0}, "L"),
])
def test_bad_parameters(kwargs, match):
    X, y = _blobs(n=10)
    with pytest.raises(FedLabelsError, match=match):
        label_propagation(X, y, 3, **kwargs)


def test_no_labelled_point_and_no_data():
    X, _ = _blobs(n=30)
    with pytest.raises(FedLabelsError, match="no labelled point"):
        label_propagation(X, np.full(30, -1), 3, k=3)
    with pytest.raises(FedLabelsError, match="no data"):
        label_propagation(np.zeros((0, 8)), np.zeros(0, dtype=int), 3, k=3)
    with pytest.raises(FedLabelsError):
        check_params(5, 2, 0.5, -3)


def test_methods_reject_bad_input(breast_cancer_fed):
    with pytest.raises(FedLabelsError, match="alpha"):
        fl.run("xclp", breast_cancer_fed, rounds=1, options={"alpha": 1.5})
    with pytest.raises(FedLabelsError, match="lsh_bits"):
        fl.run("xclp", breast_cancer_fed, rounds=1, options={"lsh_bits": 0})
    with pytest.raises(FedLabelsError, match="smaller than the number of points"):
        fl.run("perclient-lp", breast_cancer_fed, rounds=1, options={"knn": 500})
    with pytest.raises(FedLabelsError, match=r"labeled_fraction must lie in \(0, 1\]"):
        fl.run("xclp", breast_cancer_fed, rounds=1, options={"labeled_fraction": 0.0})
    with pytest.raises(FedLabelsError, match="secure must be one of none, ot, paillier"):
        fl.run("xclp", breast_cancer_fed, rounds=1, options={"secure": "magic"})


@pytest.mark.parametrize(("method", "options", "match"), [
    ("xclp", {"drop": "1:before-hamming"}, "has no option 'drop'"),
    ("xclp", {"key_bits": 300}, "multiple of 8"),
    ("xclp", {"key_bits": 128}, "key_bits"),
    ("xclp", {"test_points": -1}, "test_points"),
    ("xclp", {"power": 0}, "power"),
    ("perclient-lp", {"secure": "ot"}, "has no option 'secure'"),
    ("fedavg-xclp", {"test_points": 5}, "has no option 'test_points'"),
    ("fedavg-xclp", {"client_fraction": 0}, "client_fraction"),
])
def test_options_are_declared_and_checked(method, options, match):
    """Options are validated (and unknown ones rejected) before any data is loaded."""
    with pytest.raises(FedLabelsError, match=match):
        fl.run(method, "no-such-dataset", rounds=1, options=options)


def test_option_classes():
    from fedlabels.methods.xclp import FedAvgXCLPOptions, PerClientLPOptions, XCLPOptions

    opts = XCLPOptions.from_mapping({"lsh_bits": 64, "knn": 5, "secure": "OT"}, "xclp")
    assert (opts.graph.n_bits, opts.graph.k, opts.secure) == (64, 5, "ot")
    flags = {info.name for info in XCLPOptions.declared() if info.flag}
    assert flags == {"lsh_bits", "knn", "alpha", "secure", "labeled_fraction"}
    assert "secure" not in PerClientLPOptions.names()
    assert {"client_fraction", "warmup_rounds", "propagation"} <= set(
        FedAvgXCLPOptions.names())


def test_client_with_no_data_is_rejected(breast_cancer_fed):
    from dataclasses import replace

    from fedlabels.data import ClientData

    empty = ClientData(np.zeros((0, breast_cancer_fed.n_features)), np.zeros(0, dtype=int))
    fed = replace(breast_cancer_fed, clients=[*breast_cancer_fed.clients[:2], empty])
    with pytest.raises(FedLabelsError, match="client 2 has no data"):
        fl.run("xclp", fed, rounds=1)


def test_xclp_beats_perclient_lp_on_small_clients(breast_cancer_fed):
    opts = {"lsh_bits": 256, "knn": 5, "labeled_fraction": 0.2}
    x = fl.run("xclp", breast_cancer_fed, rounds=1, options=opts)
    p = fl.run("perclient-lp", breast_cancer_fed, rounds=1, options=opts)
    assert x.final["mean_accuracy"] > p.final["mean_accuracy"]
    assert x.extra["xclp"]["n_points"] == sum(len(c) for c in breast_cancer_fed.clients) \
        + len(breast_cancer_fed.y_test)
    assert p.communication["bytes_up_total"] == 0  # per-client LP sends nothing


def test_cli_flags_map_to_options(tmp_path):
    from fedlabels.cli import main

    out = tmp_path / "r.json"
    code = main(["run", "--method", "xclp", "--dataset", "breast_cancer", "--rounds", "1",
                 "--clients", "3", "--lsh-bits", "64", "--knn", "5", "--alpha", "0.9",
                 "--secure", "none", "--labeled-fraction", "0.3", "--no-progress",
                 "--output", str(out)])
    assert code == 0
    import json

    rec = json.loads(out.read_text())["xclp"]
    assert (rec["lsh_bits"], rec["knn"], rec["alpha"], rec["labeled_fraction"]) == \
        (64, 5, 0.9, 0.3)
