"""FedCT's pseudo-label weighting options (issue 17): validation, effect, default path."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from conftest import spy_fedct_votes
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.methods import get_method
from fedlabels.methods.fedct.fedct import FedCTClient
from fedlabels.methods.fedct.schedule import ramp_weight

MODEL = "mlp(hidden=16)"


@pytest.fixture(scope="module")
def digits_fed():
    """Digits, 4 clients of unequal sizes (quantity skew), |U| = 300."""
    return fl.load_federation("digits", clients=4, unlabeled=300, private=600,
                              test=200, partition="quantity:1", seed=0)


def run(fed: Any, rounds: int = 4, **kwargs: Any) -> fl.RunResult:
    return fl.run("fedct", fed, model=MODEL, rounds=rounds, period=5, seed=0, progress=False,
                  **kwargs)


@pytest.mark.parametrize("options, match", [
    ({"pseudo_weight": 0}, r"pseudo_weight must lie in \(0, 100\]"),
    ({"pseudo_weight": -1.0}, r"pseudo_weight must lie in \(0, 100\]"),
    ({"pseudo_warmup": -1}, r"pseudo_warmup must lie in \[0, inf\]"),
    ({"pseudo_warmup": 2.5}, "pseudo_warmup must be an integer"),
    ({"vote_power": -0.5}, r"vote_power must lie in \[0, 100\]"),
    ({"vote_power": float("nan")}, "vote_power must be finite"),
])
def test_bad_values_are_rejected_with_the_valid_range(options, match):
    with pytest.raises(FedLabelsError, match=match):
        get_method("fedct").parse_options(options)


def test_weighting_needs_a_torch_learner_and_classification(digits_fed):
    with pytest.raises(FedLabelsError, match="need a torch learner"):
        fl.run("fedct", digits_fed, model="dt", rounds=1, options={"pseudo_weight": 0.5},
               progress=False)


def test_ramp_matches_its_formula():
    opts = get_method("fedct").parse_options({"pseudo_weight": 2.0, "pseudo_warmup": 4})
    expected = [2.0 * min(1.0, rnd / 4) for rnd in range(8)]  # the engine's 0-based rounds
    assert [ramp_weight(opts, rnd) for rnd in range(8)] == pytest.approx(expected)
    assert ramp_weight(get_method("fedct").parse_options({}), 7) == 1.0


class Spy:
    """Records each client's train_steps weights per call, and the server's votes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.weights: list[np.ndarray | None] = []
        self.votes: list[tuple[np.ndarray, np.ndarray]] = []
        self.shares: list[tuple[np.ndarray | None, np.ndarray | None]] = []
        steps = TorchMLPClassifier.train_steps
        receive = FedCTClient.receive_and_train
        spy = self

        def train_steps(learner: Any, *args: Any, w_aux: Any = None, **kw: Any) -> Any:
            spy.weights.append(None if w_aux is None else np.array(w_aux))
            return steps(learner, *args, w_aux=w_aux, **kw)

        def client_receive(client: FedCTClient, message: Any) -> None:
            receive(client, message)
            spy.shares.append((client.pseudo_share, client.pseudo_index))

        monkeypatch.setattr(TorchMLPClassifier, "train_steps", train_steps)
        spy_fedct_votes(monkeypatch, lambda votes, labels: spy.votes.append((votes, labels)))
        monkeypatch.setattr(FedCTClient, "receive_and_train", client_receive)


def test_defaults_take_todays_unweighted_path(digits_fed, monkeypatch):
    """Defaults: no weights reach the learner, no vote counts travel, and the run equals the
    one with every new option given its default value explicitly."""
    spy = Spy(monkeypatch)
    base = run(digits_fed)
    assert all(w is None for w in spy.weights) and len(spy.weights) >= 4 * 4
    assert all(share is None for share, _ in spy.shares)
    explicit = run(digits_fed, options={"pseudo_weight": 1.0, "pseudo_warmup": 0,
                                        "vote_power": 0.0})
    assert explicit.final == base.final
    assert explicit.communication == base.communication


def test_warmup_and_weight_scale_the_pseudo_loss_as_declared(digits_fed, monkeypatch):
    spy = Spy(monkeypatch)
    res = run(digits_fed, rounds=5, options={"pseudo_weight": 0.5, "pseudo_warmup": 3})
    # round 1 has no consensus yet (no weights); rounds 2..5 each call every client once
    weighted = [w for w in spy.weights if w is not None]
    assert len(weighted) == 4 * 4
    per_round = [np.unique(np.concatenate(weighted[4 * k: 4 * k + 4])) for k in range(4)]
    assert all(r.size == 1 for r in per_round)  # one weight per round, for every example
    expected = [0.5 * min(1, (t - 1) / 3) for t in (2, 3, 4, 5)]  # rounds t = 2..5
    assert np.allclose([r[0] for r in per_round], expected)
    assert res.final != run(digits_fed, rounds=5).final  # not a no-op


