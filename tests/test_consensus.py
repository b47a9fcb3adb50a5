import numpy as np
import pytest

from fedlabels.consensus import (
    ABSTAIN,
    kappa_rows,
    leave_one_out_kappa,
    majority_vote,
    peer_kappa,
    qualified_majority,
    vote_counts,
)


def test_majority_vote_picks_the_plurality():
    votes = np.array([[0, 1, 2, 2], [0, 1, 1, 2], [1, 1, 2, 0]])
    assert majority_vote(votes, 3).tolist() == [0, 1, 2, 2]


def test_ties_go_to_the_smallest_class_index():
    votes = np.array([[2, 1], [1, 2], [0, 0], [0, 1]])  # col 0: 2,1,0,0 -> 0; col 1: 1,2,0,1 -> 1
    assert majority_vote(votes, 3).tolist() == [0, 1]
    tie = np.array([[3], [1]])
    assert majority_vote(tie, 4).tolist() == [1]


def test_vote_counts_match_a_direct_count():
    rng = np.random.default_rng(0)
    votes = rng.integers(0, 5, (7, 200))
    counts = vote_counts(votes, 5)
    for j in range(200):
        assert counts[j].tolist() == np.bincount(votes[:, j], minlength=5).tolist()


def test_qualified_majority_abstains_below_quorum():
    votes = np.array([[0, 0, 1], [0, 0, 2], [0, 1, 1], [0, 1, 1], [0, 1, 0]])
    # col 0: 5/5 for 0; col 1: 3/5 for 1; col 2: 3/5 for 1
    assert qualified_majority(votes, 3, 1.0).tolist() == [0, ABSTAIN, ABSTAIN]
    assert qualified_majority(votes, 3, 0.6).tolist() == [0, 1, 1]
    assert qualified_majority(votes, 3, 0.61).tolist() == [0, ABSTAIN, ABSTAIN]


def test_quorum_boundary_is_inclusive():
    votes = np.array([[1]] * 9 + [[0]])
    assert qualified_majority(votes, 2, 0.9).tolist() == [1]


@pytest.mark.parametrize("quorum", [0.0, -0.1, 1.01])
def test_quorum_outside_unit_interval(quorum):
    with pytest.raises(ValueError, match="quorum"):
        qualified_majority(np.zeros((3, 2), dtype=int), 2, quorum)


@pytest.mark.parametrize("seed", range(6))
def test_leave_one_out_kappa_equals_the_argmax_of_each_clients_others(seed):
    # the (m, n, C) copy it no longer builds: each client's vote taken out of the counts,
    # then numpy's argmax; integer weights make ties (also with the reduced count)
    rng = np.random.default_rng(seed)
    m, n, c = int(rng.integers(1, 9)), int(rng.integers(1, 60)), int(rng.integers(1, 5))
    votes = rng.integers(0, c, (m, n))
    for w in (rng.integers(0, 3, m).astype(float), rng.random(m), np.zeros(m)):
        counts = vote_counts(votes, c, w)
        top = np.empty((m, n), dtype=np.int64)
        for i in range(m):
            others = counts.copy()
            others[np.arange(n), votes[i]] -= w[i]
            top[i] = others.argmax(axis=1)
        want = kappa_rows(votes, top, c)
        assert leave_one_out_kappa(votes, c, w).tobytes() == want.tobytes()


def _peer_kappa_loop(votes, c):
    # the former peer_kappa: kappa_rows of every client with client j, one j at a time
    m = votes.shape[0]
    pairs = np.stack([np.maximum(kappa_rows(votes, votes[j], c), 0.0) for j in range(m)])
    return (pairs.sum(axis=0) - np.diag(pairs)) / max(m - 1, 1)


@pytest.mark.parametrize("seed", range(8))
def test_peer_kappa_equals_the_loop_over_clients_to_the_bit(seed):
    # few classes and examples make ties and equal labellings; classes beyond the votes'
    # (absent) and constant clients (chance agreement 1) occur; a block of one row as well
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    c = int(rng.integers(1, 6))
    truth = rng.integers(0, c, n)
    votes = np.where(rng.random((m, n)) < rng.random((m, 1)), truth, rng.integers(0, c, (m, n)))
    votes[: m // 4] = rng.integers(0, c, (m // 4, 1))  # constant clients
    for classes in (c, c + 3):
        want = _peer_kappa_loop(votes, classes)
        assert peer_kappa(votes, classes).tobytes() == want.tobytes()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("fedlabels.consensus._CHANCE_BLOCK", 1)
        assert peer_kappa(votes, c).tobytes() == _peer_kappa_loop(votes, c).tobytes()


def test_peer_kappa_of_no_examples_is_zero():
    assert peer_kappa(np.zeros((3, 0), dtype=int), 2).tolist() == [0.0, 0.0, 0.0]
