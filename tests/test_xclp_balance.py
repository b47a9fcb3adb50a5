"""Class-balanced XCLP (``balance=class``): the XCLP code's recipe, with the class counts from
one more secure sum; and the small checks (CG limit warning, k < n before the secure phase).

Paillier runs are FUNCTIONAL tests with short (512-bit) keys; real runs use 2048 bits.
"""

from __future__ import annotations

import numpy as np
import pytest

from dropping_grid import DroppingGrid, xclp_drop
from fedlabels.core.errors import FedLabelsError, FedLabelsWarning
from fedlabels.data import ClientData
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.method.base import MethodContext, Settings
from fedlabels.methods.xclp import XCLP, XCLPOptions, XCLPServerCore
from fedlabels.propagation.core import (
    GraphSpec,
    class_loss_weights,
    hamming_matrix,
    knn_graph_from_hamming,
    lsh_bits,
    lsh_projection,
    one_hot,
    propagate,
    solve_cg,
)
from fedlabels.secure.rowsums import mask_counts, sum_counts, unmask_counts

L, K, C = 40, 4, 3


def _clients(secure: str, n_clients: int = 3, seed: int = 0, **extra):
    """Clients with unequal sizes and unequal class frequencies (class 0 is rare)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(C, 6))
    data = []
    for n in [26, 17, 22, 15, 19][:n_clients]:
        y = rng.choice(C, n, p=[0.15, 0.35, 0.5])
        data.append(ClientData(centers[y] + rng.normal(size=(n, 6)), y))
    y_test = rng.integers(0, C, 12)
    X_test = centers[y_test] + rng.normal(size=(12, 6))
    opts = XCLPOptions.from_mapping({"secure": secure, "lsh_bits": L, "knn": K,
                                     "key_bits": 512, "insecure_small_keys": True,
                                     "labeled_fraction": 0.4, "alpha": 0.9, "balance": "class",
                                     **extra}, "xclp")
    ctx = MethodContext(Settings(n_classes=C, n_features=6, n_clients=n_clients, options=opts),
                        seeds=[11 + i for i in range(n_clients)], server_seed=1)
    clients = {c: XCLP().make_client(c, data[c], None, ctx, None, X_test, y_test)
               for c in range(n_clients)}
    return clients, opts


def _graph(clients, members, seed):
    V = np.concatenate([clients[c].xclp_features() for c in members])
    bits = lsh_bits(V, lsh_projection(seed, L, V.shape[1]))
    return knn_graph_from_hamming(hamming_matrix(bits, bits, L), GraphSpec(k=K, n_bits=L))


def test_balanced_propagation_equals_dense_solve_with_balanced_y():
    """Oracle: (I − αW)^{-1} Y with Y[i, c] = 1/|L_c|, by a dense solve."""
    clients, _ = _clients("none")
    members = [0, 1, 2]
    W = _graph(clients, members, 0)
    y = np.concatenate([clients[c].xclp_partial_labels() for c in members])
    counts = np.bincount(y[y >= 0], minlength=C)
    assert len(set(counts.tolist())) > 1  # the classes are unbalanced
    Y = one_hot(y, C) / counts
    dense = np.linalg.solve(np.eye(W.shape[0]) - 0.9 * W.toarray(), Y)
    np.testing.assert_allclose(propagate(W, y, C, 0.9, balance="class"), dense, atol=1e-8)


def test_class_loss_weights_formula():
    np.testing.assert_allclose(class_loss_weights(np.array([2, 6, 0, 4])),
                               [1.5, 0.5, 0.0, 0.75])


@pytest.mark.parametrize("secure", ["paillier", "ot", "none"])
def test_secure_balanced_equals_plaintext(secure):
    clients, opts = _clients(secure)
    grid = InProcessGrid(clients, CommMeter())
    core = XCLPServerCore(opts, C)
    core.run(grid, 0, [0, 1, 2], session=0)
    seed = clients[0].lsh_seed_used
    W = _graph(clients, [0, 1, 2], seed)
    y = np.concatenate([c.xclp_partial_labels() for c in clients.values()])
    Z = solve_cg(W, one_hot(y, C) / np.bincount(y[y >= 0], minlength=C), 0.9)
    offsets = np.cumsum([0] + [c.n_points for c in clients.values()])
    for c, client in clients.items():
        rows = Z[offsets[c]:offsets[c + 1]]
        np.testing.assert_allclose(client.xclp_scores, rows, atol=1e-7)
        assert np.array_equal(client.xclp_labels, rows.argmax(axis=1))
        assert client.xclp_confidence.max() == pytest.approx(1.0)  # divided by the max
        assert np.array_equal(client.xclp_class_counts, np.bincount(y[y >= 0], minlength=C))


def test_counts_sum_hides_counts_and_follows_rowsum_dropouts():
    """The server's sum of the masked counts is not the counts; a client lost within
    SecureRowSums is left out of the counts as it is of the labels."""
    clients, opts = _clients("paillier")
    sent: list[np.ndarray] = []
    inner = InProcessGrid(clients, CommMeter())
    exchange = inner.exchange

    def recording(messages, rnd):
        replies = exchange(messages, rnd)
        sent.extend(m.arrays["counts"] for m in replies.values() if "counts" in m.arrays)
        return replies

    inner.exchange = recording  # type: ignore[method-assign]
    grid = DroppingGrid(inner, [xclp_drop(1, "within-rowsums", deliver=True)])
    XCLPServerCore(opts, C).run(grid, 0, [0, 1, 2], session=0)
    truth = {c: np.bincount(clients[c].partial[clients[c].partial >= 0], minlength=C)
             for c in clients}
    for part in sent:
        assert part.dtype == np.uint64
        assert not any(np.array_equal(part.view(np.int64), t) for t in truth.values())
    assert np.array_equal(clients[0].xclp_class_counts, truth[0] + truth[2])
    assert np.array_equal(clients[2].xclp_class_counts, truth[0] + truth[2])


def test_count_masks_cancel_only_with_the_right_members():
    seed = bytes(range(32))
    parts = [mask_counts(np.array([3, 0, 5]), seed, 0, 0),
             mask_counts(np.array([1, 2, 0]), seed, 4, 0)]
    assert np.array_equal(unmask_counts(sum_counts(parts), seed, [0, 4], 0), [4, 2, 5])
    with pytest.raises(FedLabelsError, match="unmask"):
        unmask_counts(sum_counts(parts), seed, [0, 4], 1)  # another attempt's masks


def test_balance_option_is_declared_and_checked():
    with pytest.raises(FedLabelsError, match="balance"):
        XCLPOptions.from_mapping({"balance": "classes"}, "xclp")
    assert XCLPOptions.from_mapping({"balance": "CLASS"}, "xclp").balance == "class"


def test_cg_warns_at_its_iteration_limit():
    clients, _ = _clients("none")
    W = _graph(clients, [0, 1, 2], 0)
    B = np.eye(W.shape[0])[:, :3]
    with pytest.warns(FedLabelsWarning, match="iteration limit"):
        solve_cg(W, B, 0.99, max_iter=2)


def test_k_at_least_n_fails_before_the_secure_phase():
    clients, opts = _clients("paillier", knn=200)
    kinds: list[str] = []
    grid = InProcessGrid(clients, CommMeter())
    exchange = grid.exchange

    def recording(messages, rnd):
        kinds.extend(m.kind for m in messages.values())
        return exchange(messages, rnd)

    grid.exchange = recording  # type: ignore[method-assign]
    with pytest.raises(FedLabelsError, match="must be smaller than the number of points"):
        XCLPServerCore(opts, C).run(grid, 0, [0, 1, 2], session=0)
    assert "xclp.hamming" not in kinds and "xclp.seed" not in kinds


def test_fedavg_xclp_weights_pseudo_labels_by_class(breast_cancer_fed, monkeypatch):
    """balance=class: the pseudo-labels' loss weights are confidence × (Σn/C)/n_c with the
    XCLP members' class counts; the run also works in client groups."""
    import fedlabels as fl
    from fedlabels.learners.torch_mlp import TorchMLPClassifier
    from fedlabels.methods.xclp import FedAvgXCLPClient

    seen: list[tuple[np.ndarray, np.ndarray]] = []
    expected: list[np.ndarray] = []
    train = FedAvgXCLPClient.train

    def spying(self, message):
        if self.xclp_labels is not None:
            unl = self.partial < 0
            weights = class_loss_weights(self.xclp_class_counts)
            expected.append(self.xclp_confidence[unl] * weights[self.xclp_labels[unl]])
        return train(self, message)

    steps = TorchMLPClassifier.train_steps

    def recording(self, X, y, n, X_aux=None, y_aux=None, w_aux=None, aux_index=None):
        if w_aux is not None:
            seen.append(np.asarray(w_aux))
        return steps(self, X, y, n, X_aux, y_aux, w_aux, aux_index)

    monkeypatch.setattr(FedAvgXCLPClient, "train", spying)
    monkeypatch.setattr(TorchMLPClassifier, "train_steps", recording)
    res = fl.run("fedavg-xclp", breast_cancer_fed, model="mlp(hidden=16)", rounds=2,
                 period=3, seed=0,
                 options={"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3,
                          "warmup_rounds": 1, "secure": "none", "balance": "class",
                          "group_size": 2})
    groups = res.extra["xclp"]["rounds"][0]["groups"]
    assert sorted(len(g) for g in groups) == [2, 3]  # 5 clients in groups of at most 2 (+1)
    assert len(seen) == len(expected) == 5
    for got, want in zip(seen, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