def test_vote_share_matches_a_brute_force_count(monkeypatch):
    """Partial participation (3 of 5 clients a round), unequal sizes, a quorum that abstains:
    each client's per-example weights are share^p of the previous round's votes."""
    fed = fl.load_federation("digits", clients=5, unlabeled=200, private=500,
                             test=100, partition="quantity:1", seed=1)
    spy = Spy(monkeypatch)
    res = run(fed, rounds=4, participation=3, options={"vote_power": 2.0, "quorum": 0.6})
    assert spy.votes and all(v.shape[0] == 3 for v, _ in spy.votes)
    checked = 0
    for k, (share, index) in enumerate(spy.shares):
        rnd = k // 3  # clients answering round rnd + 1 received round rnd's consensus
        if rnd == 0:
            assert share is None
            continue
        votes, labels = spy.votes[rnd - 1]
        kept = np.flatnonzero(labels >= 0) if index is not None else np.arange(len(labels))
        brute = []
        for j in kept:
            top, count = Counter(votes[:, j].tolist()).most_common(1)[0]
            assert top == labels[j] or count == Counter(votes[:, j].tolist())[labels[j]]
            brute.append(count / votes.shape[0])
        assert share is not None and np.allclose(share, brute)
        checked += 1
    assert checked >= 6
    # the weights reaching the learner are share^2, the extra download is counted
    weighted = [w for w in spy.weights if w is not None]
    assert any(np.unique(w).size > 1 for w in weighted)
    plain = run(fed, rounds=4, participation=3, options={"quorum": 0.6})
    extra = (res.communication["bytes_down_total"] - plain.communication["bytes_down_total"])
    bits = 2  # ceil(log2(3 + 1)) bits per example of U, 3 clients per round, 3 rounds
    assert extra >= 3 * 3 * (200 * bits // 8)
    assert res.final != plain.final


def test_resume_keeps_the_vote_counts_and_the_ramp(digits_fed, tmp_path):
    """Interrupted after round 2 and resumed: the same run (the server's top-vote counts are
    part of its checkpointed state; without them round 3 would train unweighted)."""
    from fedlabels.engines.inprocess import simulate
    from fedlabels.learners import as_models
    from fedlabels.methods import METHODS

    options = {"vote_power": 1.0, "pseudo_warmup": 2, "quorum": 0.5}

    def sim(**kw: Any) -> fl.RunResult:
        return simulate(METHODS["fedct"], digits_fed, as_models(MODEL), rounds=4, period=5,
                        seed=0, progress=False,
                        options=get_method("fedct").parse_options(options), **kw)

    def stop_after_2(record: Any) -> None:
        if record.round == 2:
            raise KeyboardInterrupt

    path = tmp_path / "run.checkpoint.npz"
    full = sim()
    sim(checkpoint=path, on_round=stop_after_2)
    resumed = sim(resume=path)
    assert resumed.final == full.final
    assert resumed.communication == full.communication


def brute_balanced(votes: np.ndarray, n_classes: int, quorum: float | None) -> list[int]:
    """Per example, a direct weighted count: client i's vote for c weighs 1/(C p_ic)."""
    m, n = votes.shape
    out = []
    for j in range(n):
        score = [0.0] * n_classes
        for i in range(m):
            p = max(sum(1 for x in votes[i] if x == votes[i, j]) / n, 1 / n)
            score[votes[i, j]] += 1 / (n_classes * p)
        best = max(range(n_classes), key=lambda c: (score[c], -c))
        ok = quorum is None or score[best] / sum(score) >= quorum - 1e-12
        out.append(best if ok else -1)
    return out


@pytest.mark.parametrize("quorum", [None, 0.5])
def test_balanced_vote_matches_a_direct_weighted_count(quorum):
    from fedlabels.consensus import balanced_vote

    rng = np.random.default_rng(3)
    # skewed voters: client i labels class i most of the time (pathological non-iid)
    votes = np.where(rng.random((4, 60)) < 0.7, np.arange(4)[:, None],
                     rng.integers(0, 5, (4, 60)))
    assert balanced_vote(votes, 5, quorum).tolist() == brute_balanced(votes, 5, quorum)


def test_balanced_vote_is_the_majority_for_balanced_labellings():
    from fedlabels.consensus import balanced_vote, majority_vote

    rng = np.random.default_rng(4)
    votes = np.stack([rng.permutation(np.repeat(np.arange(3), 20)) for _ in range(5)])
    assert balanced_vote(votes, 3).tolist() == majority_vote(votes, 3).tolist()


def test_balanced_is_validated_and_changes_the_consensus():
    from fedlabels.method.base import Settings
    from fedlabels.methods.fedct.fedct import consensus_function

    method = get_method("fedct")
    with pytest.raises(FedLabelsError, match="balanced must be true or false"):
        method.parse_options({"balanced": 1})
    with pytest.raises(FedLabelsError, match="without --robust"):
        method.parse_options({"balanced": True, "robust": "trimmed"})
    votes = np.array([[0] * 9 + [1], [0] * 9 + [1], [2, 2, 2, 0, 0, 0, 0, 0, 0, 0]])
    plain = consensus_function(Settings(n_classes=3, options=method.parse_options({})))
    balanced = consensus_function(Settings(n_classes=3, options=method.parse_options(
        {"balanced": True})))
    # examples 0-2: two clients that say 0 almost always vs one whose rare "2" counts more
    assert plain(votes)[:3].tolist() == [0, 0, 0]
    assert balanced(votes)[:3].tolist() == [2, 2, 2]
