"""DP-PATE with ``aggregation="secure"``: the masks cancel in the group's sum of noisy vote
counts and nowhere else, the server cannot read a client's votes from what it holds (it can
without secure aggregation), a deviating server is refused, every answered attempt is
charged at the shift of one teacher's votes on all Q queries, the noise is not the run
seed's, and the inapplicable options are one-line errors."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from scipy import stats

import fedlabels as fl
from fedlabels.comm import Message, unpack_labels
from fedlabels.consensus import vote_counts
from fedlabels.core.errors import FedLabelsError, ParameterRefusal, RefusedError
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.learners import as_models
from fedlabels.method.base import Settings
from fedlabels.methods.teacher_student import pate_secure
from fedlabels.methods.teacher_student.pate import DPPATEOptions
from fedlabels.privacy.distributed_discrete import (
    distributed_discrete_epsilon,
    distributed_discrete_rdp,
    sum_rdp,
)
from fedlabels.runs.session import Session, build_session
from fedlabels.secure import masked_sum
from fedlabels.secure.identity import Identity
from fedlabels.secure.keys import SecureProtocolError
from secure_sum_spy import Spy

Q = 60  # random queries: 60 rows of U, 2 classes, 120 counts
TEACHER_STEPS = 20  # the clients' own: 20 rounds of period 1 (no teacher_steps option)
SECURE = {"aggregation": "secure", "noise_sigma": 4.0, "queries": Q,
          "query_selection": "random"}


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    return fl.load_federation("breast_cancer", clients=3, seed=0)


def session(fed: fl.Federation, seed: int = 0, **options: Any) -> Session:
    return build_session("dp-pate", fed, as_models("dt"), rounds=1, period=1, seed=seed,
                         options={**SECURE, **options})



class Recording:
    """A grid that keeps every reply and may swallow chosen vote replies (a forged dropout:
    the client answered, the server says it did not)."""

    def __init__(self, inner: InProcessGrid, swallow: frozenset[tuple[int, int]] = frozenset()
                 ) -> None:
        self.inner, self.swallow = inner, swallow
        self.replies: list[tuple[int, Message, Message]] = []

    @property
    def client_ids(self) -> list[int]:
        return self.inner.client_ids

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        out = {}
        for cid, reply in self.inner.exchange(messages, rnd).items():
            self.replies.append((cid, messages[cid], reply))
            attempt = int(messages[cid].config.get("attempt", -1))
            if messages[cid].kind == "pate.secure_vote" and (attempt, cid) in self.swallow:
                continue
            out[cid] = reply
        return out


def grid_of(s: Session, swallow: frozenset[tuple[int, int]] = frozenset()) -> Recording:
    return Recording(InProcessGrid(s.clients, CommMeter()), swallow)


def masked_replies(grid: Recording) -> dict[int, np.ndarray]:
    return {c: r.arrays["masked"] for c, _, r in grid.replies if r.kind == "pate.masked"}


def test_masks_cancel_in_the_group_sum_exactly(fed: fl.Federation,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    s = session(fed)
    server = s.server
    assert isinstance(server, pate_secure.SecurePATEServer)
    grid = grid_of(s)
    metrics = server.run_round(0, grid)
    assert metrics["group_size"] == 3.0 and "labels_equal_plain_argmax" not in metrics
    plain = sum(spy.values[c] for c in range(3))
    p = server.params
    held = masked_replies(grid)
    assert np.array_equal(masked_sum.ring_sum(held, p.bits, p.dim), plain)
    assert server.counts is not None and np.array_equal(server.counts.ravel(), plain)
    # the noisy sum is the teachers' true counts plus every share
    truth = sum(np.asarray(s.clients[c].round_counts).ravel()  # type: ignore[attr-defined]
                for c in range(3))
    assert np.array_equal(plain - truth, sum(n for _, n in spy.noise))
    assert truth.reshape(Q, 2).sum(axis=1).tolist() == [3] * Q  # one vote per teacher
    # the released labels are the argmax of the noisy counts (post-processing)
    assert server.labels is not None
    assert np.array_equal(server.labels, plain.reshape(Q, 2).argmax(axis=1))
    # a sum that lacks one member stays masked: nothing like the others' noisy counts
    partial = masked_sum.ring_sum({0: held[0], 1: held[1]}, p.bits, p.dim)
    assert np.mean(partial == spy.values[0] + spy.values[1]) < 0.05


def test_server_cannot_read_votes_it_can_read_without_secure_aggregation(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: read client 0's vote on each query from its reply (the class of the
    largest count). Without secure aggregation the reply is the votes; with it the reply
    is uniform in Z_{2^k} and the read votes agree with the true ones at chance."""
    plain_s = build_session("dp-pate", fed, as_models("dt"), rounds=1, period=1, seed=0,
                            options={k: v for k, v in SECURE.items() if k != "aggregation"})
    grid = grid_of(plain_s)
    plain_s.server.run_round(0, grid)
    read = next(unpack_labels(r.arrays["labels"], Q, 2) for c, _, r in grid.replies
                if c == 0 and r.kind == "pate.votes")
    queries = next(q.arrays["queries"] for c, q, _ in grid.replies if c == 0)
    client0 = plain_s.clients[0]
    truth = np.asarray(client0.model().predict(client0.public[queries.astype(np.int64)]))
    assert np.array_equal(read, truth)  # the attack succeeds without secure aggregation

    spy = Spy(monkeypatch)
    s = session(fed)
    grid = grid_of(s)
    s.server.run_round(0, grid)
    held = masked_replies(grid)[0]
    bits = s.server.params.bits  # type: ignore[attr-defined]
    dim = s.server.params.dim  # type: ignore[attr-defined]
    signed = masked_sum.ring_sum({0: held}, bits, dim)
    residues = masked_sum.unpack_residues(held, bits, dim)
    # its counts plus its own share alone (σ/√3 of the σ accounted) are not what it holds
    assert np.mean(signed == spy.values[0]) < 0.05
    votes = np.asarray(s.clients[0].round_counts).argmax(axis=1)  # type: ignore
    guessed = signed.reshape(Q, 2).argmax(axis=1)
    assert np.mean(guessed == votes) < 0.8  # chance 0.5, sd 0.065 at Q = 60
    counts = spy.values[0] - spy.noise[0][1]
    corr = np.corrcoef(signed.astype(np.float64), counts.astype(np.float64))[0, 1]
    assert abs(corr) < 0.4  # 4.4 sd of a null correlation at 120 counts
    # each residue is uniform on [0, 2^k) (Kolmogorov-Smirnov against the uniform)
    assert stats.kstest(residues.astype(np.float64) / 2 ** bits, "uniform").pvalue > 1e-3


