"""FedCT's ``ties`` option: a tied top class of the vote abstains instead of going to the
smallest class index."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from conftest import spy_fedct_votes
from fedlabels.consensus import ABSTAIN, majority_vote, qualified_majority
from fedlabels.core.errors import FedLabelsError
from fedlabels.methods import get_method
from fedlabels.methods.fedct.fedct import FedCTClient
from fedlabels.testing import check_method


def brute(votes: np.ndarray, quorum: float | None = None) -> list[int]:
    """Per column: the unique most common label, else ABSTAIN (and ABSTAIN below quorum)."""
    out = []
    for column in votes.T.tolist():
        counts = Counter(column).most_common()
        top, count = counts[0]
        tied = len(counts) > 1 and counts[1][1] == count
        below = quorum is not None and count / len(column) < quorum - 1e-12
        out.append(ABSTAIN if tied or below else top)
    return out


def test_abstain_on_ties_matches_a_direct_count():
    rng = np.random.default_rng(0)
    votes = rng.integers(0, 4, (5, 500))
    got = majority_vote(votes, 4, ties="abstain")
    assert got.tolist() == brute(votes)
    assert (got == ABSTAIN).sum() > 50  # 5 votes over 4 classes tie often
    # elsewhere it is the plain majority, which sends ties to the smallest class index
    plain = majority_vote(votes, 4)
    kept = got != ABSTAIN
    assert np.array_equal(got[kept], plain[kept])
    assert majority_vote(np.array([[3], [1]]), 4).tolist() == [1]
    assert majority_vote(np.array([[3], [1]]), 4, ties="abstain").tolist() == [ABSTAIN]


@pytest.mark.parametrize("quorum", [0.4, 0.5, 0.6])
def test_qualified_majority_abstains_on_ties_at_a_low_quorum(quorum):
    rng = np.random.default_rng(1)
    votes = rng.integers(0, 3, (5, 400))
    got = qualified_majority(votes, 3, quorum, ties="abstain")
    assert got.tolist() == brute(votes, quorum)
    # a 2-2-1 split reaches a quorum of 0.4 but is a tie
    split = np.array([[0], [0], [2], [2], [1]])
    assert qualified_majority(split, 3, 0.4).tolist() == [0]
    assert qualified_majority(split, 3, 0.4, ties="abstain").tolist() == [ABSTAIN]


def test_bad_tie_rule_is_rejected():
    with pytest.raises(ValueError, match="ties must be one of"):
        majority_vote(np.array([[0], [1], [1]]), 2, ties="random")
    method = get_method("fedct")
    with pytest.raises(FedLabelsError, match="abstain"):
        method.parse_options({"ties": "random"})
    with pytest.raises(FedLabelsError, match="drop --ties"):
        method.parse_options({"ties": "abstain", "balanced": True})
    with pytest.raises(FedLabelsError, match="drop --ties"):
        method.parse_options({"ties": "abstain", "robust": "trimmed"})
    assert method.parse_options({}).ties == "smallest"


def test_ties_are_rejected_on_regression():
    with pytest.raises(FedLabelsError, match="ties apply to classification"):
        fl.run("fedct", "diabetes", model="dt", rounds=1, seed=0, progress=False,
               options={"ties": "abstain"})


class Spy:
    """The server's votes and consensus per round, and each client's P afterwards."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rounds: list[tuple[np.ndarray, np.ndarray]] = []
        self.pseudo: list[tuple[np.ndarray | None, np.ndarray | None]] = []
        receive = FedCTClient.receive_and_train
        spy = self

        def client_receive(client: FedCTClient, message: Any) -> None:
            receive(client, message)
            spy.pseudo.append((client.pseudo_index, client.pseudo_y))

        spy_fedct_votes(monkeypatch, lambda votes, labels: spy.rounds.append((votes, labels)))
        monkeypatch.setattr(FedCTClient, "receive_and_train", client_receive)


def test_a_run_leaves_exactly_the_tied_examples_out_of_p(monkeypatch):
    """Decision trees on digits (10 classes, 5 clients): the votes tie on many examples;
    each round's consensus is the brute-force tie-abstaining vote of that round's replies,
    and every client's P is U without the tied examples, with the consensus labels."""
    fed = fl.load_federation("digits", clients=5, unlabeled=300, private=300, test=100,
                             seed=0)
    spy = Spy(monkeypatch)
    res = fl.run("fedct", fed, model="decision_tree", rounds=3, seed=0, progress=False,
                 options={"ties": "abstain"})
    assert len(spy.rounds) == 3
    for votes, labels in spy.rounds:
        assert labels.tolist() == brute(votes)
    tied = [int((labels == ABSTAIN).sum()) for _, labels in spy.rounds]
    assert tied[0] > 10
    # clients answering round 2 hold round 1's consensus: P = U minus its tied examples
    _, first = spy.rounds[0]
    for index, y in spy.pseudo[5:10]:
        assert index is not None and y is not None
        assert index.tolist() == np.flatnonzero(first != ABSTAIN).tolist()
        assert y.tolist() == first[first != ABSTAIN].tolist()
    # the keep-mask travels in the download; the upload (hard labels) is unchanged
    plain = fl.run("fedct", fed, model="decision_tree", rounds=3, seed=0, progress=False)
    assert (res.communication["bytes_down_total"]
            > plain.communication["bytes_down_total"])
    assert (res.communication["bytes_up_total"] == plain.communication["bytes_up_total"])


def test_the_default_is_todays_vote_bit_for_bit():
    fed = fl.load_federation("digits", clients=5, unlabeled=300, private=300, test=100,
                             seed=0)
    plain = fl.run("fedct", fed, model="decision_tree", rounds=2, seed=0, progress=False)
    smallest = fl.run("fedct", fed, model="decision_tree", rounds=2, seed=0, progress=False,
                      options={"ties": "smallest"})
    assert plain.final == smallest.final
    assert plain.communication == smallest.communication


def test_contract_holds_with_ties_abstain():
    """Determinism, declared payloads only (the real traffic, keep-mask included) and the
    state round trip, on digits with trees, where the votes tie."""
    passed = check_method("fedct", options={"ties": "abstain"}, model="dt", dataset="digits",
                          clients=5, checks=("determinism", "payloads", "state"))
    assert passed == ["determinism", "payloads", "state"]
