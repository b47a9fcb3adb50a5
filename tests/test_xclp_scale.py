"""XCLP at federation scale: client groups, balanced Paillier key roles, compact H_self.

Paillier runs are FUNCTIONAL tests with short (512-bit) keys; real runs use 2048 bits.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedlabels.data import ClientData
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.method.base import MethodContext, Settings
from fedlabels.methods.xclp import XCLP, XCLPOptions, XCLPServerCore
from fedlabels.methods.xclp.groups import client_groups, outcomes_record, run_groups
from fedlabels.propagation.core import hamming_matrix, lsh_bits, lsh_projection
from fedlabels.secure.hamming_protocol import (
    pack_self_block,
    paillier_holder,
    unpack_self_block,
)

L, K, C = 24, 3, 3


def _clients(secure: str, sizes: list[int], **extra):
    rng = np.random.default_rng(3)
    centers = rng.normal(scale=3.0, size=(C, 5))
    data = []
    for n in sizes:
        y = rng.integers(0, C, n)
        data.append(ClientData(centers[y] + rng.normal(size=(n, 5)), y))
    y_test = rng.integers(0, C, 2 * len(sizes))
    X_test = centers[y_test] + rng.normal(size=(len(y_test), 5))
    opts = XCLPOptions.from_mapping({"secure": secure, "lsh_bits": L, "knn": K,
                                     "key_bits": 512, "insecure_small_keys": True,
                                     "labeled_fraction": 0.3, "alpha": 0.9, **extra}, "xclp")
    m = len(sizes)
    ctx = MethodContext(Settings(n_classes=C, n_features=5, n_clients=m, options=opts),
                        seeds=[21 + i for i in range(m)], server_seed=5)
    clients = {c: XCLP().make_client(c, data[c], None, ctx, None, X_test, y_test)
               for c in range(m)}
    return clients, opts


@pytest.mark.parametrize(("m", "size", "expected"), [
    (60, 5, [5] * 12), (11, 5, [4, 4, 3]), (7, 2, [2, 2, 3]), (3, 2, [3]), (4, 10, [4])])
def test_groups_partition_the_clients_evenly(m, size, expected):
    groups = client_groups(list(range(m)), size, np.random.default_rng(0))
    assert sorted(len(g) for g in groups) == sorted(expected)
    assert sorted(c for g in groups for c in g) == list(range(m))  # each client once
    assert groups == client_groups(list(range(m)), size, np.random.default_rng(0))  # seeded
    assert client_groups(list(range(m)), None, np.random.default_rng(0)) == [list(range(m))]


def test_a_groups_result_equals_a_standalone_run_over_its_clients():
    sizes = [14, 9, 17, 11, 12]
    clients, opts = _clients("none", sizes, group_size=2)
    meter = CommMeter()
    core = XCLPServerCore(opts, C)
    outcomes = run_groups(core, InProcessGrid(clients, meter), 0, list(range(5)), 0,
                          np.random.default_rng(9))
    groups = [o.participants for o in outcomes]
    assert sorted(len(g) for g in groups) == [2, 3]
    for group, outcome in zip(groups, outcomes, strict=True):
        alone, _ = _clients("none", sizes)  # fresh clients, ungrouped options
        XCLPServerCore(opts, C).run(InProcessGrid(alone, CommMeter()), 0, group, session=0)
        assert outcome.n_points == sum(sizes[c] + 2 for c in group)
        for c in group:
            assert np.array_equal(clients[c].xclp_labels, alone[c].xclp_labels)
            np.testing.assert_array_equal(clients[c].xclp_scores, alone[c].xclp_scores)
    record = outcomes_record(outcomes)  # per group, and totals the engine's meter agrees with
    assert [g["members"] for g in record["groups"]] == groups
    assert record["bytes_up"] == meter.total("up")
    assert record["bytes_down"] == meter.total("down")


def test_grouped_paillier_gives_each_groups_exact_hamming_matrix():
    sizes = [8, 6, 7, 5]
    clients, opts = _clients("paillier", sizes, group_size=2)
    core = XCLPServerCore(opts, C)
    core.keep_H = True
    outcomes = run_groups(core, InProcessGrid(clients, CommMeter()), 0, list(range(4)), 0,
                          np.random.default_rng(1))
    assert len(outcomes) == 2
    for outcome in outcomes:
        group = outcome.participants
        seed = bytes(clients[group[0]].lsh_seed_used)
        assert all(bytes(clients[c].lsh_seed_used) == seed for c in group)
        V = np.concatenate([clients[c].xclp_features() for c in group])
        bits = lsh_bits(V, lsh_projection(seed, L, V.shape[1]))
        assert np.array_equal(outcome.H, hamming_matrix(bits, bits, L))


@pytest.mark.parametrize(("m", "expected"), [(5, [2] * 5), (4, [2, 2, 1, 1]), (2, [1, 0]),
                                             (6, [3, 3, 3, 2, 2, 2])])
def test_paillier_key_roles_are_balanced(m, expected):
    roster = [3 * c + 1 for c in range(m)]  # ids need not be 0..m-1
    held = [sum(paillier_holder(a, b, roster) == a for b in roster if b != a) for a in roster]
    assert held == expected
    for a in roster:
        for b in roster:
            if a != b:
                assert paillier_holder(a, b, roster) == paillier_holder(b, a, roster)


def test_decryptions_are_spread_over_the_clients():
    """At m = 5 every client holds the key for two pairs and decrypts its evaluators'
    ciphertexts: counted from the T_* replies the server receives (not client 0 alone)."""
    sizes = [6, 6, 6, 6, 6]
    clients, opts = _clients("paillier", sizes)
    grid = InProcessGrid(clients, CommMeter())
    exchange = grid.exchange
    decrypted = dict.fromkeys(range(5), 0)
    roles: dict[int, set[int]] = {c: set() for c in range(5)}

    def recording(messages, rnd):
        replies = exchange(messages, rnd)
        for cid, reply in replies.items():
            for name, arr in reply.arrays.items():
                if name.startswith("T_"):
                    decrypted[cid] += len(arr)
                    roles[cid].add(int(name[2:]))
        return replies

    grid.exchange = recording  # type: ignore[method-assign]
    core = XCLPServerCore(opts, C)
    core.keep_H = True
    out = core.run(grid, 0, list(range(5)), session=0)
    assert [len(roles[c]) for c in range(5)] == [2] * 5
    assert len(set(decrypted.values())) == 1  # equal sizes: equal decryptions
    seed = bytes(clients[0].lsh_seed_used)
    V = np.concatenate([clients[c].xclp_features() for c in range(5)])
    bits = lsh_bits(V, lsh_projection(seed, L, V.shape[1]))
    assert np.array_equal(out.H, hamming_matrix(bits, bits, L))


@pytest.mark.parametrize(("n", "n_bits", "dtype"), [(1, 16, np.uint8), (9, 300, np.uint16),
                                                    (5, 70_001, np.uint32)])
def test_h_self_travels_as_a_compact_triangle(n, n_bits, dtype):
    rng = np.random.default_rng(0)
    H = rng.integers(0, n_bits + 1, (n, n))
    H = np.triu(H, 1) + np.triu(H, 1).T
    packed = pack_self_block(H, n_bits)
    assert packed.dtype == dtype and packed.size == n * (n - 1) // 2
    assert np.array_equal(unpack_self_block(packed), H)


def test_grouped_xclp_run_records_each_group(breast_cancer_fed):
    import fedlabels as fl

    res = fl.run("xclp", breast_cancer_fed, rounds=1, seed=0,
                 options={"lsh_bits": 32, "knn": 3, "group_size": 2, "test_points": 5})
    info = res.extra["xclp"]
    assert sorted(len(g["members"]) for g in info["groups"]) == [2, 3]
    assert sorted(c for g in info["groups"] for c in g["members"]) == [0, 1, 2, 3, 4]
    assert info["n_points"] == sum(g["n_points"] for g in info["groups"])
    assert info["bytes_up"] == res.communication["bytes_up_total"]
    assert info["group_size"] == 2
