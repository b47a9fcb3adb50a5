"""Consensus edge cases the brute-force tests do not reach: κ of two equal constant
labellings (chance agreement 1) and what the reputation makes of a client that always says
the same class."""

from __future__ import annotations

import numpy as np

from fedlabels.consensus import kappa_rows, peer_kappa


def test_kappa_of_equal_constant_labellings_is_zero_not_full_agreement():
    a = np.array([[1, 1, 1, 1], [2, 2, 2, 2], [0, 1, 0, 1]])
    b = np.array([[1, 1, 1, 1], [2, 2, 2, 2], [0, 1, 0, 1]])
    # rows 0 and 1 agree on a constant (chance agreement 1): no skill shown, κ 0; row 2 is
    # full agreement on varied labels, κ 1
    assert kappa_rows(a, b, 3).tolist() == [0.0, 0.0, 1.0]


def test_clients_that_all_say_one_class_get_no_peer_agreement():
    votes = np.zeros((4, 10), dtype=np.int64)  # every client labels all of U class 0
    assert peer_kappa(votes, 2).tolist() == [0.0] * 4


def test_vote_server_metrics_count_changed_covered_and_correct_labels():
    from fedlabels.consensus import ABSTAIN
    from fedlabels.method.base import Settings
    from fedlabels.method.blocks import VoteServer

    truth = np.array([0, 1, 2, 0, 1])
    server = VoteServer(Settings(n_classes=3), 5, consensus=lambda v: v[0], truth_public=truth)
    first = np.array([0, 1, 1, ABSTAIN, 2])
    assert server.consensus_metrics(first) == {
        "consensus_changed": 1.0, "consensus_coverage": 0.8, "consensus_accuracy": 0.5}
    server.labels = first
    new = np.array([0, 1, 2, 0, 2])  # two of five labels changed; 4 of 5 correct
    assert server.consensus_metrics(new) == {
        "consensus_changed": 0.4, "consensus_coverage": 1.0, "consensus_accuracy": 0.8}
