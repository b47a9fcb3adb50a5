"""PATE's noiseless aggregation: the argmax of the vote counts, ties to the smallest class
(the rule the consensus of FedCT and the docs state), checked against a per-query count."""

from __future__ import annotations

import numpy as np
import pytest

from fedlabels.method.base import Settings
from fedlabels.methods.teacher_student.pate_roles import PATEOptions, PATEServer


def _server(n_classes: int) -> PATEServer:
    settings = Settings(n_classes=n_classes, n_clients=3, rounds=1, period=1,
                        options=PATEOptions())
    return PATEServer(settings, n_public=10, seed=0)


def test_a_tied_count_goes_to_the_smallest_class():
    counts = np.array([[2, 2, 0], [0, 1, 1], [1, 0, 1], [0, 0, 3], [1, 1, 1]])
    assert _server(3).aggregate(counts).tolist() == [0, 1, 0, 2, 0]


def test_labels_equal_the_smallest_most_voted_class_per_query():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 3, (300, 4))  # small counts: many ties
    want = [min(c for c in range(4) if row[c] == row.max()) for row in counts]
    assert _server(4).aggregate(counts).tolist() == want


def test_budget_default_is_one_teacher_per_8_records_at_most_10():
    """dp-pate with --epsilon and no teachers_per_client: one teacher per 8 private records
    (whole ones), at most 10, at least 1, as the option's help says; the server counts a
    client's vote rows with the same function, so an extra teacher is a refused reply."""
    from fedlabels.methods.teacher_student.pate_roles import DPPATEOptions

    opts = DPPATEOptions(epsilon=8.0)
    for n in (1, 7, 8, 15, 16, 17, 40, 79, 80, 81, 1000):
        assert opts.teachers_per_client_count(n) == max(1, min(10, n // 8)), n
    assert PATEOptions().teachers_per_client_count(1000) == 1
    assert DPPATEOptions(epsilon=8.0, teachers_per_client=3).teachers_per_client_count(40) == 3


def test_the_server_expects_each_clients_own_teacher_count():
    """Unequal clients under the budget default: the server checks client c's vote rows
    against c's own size (8, 24 and 200 records: 1, 3 and 10 teachers), not another's."""
    from fedlabels.comm import Message, pack_labels
    from fedlabels.method.replies import MalformedReply
    from fedlabels.methods.teacher_student.pate_roles import DPPATEOptions

    settings = Settings(n_classes=2, n_clients=3, rounds=1, period=1,
                        options=DPPATEOptions(epsilon=8.0, queries=5))
    server = PATEServer(settings, n_public=10, seed=0, client_sizes=[8, 24, 200])
    vote, row = Message("pate.vote"), pack_labels(np.zeros(5, dtype=np.int64), 2)
    for cid, rows in enumerate([1, 3, 10]):
        assert server.teachers_of(cid) == rows
        server.check_reply(cid, vote, Message("pate.vote.reply",
                                              arrays={"labels": np.stack([row] * rows)}))
        with pytest.raises(MalformedReply, match="row"):
            server.check_reply(cid, vote, Message("pate.vote.reply", arrays={
                "labels": np.stack([row] * (rows + 1))}))


def test_the_queries_are_distinct_rows_of_u():
    """Q = |U| queries drawn without replacement are every row of U once (a row queried
    twice spends the budget twice and weighs double in the student)."""
    import fedlabels as fl
    from test_teacher_student_state import _run

    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    n = len(fed.X_public)
    _, server, grid = _run("pate", "dt", {"queries": n}, fed, rebuild=False)
    assert server.queries is not None
    assert server.queries.tolist() == list(range(n))
    for role in grid.clients.values():
        assert sorted(role.student_index.tolist()) == list(range(n))