def test_one_release_is_q_per_query_releases_at_shift_root_2q() -> None:
    """One record moves one teacher's vote on every query: the counts move by √(2Q) in ℓ2
    and 2Q in ℓ1 (a teacher that flips every vote), and the release's RDP is the
    composition of Q one-query releases (shift √2, ℓ1 2, C counts) of the same shares;
    accounting the whole vector at √2 would claim Q times less."""
    opts = DPPATEOptions.from_mapping({**SECURE, "min_group": 2}, "dp-pate")
    settings = Settings(n_classes=3, n_features=4, n_clients=3, rounds=1, period=1,
                        options=opts)
    p = pate_secure.SecureVoteParameters(opts, settings, n_public=200)
    rng = np.random.default_rng(0)
    before = rng.integers(0, 3, size=(1, Q))
    after = (before + 1) % 3  # the teacher's vote moves on every query
    shift = vote_counts(after, 3) - vote_counts(before, 3)
    assert np.linalg.norm(shift) == pytest.approx(p.sensitivity)
    assert np.abs(shift).sum() == 2 * Q and p.dim == shift.size
    orders, curve = distributed_discrete_rdp(p.noise_multiplier, p.min_group, p.sensitivity,
                                             p.dim)
    per_query = sum_rdp(orders, math.sqrt(2), 2.0, p.share_sigma, p.min_group, 3)
    np.testing.assert_allclose(curve, Q * per_query, rtol=1e-9)
    too_small = sum_rdp(orders, math.sqrt(2), 2.0, p.share_sigma, p.min_group, p.dim)
    assert np.all(curve > 10 * too_small)
    assert p.share_sigma == pytest.approx(4.0 / math.sqrt(2))  # σ per count, min_group 2


