"""End-to-end XCLP protocol: secure == plaintext, what the server receives, dropouts.

Paillier runs here are FUNCTIONAL tests with short (512-bit) keys; real runs use 2048 bits.
Dropouts are simulated by the grid (:mod:`dropping_grid`): a dropped client's replies go
missing, as a deployment's grid reports a lost node.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from dropping_grid import DroppingGrid, xclp_drop
from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.method.base import MethodContext, Settings
from fedlabels.methods.xclp import XCLP, XCLPOptions, XCLPServerCore
from fedlabels.propagation.core import (
    GraphSpec,
    hamming_matrix,
    knn_graph_from_hamming,
    labels_and_confidence,
    lsh_bits,
    lsh_projection,
    one_hot,
    solve_cg,
)

L, K, C = 40, 4, 3


class RecordingGrid(InProcessGrid):
    """Records every message the server receives (after real serialization)."""

    def __init__(self, clients, meter):
        super().__init__(clients, meter)
        self.received: list[tuple[int, Message]] = []

    def exchange(self, messages, rnd):
        replies = super().exchange(messages, rnd)
        self.received += list(replies.items())
        return replies


def _setup(secure: str, drops=(), n_clients: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(C, 6))
    sizes = [24, 18, 21, 15][:n_clients]
    data = []
    for n in sizes:
        y = rng.integers(0, C, n)
        data.append(ClientData(centers[y] + rng.normal(size=(n, 6)), y))
    y_test = rng.integers(0, C, 12)
    X_test = centers[y_test] + rng.normal(size=(12, 6))
    opts = XCLPOptions.from_mapping({"secure": secure, "lsh_bits": L, "knn": K,
                                     "key_bits": 512, "insecure_small_keys": True,
                                     "labeled_fraction": 0.3, "alpha": 0.9,
                                     # Algorithm 1's one-hot Y: the plaintext reference;
                                     # balance=class: test_xclp_balance.py
                                     "balance": "none"},
                                    "xclp")
    settings = Settings(n_classes=C, n_features=6, n_clients=n_clients, options=opts)
    ctx = MethodContext(settings, seeds=[11 + i for i in range(n_clients)], server_seed=1)
    method = XCLP()
    clients = {c: method.make_client(c, data[c], None, ctx, None, X_test, y_test)
               for c in range(n_clients)}
    grid = RecordingGrid(clients, CommMeter())
    if drops:
        grid = DroppingGrid(grid, list(drops))
    core = XCLPServerCore(opts, C)
    core.keep_H = True
    return clients, grid, core


def _plaintext(clients, members, label_members, seed):
    """Centralised reference: the same graph and labels computed in the clear."""
    V = np.concatenate([clients[c].xclp_features() for c in members])
    y = np.concatenate([clients[c].xclp_partial_labels() if c in label_members
                        else np.full(len(clients[c].xclp_partial_labels()), -1)
                        for c in members])
    bits = lsh_bits(V, lsh_projection(seed, L, V.shape[1]))
    H = hamming_matrix(bits, bits, L)
    W = knn_graph_from_hamming(H, GraphSpec(k=K, n_bits=L))
    Z = solve_cg(W, one_hot(y, C), 0.9)
    return H, labels_and_confidence(Z)[0], Z


@pytest.mark.parametrize("secure", ["paillier", "ot", "none"])
def test_secure_equals_plaintext_and_leaks_nothing(secure):
    clients, grid, core = _setup(secure)
    out = core.run(grid, 0, [0, 1, 2], session=0)
    seeds = {bytes(c.lsh_seed_used) if secure != "none" else c.lsh_seed_used
             for c in clients.values()}
    assert len(seeds) == 1  # all clients derived the same LSH seed
    H, labels, Z = _plaintext(clients, [0, 1, 2], [0, 1, 2], seeds.pop())
    if secure != "none":
        assert np.array_equal(out.H, H)  # bit-identical Hamming matrix
    offsets = np.cumsum([0] + [c.n_points for c in clients.values()])
    for c, client in clients.items():
        np.testing.assert_allclose(client.xclp_scores, Z[offsets[c]:offsets[c + 1]],
                                   atol=1e-7)
        assert np.array_equal(client.xclp_labels, labels[offsets[c]:offsets[c + 1]])
    if secure == "none":
        return
    # what the server received: no features, labels or LSH bits of any client
    allowed = ("pub", "commit", "to_", "labeled_idx", "H_self", "enc", "pk_", "res_",
               "mask_", "T_", "R_", "part")
    for _cid, msg in grid.received:
        for name, arr in msg.arrays.items():
            assert name.startswith(allowed), name
            assert arr.dtype.kind in "iu", (name, arr.dtype)  # no float rows leave
            blob = arr.tobytes()
            for client in clients.values():
                assert client.packed.tobytes() not in blob
                labels_bytes = client.partial[client.partial >= 0].astype(np.int64).tobytes()
                assert len(labels_bytes) < 16 or labels_bytes not in blob
    # the masked row sums the server received look uniform (chi-square on byte values)
    parts = [m.arrays["part"].view(np.uint8).ravel() for _, m in grid.received
             if "part" in m.arrays]
    # fresh CSPRNG masks each run: p is uniform, so 1e-6 (not 1e-3) keeps false failures rare
    assert chisquare(np.bincount(np.concatenate(parts), minlength=256)).pvalue > 1e-6


@pytest.mark.parametrize(("phase", "graph", "labels"), [
    ("before-hamming", [0, 2], [0, 2]),
    ("during-hamming", [0, 2], [0, 2]),
    ("before-rowsums", [0, 1, 2], [0, 2]),
    ("within-rowsums", [0, 1, 2], [0, 2]),
])
@pytest.mark.parametrize("secure", ["paillier", "ot"])
@pytest.mark.parametrize("deliver", [False, True], ids=["unsent", "reply-lost"])
def test_dropouts(secure, phase, graph, labels, deliver):
    """A client lost at ``phase`` (its message never arrives, or its reply is lost)."""
    clients, grid, core = _setup(secure, drops=[xclp_drop(1, phase, deliver)])
    out = core.run(grid, 0, [0, 1, 2], session=0)
    assert out.dropped == {1: phase}
    assert out.graph_members == graph and out.rowsum_members == labels
    assert out.rowsum_attempts == (2 if phase == "within-rowsums" else 1)
    assert grid.client_ids == [0, 2]
    seed = bytes(clients[0].lsh_seed_used)
    H, pred, _ = _plaintext(clients, graph, labels, seed)
    assert np.array_equal(out.H, H)
    offsets = dict(zip(graph, np.cumsum([0] + [clients[c].n_points for c in graph]),
                       strict=False))
    for c in labels:
        assert np.array_equal(clients[c].xclp_labels,
                              pred[offsets[c]:offsets[c] + clients[c].n_points])
    assert clients[1].xclp_labels is None  # the dropped client receives nothing
    reply = clients[1].handle(Message("evaluate", category="evaluation"))
    assert reply.config["fallback"] is True  # it evaluates per-client LP instead


def test_everyone_dropping_before_rowsums_is_an_error():
    from fedlabels.core.errors import FedLabelsError

    drops = [xclp_drop(c, "before-rowsums") for c in range(3)]
    _, grid, core = _setup("none", drops=drops)
    with pytest.raises(FedLabelsError, match="every client dropped out"):
        core.run(grid, 0, [0, 1, 2], session=0)
