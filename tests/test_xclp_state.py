"""XCLP clients rebuilt from scratch and restored from their state before every message.

A deployment (Flower) handles each message in a fresh process that rebuilds the client role
and restores it from ``state_dict()`` (plain arrays and scalars). Here the state also goes
through the wire codec between messages; the runs must equal in-process runs with
long-lived roles bit for bit. Secret randomness (keys, masks, seed shares) comes from a reproducible
source here (:func:`fedlabels.core.randomness.reproducible`) so that two runs can be compared.
"""

from __future__ import annotations

import numpy as np
import pytest

from dropping_grid import run_on_grid
from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.randomness import reproducible
from fedlabels.engines.inprocess import InProcessGrid


def _wire_state(state: dict) -> bytes:
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    config = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    return encode_message(Message("state", arrays=arrays, config=config))


def _unwire_state(blob: bytes) -> dict:
    message = decode_message(blob)
    return {**message.arrays, **message.config}


class RebuildGrid:
    """Every message goes to a role built afresh and restored from its (encoded) state."""

    def __init__(self, build, cids, meter) -> None:
        self.build = build
        self.cids = list(cids)
        self.meter = meter
        self.states: dict[int, bytes] = {}
        self.restores = 0

    @property
    def client_ids(self) -> list[int]:
        return self.cids

    def role(self, cid: int):
        role = self.build(cid)
        if cid in self.states:
            state = _unwire_state(self.states[cid])
            role.load_state_dict(state)
            self.restores += 1
            again = role.state_dict()  # a restored role holds exactly the state it was given
            assert again.keys() == state.keys()
            for key, value in state.items():
                if isinstance(value, np.ndarray):
                    assert again[key].dtype == value.dtype, key
                    assert np.array_equal(again[key], value, equal_nan=True), key
                else:
                    assert type(again[key]) is type(value) and again[key] == value, key
        return role

    def exchange(self, messages, rnd):
        replies = {}
        for cid in sorted(messages):
            down = encode_message(messages[cid])
            self.meter.add(rnd, cid, "down", messages[cid].category, len(down))
            role = self.role(cid)
            reply = role.handle(decode_message(down))
            self.states[cid] = _wire_state(role.state_dict())
            up = encode_message(reply)
            self.meter.add(rnd, cid, "up", reply.category, len(up))
            replies[cid] = decode_message(up)
        return replies


def _both(monkeypatch, method, fed, **kwargs):
    # secret randomness (keys, masks, seed shares) made reproducible, so runs can be compared
    with reproducible(7):
        normal = run_on_grid(method, fed, lambda build, learners, meter: InProcessGrid(
            {c: build(c, ln) for c, ln in enumerate(learners)}, meter), **kwargs)
    with reproducible(7):
        rebuilt = run_on_grid(method, fed, lambda build, learners, meter: RebuildGrid(
            build, range(len(learners)), meter), **kwargs)
    (rec_a, _, _), (rec_b, _, grid_b) = normal, rebuilt
    assert grid_b.restores > 0
    for a, b in zip(rec_a, rec_b, strict=True):
        assert a.accuracies == b.accuracies
        assert (a.bytes_up, a.bytes_down) == (b.bytes_up, b.bytes_down)
        assert {k: v for k, v in a.server.items() if "seconds" not in k} == \
            {k: v for k, v in b.server.items() if "seconds" not in k}
    return normal, rebuilt


@pytest.fixture(scope="module")
def fed3():
    import fedlabels as fl

    return fl.load_federation("breast_cancer", clients=3, seed=0)


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_secure_xclp_with_restored_clients_is_bit_identical(monkeypatch, fed3, secure):
    options = {"secure": secure, "lsh_bits": 16, "knn": 3, "labeled_fraction": 0.3,
               "key_bits": 512, "insecure_small_keys": True, "test_points": 4}
    (_, server_a, grid_a), (_, server_b, grid_b) = _both(monkeypatch, "xclp", fed3, rounds=1,
                                                        options=options)
    assert server_a.outcome.graph_members == server_b.outcome.graph_members == [0, 1, 2]
    for cid in grid_a.client_ids:
        a, b = grid_a.clients[cid], grid_b.role(cid)
        assert a.lsh_seed_used == b.lsh_seed_used
        assert np.array_equal(a.xclp_labels, b.xclp_labels)
        assert np.array_equal(a.xclp_scores, b.xclp_scores)  # bit-identical scores
        assert np.array_equal(a.xclp_confidence, b.xclp_confidence)


def test_fedavg_xclp_with_restored_clients_is_bit_identical(monkeypatch, fed3):
    options = {"secure": "paillier", "key_bits": 512, "insecure_small_keys": True,
               "lsh_bits": 16, "knn": 3,
               "labeled_fraction": 0.3, "warmup_rounds": 1}
    (_, server_a, _), (_, server_b, _) = _both(monkeypatch, "fedavg-xclp", fed3, rounds=2,
                                               model="mlp(hidden=16)", options=options)
    assert server_a.history[0]["members"] == [0, 1, 2]
    assert np.array_equal(server_a.weights, server_b.weights)


def test_perclient_lp_with_restored_clients_is_bit_identical(monkeypatch, fed3):
    (_, _, grid_a), (_, _, grid_b) = _both(monkeypatch, "perclient-lp", fed3, rounds=2,
                                           options={"knn": 3, "labeled_fraction": 0.3})
    for cid in grid_a.client_ids:
        assert np.array_equal(grid_a.clients[cid].xclp_labels, grid_b.role(cid).xclp_labels)
