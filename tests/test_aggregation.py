"""Server aggregation against hand-computed values (unequal sizes, partial participation)."""

from __future__ import annotations

import numpy as np
import pytest

from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.blocks import size_weighted_average, weighted_mean
from fedlabels.methods.fedavg.fedavg import FedAvgServer


class ScriptedGrid:
    """A grid whose clients answer with fixed weights; some clients may not answer."""

    def __init__(self, weights: dict[int, np.ndarray], sizes: dict[int, int],
                 silent: set[int] = frozenset()) -> None:
        self.weights, self.sizes, self.silent = weights, sizes, silent
        self.sent: dict[int, Message] = {}

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.weights)

    def exchange(self, messages, rnd):
        self.sent = dict(messages)
        return {c: Message("fedavg.weights", arrays={"weights": self.weights[c]},
                           config={"n": self.sizes[c]})
                for c in messages if c not in self.silent}


def test_fedavg_weights_clients_by_their_data_size():
    w = {0: np.array([1.0, 0.0], np.float32), 1: np.array([0.0, 1.0], np.float32),
         2: np.array([4.0, 4.0], np.float32)}
    sizes = {0: 10, 1: 30, 2: 60}
    server = FedAvgServer(np.zeros(2, np.float32), period=1)
    server.run_round(0, ScriptedGrid(w, sizes))
    # (10*[1,0] + 30*[0,1] + 60*[4,4]) / 100, by hand; a plain mean would give [5/3, 5/3]
    np.testing.assert_allclose(server.weights, [2.5, 2.7], rtol=1e-6)
    assert server.weights.dtype == np.float32


def test_fedavg_averages_only_the_clients_that_replied():
    w = {0: np.array([1.0], np.float32), 1: np.array([3.0], np.float32),
         2: np.array([100.0], np.float32)}
    server = FedAvgServer(np.zeros(1, np.float32), period=1)
    server.run_round(0, ScriptedGrid(w, {0: 1, 1: 3, 2: 5}, silent={2}))
    np.testing.assert_allclose(server.weights, [(1 * 1 + 3 * 3) / 4])


def test_size_weighted_average_rejects_nothing_to_average():
    with pytest.raises(FedLabelsError, match="no client replied"):
        size_weighted_average({})
    zero = {0: Message("x", arrays={"weights": np.ones(2)}, config={"n": 0})}
    with pytest.raises(FedLabelsError, match="no examples"):
        size_weighted_average(zero)


@pytest.mark.parametrize("average", [size_weighted_average, weighted_mean])
def test_weighted_average_memory_does_not_grow_with_the_clients(average):
    """The average of m replies (FedAvg's weights, record-level DP-FedAvg's updates) takes
    a few copies of one model, not m float64 copies (a stack of 300 MLPs of 300k weights in
    float64 was 0.7 GB at the server)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    m, p = 60, 50_000
    replies = {c: Message("w", arrays={"weights": rng.standard_normal(p).astype(np.float32)},
                          config={"n": int(rng.integers(1, 50))}) for c in range(m)}
    tracemalloc.start()
    try:
        avg = average(replies)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * p * 8  # stacking them: m * p * 8 bytes = 24 MB
    # the same numbers as the plain formula (an independent oracle, float64)
    sizes = np.array([replies[c].config["n"] for c in range(m)], dtype=np.float64)
    expect = sum(sizes[c] * replies[c].arrays["weights"].astype(np.float64)
                 for c in range(m)) / sizes.sum()
    np.testing.assert_allclose(avg, expect, rtol=1e-6, atol=1e-7)