def test_forged_dropout_charges_every_answered_attempt(fed: fl.Federation) -> None:
    s = session(fed, min_group=2, retries=1)
    server = s.server
    grid = grid_of(s, swallow=frozenset({(0, 2)}))  # attempt 0: client 2's reply "lost"
    metrics = server.run_round(0, grid)
    assert metrics["attempts"] == 2.0 and metrics["group_size"] == 2.0
    p = server.params  # type: ignore[attr-defined]
    answered = {0: 2, 1: 2, 2: 1}  # attempts each client answered
    for cid, n in answered.items():
        ledger = s.clients[cid].ledger  # type: ignore[attr-defined]
        assert len(ledger.events) == n
        want = distributed_discrete_epsilon(p.noise_multiplier, 2, math.sqrt(2 * Q), 2 * Q,
                                            n, 1e-5)
        assert ledger.spent().epsilon == pytest.approx(want, rel=1e-12)
    from fedlabels.privacy.ledger import account_per_client

    _worst, each = account_per_client(server.events, 1e-5)  # type: ignore[attr-defined]
    assert {c: e.epsilon for c, e in each.items()} == pytest.approx(
        {c: distributed_discrete_epsilon(p.noise_multiplier, 2, math.sqrt(2 * Q), 2 * Q, n,
                                         1e-5) for c, n in answered.items()})
    # the retry reused client 0's counts (its teachers voted once) under fresh masks
    first, second = [q for c, q, _ in grid.replies if c == 0 and q.kind == "pate.secure_vote"]
    assert (first.config["attempt"], second.config["attempt"]) == (0, 1)


def _keys_round(s: Session, group: str, rnd: int = 0) -> dict[int, Message]:
    announce = Message("pate.keys", config={"round": rnd, "participants": group})
    return {c: s.clients[c].handle(announce) for c in (0, 1, 2)}


def _vote(keys: Mapping[int, Message], group: list[int], p: Any, attempt: int = 0,
          queries: int = Q, **config: Any) -> Message:
    arrays: dict[str, np.ndarray] = {"queries": np.arange(queries, dtype=np.uint32)}
    for c in group:
        arrays[f"pub_{c}"] = keys[c].arrays["pub"]
        arrays[f"sig_{c}"] = keys[c].arrays["sig"]
    return Message("pate.secure_vote", arrays=arrays, config={
        "round": 0, "attempt": attempt, "participants": ",".join(map(str, group)),
        "steps": TEACHER_STEPS, "aggregation": "secure", "bits": p.bits, "retries": p.retries,
        "noise_multiplier": p.noise_multiplier, **config})


