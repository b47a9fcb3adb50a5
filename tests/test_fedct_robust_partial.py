"""FedCT's robust consensus when only some clients reply (partial participation): the trim
counts the clients that voted, the history goes to the clients by id, the clients that did
not vote keep theirs, and the reputation vote blends the past rounds' agreement with this
round's. The server is driven directly with a grid that answers for a chosen subset of 10
clients; the oracle is a count written out here."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedlabels.comm import Message, pack_labels
from fedlabels.method.base import Settings
from fedlabels.methods.fedct.fedct import FedCTOptions, FedCTServer

M, N, C = 10, 40, 3


class SubsetGrid:
    """Every client is on the grid; only ``labels``' clients reply (the others dropped)."""

    def __init__(self, labels: dict[int, np.ndarray]) -> None:
        self.labels = labels
        self.client_ids = list(range(M))

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        return {c: Message("fedct.labels", arrays={"labels": pack_labels(self.labels[c], C)})
                for c in messages if c in self.labels}


def _votes(replying: list[int], outlier: int, seed: int = 0) -> dict[int, np.ndarray]:
    """The replying clients agree on a random labelling but for a few flips each; the
    outlier labels everything at random."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, C, N)
    out = {}
    for c in replying:
        v = truth.copy()
        flip = rng.choice(N, 2, replace=False)
        v[flip] = (v[flip] + 1) % C
        out[c] = rng.integers(0, C, N) if c == outlier else v
    return out


def _server(**options) -> FedCTServer:
    settings = Settings(n_classes=C, n_clients=M, rounds=3, period=1,
                        options=FedCTOptions(**options))
    return FedCTServer(settings, n_public=N)


def test_trimmed_drops_a_share_of_the_clients_that_voted_and_records_them_by_id():
    replying, outlier = [1, 3, 4, 6, 8], 6  # 5 of 10 vote: trim 0.2 drops int(0.2 * 5) = 1
    server = _server(robust="trimmed", trim=0.2)
    server.run_round(0, SubsetGrid(_votes(replying, outlier)))
    want = np.zeros(M, dtype=np.int64)
    want[outlier] = 1
    assert server.dropped_rounds.tolist() == want.tolist()


def test_reputation_counts_rounds_only_for_the_clients_that_voted():
    server = _server(robust="reputation")
    server.run_round(0, SubsetGrid(_votes([0, 2, 5, 7, 9], outlier=5)))
    server.run_round(1, SubsetGrid(_votes([0, 1, 2, 3, 4], outlier=3, seed=1)))
    assert server.agreement_rounds.tolist() == [2, 1, 2, 1, 1, 1, 0, 1, 0, 1]
    absent = [6, 8]  # never voted: the weight of a client before its first round
    assert server.reputation(np.array(absent)).tolist() == [1.0, 1.0]
    assert server.agreement_sum[absent].tolist() == [0.0, 0.0]


def test_reputation_carries_the_past_rounds_into_this_rounds_vote():
    """Round 0: clients 0-2 agree, 3 and 4 label at random (weights near 0). Round 1:
    client 2 joins 3 and 4 on another labelling. This round alone is 3 votes to 2; with the
    past rounds blended in, clients 0 and 1 (agreement 1 so far) outweigh them."""
    rng = np.random.default_rng(0)
    truth = rng.integers(0, C, N)
    other = (truth + 1) % C
    server = _server(robust="reputation")
    server.run_round(0, SubsetGrid({0: truth, 1: truth, 2: truth,
                                    3: rng.integers(0, C, N), 4: rng.integers(0, C, N)}))
    server.run_round(1, SubsetGrid({0: truth, 1: truth, 2: other, 3: other, 4: other}))
    assert server.labels is not None
    assert server.labels.tolist() == truth.tolist()