def test_a_deviating_server_is_refused(fed: fl.Federation,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    s = session(fed, min_group=3)
    client = s.clients[0]
    with pytest.raises(RefusedError, match="at least 3"):  # a group below min_group
        client.handle(Message("pate.keys", config={"round": 0, "participants": "0,1"}))
    with pytest.raises(SecureProtocolError, match=r"\[7\].*roster"):  # a Sybil
        client.handle(Message("pate.keys", config={"round": 0, "participants": "0,1,2,7"}))
    with pytest.raises(RefusedError, match=r"kind 'pate\.vote' is not"):
        client.handle(Message("pate.vote", arrays={"queries": np.arange(Q, dtype=np.uint32)},
                              config={"round": 0, "steps": 1}))  # votes in the clear
    keys = _keys_round(s, "0,1,2")
    p = s.server.params  # type: ignore[attr-defined]
    from fedlabels.secure.identity import ANY_PEER, digest
    from fedlabels.secure.keys import KeyPair, to_u8

    forged = dict(keys)  # a key swapped for the server's own, signed outside the roster
    pub = to_u8(KeyPair().public)
    statement = s.clients[1].trust.authenticator(0, [0, 1, 2])._statement(  # type: ignore
        pate_secure.KEY_PURPOSE, 1, ANY_PEER, digest(pub, p.fingerprint()))
    forged[1] = Message("pate.key", arrays={"pub": pub,
                                            "sig": to_u8(Identity().sign(statement))})
    with pytest.raises(SecureProtocolError, match="signature"):
        client.handle(_vote(forged, [0, 1, 2], p))
    # a member whose own options give smaller shares (min_group 2): its key is refused
    other = session(fed, min_group=3)
    small = other.clients[1]
    small._params = pate_secure.SecureVoteParameters(  # type: ignore[attr-defined]
        DPPATEOptions.from_mapping({**SECURE, "min_group": 2}, "dp-pate"), small.settings,
        len(small.public))
    other_keys = _keys_round(other, "0,1,2")
    with pytest.raises(SecureProtocolError, match="client 1's pate-round-key"):
        other.clients[0].handle(_vote(other_keys, [0, 1, 2], p))
    # no secure aggregation, another ring, more queries (a larger shift than accounted),
    # clusters instead of rows
    for change in ({"aggregation": "plain"}, {"bits": p.bits + 8}, {"queries": Q + 1},
                   {"cluster_seed": 3, "clusters": Q},
                   {"noise_multiplier": p.noise_multiplier / 2},
                   # teacher steps it did not plan (2^62 kept the site training for good)
                   {"steps": 25 * TEACHER_STEPS}, {"steps": -1}, {"steps": 2**62},
                   {"steps": True}):
        with pytest.raises(ParameterRefusal):
            client.handle(_vote(keys, [0, 1, 2], p, **change))
    with pytest.raises(RefusedError, match="at least 3"):  # shrunk at vote time
        client.handle(_vote(keys, [0, 1], p))
    assert not client.ledger.events  # type: ignore[attr-defined]  # nothing released
    spy = Spy(monkeypatch)
    client.handle(_vote(keys, [0, 1, 2], p))
    assert len(client.ledger.events) == 1  # type: ignore[attr-defined]
    with pytest.raises(RefusedError, match="attempt 0 of round 0 again"):  # mask reuse
        client.handle(_vote(keys, [0, 1, 2], p))
    # the share's σ is the client's own σ/√min_group, whatever the group announced
    assert spy.noise[0][0] == pytest.approx(4.0 / math.sqrt(3))


def test_the_share_is_not_the_run_seeds(fed: fl.Federation,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    for _ in range(2):
        s = session(fed, seed=5)
        s.server.run_round(0, grid_of(s))
    assert len(spy.noise) == 6
    assert not np.array_equal(spy.noise[0][1], spy.noise[3][1])  # same seed, new noise


@pytest.mark.parametrize(("options", "match"), [
    ({"noise_sigma": 4.0, "aggregation": "secure", "threshold": 3.0,
      "threshold_sigma": 2.0}, "confident GNMax"),
    ({"noise_sigma": 4.0, "min_group": 2}, "aggregation secure"),
    ({"noise_sigma": 4.0, "retries": 1}, "retries applies only"),
    ({"noise_sigma": 4.0, "aggregation": "mixed"}, "plain"),
])
def test_inapplicable_combinations_are_one_line_errors(options: dict[str, Any],
                                                       match: str) -> None:
    with pytest.raises(FedLabelsError, match=match) as err:
        DPPATEOptions.from_mapping(options, "dp-pate")
    assert "\n" not in str(err.value)


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.FedLabelsWarning")
def test_a_secure_run_states_its_guarantee(fed: fl.Federation) -> None:
    r = fl.run("dp-pate", fed, rounds=1, seed=0,
               options={"epsilon": 8.0, "aggregation": "secure", "min_group": 2})
    p = r.extra["privacy"]
    assert p["aggregation"] == "secure" and p["guarantee"] == "formal"
    assert "the server" in p["guarantee_against"] and p["min_group"] == 2
    assert p["epsilon"] <= 8.0 and p["attempts"] == 1 and p["releases_accounted"] == 1
    assert "epsilon_data_dependent" not in p
    assert p["sensitivity"]["value"] == pytest.approx(math.sqrt(2 * p["queries"]))
    assert p["share_std_votes"] == pytest.approx(p["noise_sigma"] / math.sqrt(2))
    seen = r.extra["threat_model"]  # the secure view, not the trusted aggregator's
    assert "masked" in seen["sees"] and "deviate" in seen["adversary"]
    assert "trusted aggregator" not in seen["adversary"]
    with pytest.raises(FedLabelsError, match="min_group 4 exceeds"):
        fl.run("dp-pate", fed, rounds=1, seed=0, options={**SECURE, "min_group": 4})


def test_a_teacher_label_outside_the_classes_is_refused_before_the_charge(
        fed: fl.Federation) -> None:
    """A label C would land in the next query's class 0 of the flat counts."""
    from fedlabels.core.errors import LearnerOutputError
    from fedlabels.methods.teacher_student.roles import ConstantModel

    s = session(fed, min_group=3)
    client = s.clients[0]
    keys = _keys_round(s, "0,1,2")
    client.teachers = lambda message: [ConstantModel(2)]  # type: ignore[method-assign]
    with pytest.raises(LearnerOutputError, match=r"\[0, 2\)"):
        client.handle(_vote(keys, [0, 1, 2], s.server.params))  # type: ignore[attr-defined]
    assert not client.ledger.events  # type: ignore[attr-defined]


@pytest.mark.parametrize("budget", [{"noise_sigma": 4.0},
                                    {"noise_sigma": None, "epsilon": 50.0}])
def test_a_server_forging_dropouts_gets_at_most_one_vote_plus_retries(
        fed: fl.Federation, budget: dict[str, Any]) -> None:
    """A deviating server forges a dropout after every attempt (and announces a second
    round): client 0 answers 1 + retries attempts in all, without its own ε as with it."""
    from fedlabels.core.errors import BudgetRefusal, ParameterRefusal, error_category

    s = session(fed, min_group=2, retries=1, **budget)
    p = s.server.params  # type: ignore[attr-defined]
    answered = []
    for rnd in (0, 1):
        if rnd == 1:  # beyond the plan's one round: refused at its keys since 2026-11-30
            with pytest.raises(ParameterRefusal) as refused:
                _keys_round(s, "0,1,2", rnd)
            assert error_category(refused.value) == ("refused: parameters (round must be an "
                                                     "integer from 0 to 0)")
            continue
        keys = _keys_round(s, "0,1,2", rnd)
        for attempt in range(3):
            try:
                s.clients[0].handle(_vote(keys, [0, 1], p, attempt=attempt, round=rnd))
            except BudgetRefusal as exc:
                assert "option retries" in str(exc) and "\n" not in str(exc)
            else:
                answered.append((rnd, attempt))
    assert answered == [(0, 0), (0, 1)]
    assert len(s.clients[0].ledger.events) == 2  # type: ignore[attr-defined]


def test_without_retries_an_honest_server_asks_no_retry(fed: fl.Federation) -> None:
    """A dropout with retries 0: the server asks no second attempt (each client's plan
    would refuse it) and stops in one line naming the option; with retries 1 and
    epsilon, σ covers both releases (oracle: the accountant at the σ found)."""
    from fedlabels.core.errors import FedLabelsWarning

    with pytest.warns(FedLabelsWarning, match="retries = 0"):
        s = session(fed, min_group=2)
    with pytest.raises(FedLabelsError, match="--opt retries=A") as err:
        s.server.run_round(0, grid_of(s, swallow=frozenset({(0, 2)})))
    assert "\n" not in str(err.value)
    assert [len(c.ledger.events) for c in s.clients.values()] == [1, 1, 1]  # type: ignore
    s = session(fed, min_group=2, retries=1, noise_sigma=None, epsilon=8.0)
    p = s.server.params  # type: ignore[attr-defined]
    assert p.releases == 2 and len(s.clients[0].planned_events()) == 2  # type: ignore

    def spent(multiplier: float, releases: int) -> float:
        return distributed_discrete_epsilon(multiplier, 2, math.sqrt(2 * Q), 2 * Q,
                                            releases, 1e-5)

    assert spent(p.noise_multiplier, 2) <= 8.0 * (1 + 1e-9)
    assert spent(p.noise_multiplier * 0.999, 2) > 8.0
