"""DP-FedAvg with ``aggregation="secure"``: the masks cancel in the group's sum and nowhere
else, the server cannot read a client's update from what it holds (it can without secure
aggregation), a deviating server is refused, every answered attempt is charged, the noise
is not the run seed's, and the inapplicable options are one-line errors (the accountant:
tests/test_distributed_discrete.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from scipy import stats

import fedlabels as fl
from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError, ParameterRefusal, RefusedError
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.learners import as_models
from fedlabels.methods.fedavg import dp_fedavg_secure
from fedlabels.methods.fedavg.dp_fedavg import DPFedAvgOptions
from fedlabels.privacy.distributed_discrete import distributed_discrete_epsilon
from fedlabels.runs.session import Session, build_session
from fedlabels.secure import masked_sum
from fedlabels.secure.identity import Identity
from fedlabels.secure.keys import SecureProtocolError
from secure_sum_spy import Spy

SECURE = {"noise": "discrete", "aggregation": "secure", "noise_multiplier": 1.0}


@pytest.fixture(scope="module")
def fed() -> fl.Federation:
    return fl.load_federation("breast_cancer", clients=3, seed=0)


def session(fed: fl.Federation, rounds: int = 2, seed: int = 0, **options: Any) -> Session:
    return build_session("dp-fedavg", fed, as_models("mlp(hidden=8)"), rounds=rounds,
                         period=2, seed=seed, options={**SECURE, **options})



class Recording:
    """A grid that keeps every reply, and may swallow chosen ones (a forged dropout: the
    client answered, the server says it did not)."""

    def __init__(self, inner: InProcessGrid, swallow: set[tuple[int, int, int]] | None = None
                 ) -> None:
        if swallow is None:
            swallow = set()
        self.inner, self.swallow = inner, set(swallow)
        self.replies: list[tuple[int, Message, Message]] = []

    @property
    def client_ids(self) -> list[int]:
        return self.inner.client_ids

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        replies = self.inner.exchange(messages, rnd)
        out = {}
        for cid, reply in replies.items():
            self.replies.append((cid, messages[cid], reply))
            request = messages[cid]
            attempt = int(request.config.get("attempt", -1))
            if request.kind == "dpfedavg.train" and (rnd, attempt, cid) in self.swallow:
                continue
            out[cid] = reply
        return out


def grid_of(s: Session, swallow: set[tuple[int, int, int]] | None = None) -> Recording:
    if swallow is None:
        swallow = set()
    return Recording(InProcessGrid(s.clients, CommMeter()), swallow)


def test_masks_cancel_in_the_group_sum_exactly(fed: fl.Federation,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    s = session(fed)
    server = s.server
    assert isinstance(server, dp_fedavg_secure.DPFedAvgSecureServer)
    before = server.weights.astype(np.float64).copy()
    grid = grid_of(s)
    assert server.run_round(0, grid)["group_size"] == 3.0
    plain = sum(spy.values[c] for c in range(3))
    masked = {c: r.arrays["masked"] for c, q, r in grid.replies if r.kind == "dpfedavg.masked"}
    p = server.params
    assert np.array_equal(masked_sum.ring_sum(masked, p.bits, plain.size), plain)
    # the global step is γ·sum/M of that exact integer sum
    step = (server.weights.astype(np.float64) - before) * 3 / p.grid
    np.testing.assert_allclose(step.ravel(), plain, atol=1e-2 * max(1, np.abs(plain).max()))
    # a sum that lacks one member stays masked: nothing like the plain sum of the others
    partial = masked_sum.ring_sum({c: masked[c] for c in (0, 1)}, p.bits, plain.size)
    others = spy.values[0] + spy.values[1]
    assert np.mean(partial == others) < 0.01


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.astype(np.float64), b.astype(np.float64))[0, 1])


def test_server_cannot_read_an_update_it_can_read_without_secure_aggregation(
        fed: fl.Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: read client 0's update from its reply, as the signed integers it holds.
    Without secure aggregation (noise discrete, aggregation plain) the reply is the update;
    with it the reply is uniform in Z_{2^k} and uncorrelated with the update."""
    from fedlabels.privacy.discrete_gaussian import encode_update

    plain_s = build_session("dp-fedavg", fed, as_models("mlp(hidden=8)"), rounds=1, period=2,
                            seed=0, options={"noise": "discrete", "noise_multiplier": 1.0})
    grid = grid_of(plain_s)
    plain_s.server.run_round(0, grid)
    read = next(r.arrays["update"] for c, _, r in grid.replies if c == 0)
    learner = plain_s.clients[0].learner
    start = next(q.arrays["weights"] for c, q, _ in grid.replies if c == 0)
    truth, _ = encode_update(learner.get_weights() - start, 1.0, plain_s.server.grid)
    assert np.array_equal(read, truth)  # the attack succeeds without secure aggregation

    spy = Spy(monkeypatch)
    s = session(fed, rounds=1)
    grid = grid_of(s)
    s.server.run_round(0, grid)
    bits = s.server.params.bits
    held = next(r.arrays["masked"] for c, _, r in grid.replies
            if c == 0 and r.kind == "dpfedavg.masked")
    dim = s.server.params.dim
    signed = masked_sum.ring_sum({0: held}, bits, dim)
    residues = masked_sum.unpack_residues(held, bits, dim)
    noise = spy.noise[0][1]
    update = spy.values[0] - noise  # what client 0 rounded: its update on the grid
    assert abs(_correlation(signed, update)) < 0.3  # 5 sd of a null correlation at d = 258
    assert not np.array_equal(signed, update)
    # each residue is uniform on [0, 2^k) (Kolmogorov-Smirnov against the uniform)
    assert stats.kstest(residues.astype(np.float64) / 2 ** bits, "uniform").pvalue > 1e-3


def test_forged_dropout_charges_every_answered_attempt(fed: fl.Federation) -> None:
    s = session(fed, rounds=2, min_group=2, retries=1)
    server = s.server
    grid = grid_of(s, swallow=frozenset({(0, 0, 2)}))  # round 0, attempt 0: client 2's reply "lost"
    first = server.run_round(0, grid)
    assert first == {"attempts": 2.0, "group_size": 2.0}
    server.run_round(1, grid)
    p = server.params
    answered = {0: 3, 1: 3, 2: 2}  # attempts each client answered over the two rounds
    for cid, n in answered.items():
        ledger = s.clients[cid].ledger  # type: ignore[attr-defined]
        assert len(ledger.events) == n
        want = distributed_discrete_epsilon(p.sigma, 2, p.sensitivity, p.dim, n, 1e-5)
        assert ledger.spent().epsilon == pytest.approx(want, rel=1e-12)
    from fedlabels.privacy.ledger import account_per_client

    _worst, each = account_per_client(server.events, 1e-5)
    assert {c: e.epsilon for c, e in each.items()} == pytest.approx(
        {c: distributed_discrete_epsilon(p.sigma, 2, p.sensitivity, p.dim, n, 1e-5)
         for c, n in answered.items()})


def _keys_round(s: Session, group: str, rnd: int = 0) -> dict[int, Message]:
    announce = Message("dpfedavg.keys", config={"round": rnd, "participants": group})
    return {c: s.clients[c].handle(announce) for c in (0, 1, 2)}


def _train(keys: Mapping[int, Message], group: list[int], rnd: int = 0, attempt: int = 0,
           **config: Any) -> Message:
    p = config.pop("params")
    arrays: dict[str, np.ndarray] = {"weights": config.pop("weights")}
    for c in group:
        arrays[f"pub_{c}"] = keys[c].arrays["pub"]
        arrays[f"sig_{c}"] = keys[c].arrays["sig"]
    return Message("dpfedavg.train", arrays=arrays, config={
        "round": rnd, "attempt": attempt, "participants": ",".join(map(str, group)),
        "steps": 2, "clip": p.clip, "grid": p.grid, "noise": "discrete",  # period 2
        "aggregation": "secure", "bits": p.bits, "retries": p.retries,
        "noise_multiplier": p.sigma, **config})


def test_a_deviating_server_is_refused(fed: fl.Federation,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    s = session(fed, min_group=3)
    client = s.clients[0]
    with pytest.raises(RefusedError, match="at least 3"):  # a group below min_group
        client.handle(Message("dpfedavg.keys", config={"round": 0, "participants": "0,1"}))
    with pytest.raises(SecureProtocolError, match=r"\[7\].*roster"):  # a Sybil
        client.handle(Message("dpfedavg.keys", config={"round": 0,
                                                       "participants": "0,1,2,7"}))
    keys = _keys_round(s, "0,1,2")
    p, weights = s.server.params, s.server.weights
    # a key swapped for the server's own, signed by an identity outside the roster
    forged = dict(keys)
    mallory = Identity()
    from fedlabels.secure.identity import ANY_PEER, digest
    from fedlabels.secure.keys import KeyPair, to_u8

    pub = to_u8(KeyPair().public)
    statement = s.clients[1].trust.authenticator(0, [0, 1, 2])._statement(  # type: ignore
        dp_fedavg_secure.KEY_PURPOSE, 1, ANY_PEER, digest(pub, p.fingerprint()))
    forged[1] = Message("dpfedavg.key", arrays={"pub": pub,
                                                "sig": to_u8(mallory.sign(statement))})
    with pytest.raises(SecureProtocolError, match="signature"):
        client.handle(_train(forged, [0, 1, 2], params=p, weights=weights))
    # a member whose own options give smaller shares (min_group 2: a group of 2 would
    # carry the client's accounted noise, not a group of 3): its signed key is refused
    from dataclasses import replace

    other = session(fed, min_group=3)
    small = other.clients[1]
    small._params = dp_fedavg_secure.SecureParameters(  # type: ignore[attr-defined]
        replace(small.options, min_group=2), small.settings, p.dim)
    other_keys = _keys_round(other, "0,1,2")
    with pytest.raises(SecureProtocolError, match="client 1's dpfedavg-round-key"):
        other.clients[0].handle(_train(other_keys, [0, 1, 2], params=p, weights=weights))
    # less noise, or no secure aggregation, than the client's own options
    for change in ({"aggregation": "plain"}, {"noise": "continuous"},
                   {"grid": p.grid * 2}, {"clip": p.clip * 10},
                   {"noise_multiplier": p.sigma / 2}, {"noise_multiplier": p.sigma * 1.001},
                   {"noise_multiplier": None},
                   # local steps it did not plan (2^62 kept the site training for good)
                   {"steps": 25}, {"steps": -1}, {"steps": 2**62}, {"steps": True}):
        with pytest.raises(ParameterRefusal):
            client.handle(_train(keys, [0, 1, 2], params=p, weights=weights, **change))
    with pytest.raises(RefusedError, match="at least 3"):  # shrunk at train time
        client.handle(_train(keys, [0, 1], params=p, weights=weights))
    assert not client.ledger.events  # nothing released, nothing charged
    spy = Spy(monkeypatch)
    # the σ the coordinator calibrated on another machine, a last digit apart, is taken
    client.handle(_train(keys, [0, 1, 2], params=p, weights=weights,
                         noise_multiplier=p.sigma * (1 + 1e-9)))
    with pytest.raises(RefusedError, match="attempt 0 of round 0 again"):  # mask reuse
        client.handle(_train(keys, [0, 1, 2], params=p, weights=weights))
    # the share's σ is the client's own σΔ/√min_group, whatever the group announced
    assert spy.noise[0][0] == pytest.approx(p.sigma * p.sensitivity / math.sqrt(3))


def test_the_share_is_not_the_run_seeds(fed: fl.Federation,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    for _ in range(2):
        s = session(fed, rounds=1, seed=5)
        s.server.run_round(0, grid_of(s))
    assert len(spy.noise) == 6
    assert not np.array_equal(spy.noise[0][1], spy.noise[3][1])  # same seed, new noise


@pytest.mark.parametrize(("options", "match"), [
    ({"noise_multiplier": 1.0, "aggregation": "secure"}, "noise continuous"),
    ({"noise_multiplier": 1.0, "aggregation": "secure", "noise": "discrete",
      "sample_rate": 0.5}, "sample_rate 0.5"),
    ({"noise_multiplier": 1.0, "aggregation": "secure", "noise": "discrete",
      "accountant": "pld"}, "accountant pld"),
    ({"epsilon": 4.0, "aggregation": "secure", "level": "record"}, "level client"),
    ({"noise_multiplier": 1.0, "noise": "discrete", "min_group": 2}, "aggregation secure"),
    ({"noise_multiplier": 1.0, "noise": "discrete", "retries": 2}, "retries applies only"),
    ({"noise_multiplier": 1.0, "aggregation": "mixed"}, "plain"),
])
def test_inapplicable_combinations_are_one_line_errors(options: dict[str, Any],
                                                       match: str) -> None:
    with pytest.raises(FedLabelsError, match=match) as err:
        DPFedAvgOptions.from_mapping(options, "dp-fedavg")
    assert "\n" not in str(err.value)


@pytest.mark.filterwarnings("ignore::fedlabels.core.errors.RunCaveatWarning")
def test_a_secure_run_states_its_guarantee(fed: fl.Federation) -> None:
    r = fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=2, seed=0,
               options={"noise": "discrete", "aggregation": "secure", "epsilon": 8.0,
                        "min_group": 2})
    p = r.extra["privacy"]
    assert p["aggregation"] == "secure" and p["guarantee"] == "formal"
    assert "the server" in p["guarantee_against"] and p["min_group"] == 2
    assert p["epsilon"] <= 8.0 and p["attempts_per_round"] == [1, 1]
    # σ is calibrated to the RDP bound on a sum of shares, and the result says so
    assert p["calibration"] == {"accountant": "rdp"}
    assert p["target"]["calibrated_by"] == "rdp"
    sens = p["sensitivity"]["value"]
    assert p["share_std_grid_units"] == pytest.approx(
        p["noise_multiplier"] * sens / math.sqrt(2))
    with pytest.raises(FedLabelsError, match="min_group 4 exceeds"):
        fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=1, seed=0,
               options={**SECURE, "min_group": 4})


def test_rounds_that_decoded_no_sum_are_a_run_caveat(fed: fl.Federation) -> None:
    """Dropouts below min_group (the default: every client) leave rounds with no decoded
    sum; the run says which, not only a flat accuracy curve."""
    from fedlabels.results.caveats import undecoded_rounds_warning

    with pytest.warns(fl.RunCaveatWarning, match=r"decoded no sum under secure aggregation"):
        res = fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=4, seed=0, dropout=0.5,
                     options={"noise": "discrete", "aggregation": "secure", "epsilon": 8.0})
    decoded = res.extra["privacy"]["decoded_group_per_round"]
    skipped = [i + 1 for i, size in enumerate(decoded) if not size]
    assert skipped  # with 3 clients and a dropout of 0.5, some round lacks one
    line = undecoded_rounds_warning(res)
    assert line is not None and f"{len(skipped)} of {len(decoded)} rounds" in line
    assert "min_group = 3" in line
    everyone = fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=2, seed=0,
                      options={"noise": "discrete", "aggregation": "secure", "epsilon": 8.0})
    assert all(everyone.extra["privacy"]["decoded_group_per_round"])
    assert undecoded_rounds_warning(everyone) is None


@pytest.mark.parametrize("bits", range(1, 65))
def test_residues_pack_to_exactly_k_bits_and_back(bits: int) -> None:
    """Independent oracle: the packed bytes as one little-endian Python int hold residue i
    at bits [i·k, (i+1)·k)."""
    rng = np.random.default_rng(bits)
    size = 21  # not a multiple of 8: the last byte is partial
    top = np.uint64((1 << bits) - 1)
    residues = rng.integers(0, 2 ** 63, size, dtype=np.uint64) * np.uint64(2) + \
        rng.integers(0, 2, size, dtype=np.uint64)  # the full 64 bits, then cut to k
    residues &= top
    packed = masked_sum.pack_residues(residues, bits)
    assert packed.dtype == np.uint8 and packed.size == math.ceil(size * bits / 8)
    as_int = int.from_bytes(packed.tobytes(), "little")
    for i in (0, 1, 7, 8, size - 1):
        assert (as_int >> (i * bits)) & ((1 << bits) - 1) == int(residues[i])
    assert as_int >> (size * bits) == 0  # the padding is zeros
    assert np.array_equal(masked_sum.unpack_residues(packed, bits, size), residues)


def test_packing_spans_chunks() -> None:
    rng = np.random.default_rng(0)
    size = masked_sum._CHUNK * 2 + 5
    residues = rng.integers(0, 2 ** 19, size, dtype=np.uint64)
    packed = masked_sum.pack_residues(residues, 19)
    assert packed.size == math.ceil(size * 19 / 8)
    assert np.array_equal(masked_sum.unpack_residues(packed, 19, size), residues)


@pytest.mark.parametrize("change", [-1, 1])
def test_a_masked_vector_of_another_length_is_refused_naming_its_client(
        fed: fl.Federation, change: int) -> None:
    """A truncated or oversized payload: refused in one line naming the client by the
    server's check of the reply and by the sum itself, never a crash."""
    from fedlabels.method.replies import MalformedReply

    s = session(fed, rounds=1)
    grid = grid_of(s)
    s.server.run_round(0, grid)
    p = s.server.params
    masked = {c: r.arrays["masked"] for c, _, r in grid.replies if r.kind == "dpfedavg.masked"}
    assert all(m.size == math.ceil(p.dim * p.bits / 8) for m in masked.values())
    request = next(q for c, q, r in grid.replies if c == 1 and r.kind == "dpfedavg.masked")
    wrong = np.resize(masked[1], masked[1].size + change)
    with pytest.raises(MalformedReply, match=r"client 1's dpfedavg\.masked"):
        s.server.check_reply(1, request, Message("dpfedavg.masked", arrays={"masked": wrong}))
    with pytest.raises(FedLabelsError, match="client 1's masked vector") as err:
        masked_sum.ring_sum({**masked, 1: wrong}, p.bits, p.dim)
    assert "\n" not in str(err.value)


def test_a_secure_runs_threat_model_states_what_its_server_sees(fed: fl.Federation) -> None:
    """The result's threat_model of a secure run names the deviating server and the masked
    view, not the plain mode's "each clipped update in the clear"."""
    secure = fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=1, seed=0,
                    options={"noise": "discrete", "aggregation": "secure", "epsilon": 8.0})
    plain = fl.run("dp-fedavg", fed, model="mlp(hidden=8)", rounds=1, seed=0,
                   options={"noise": "discrete", "epsilon": 8.0})
    seen, told = secure.extra["threat_model"], plain.extra["threat_model"]
    assert "masked" in seen["sees"] and "in the clear" not in seen["sees"]
    assert "deviate" in seen["adversary"] and "trusted to add the noise" not in seen["adversary"]
    assert "in the clear" in told["sees"] and "trusted to add the noise" in told["adversary"]


@pytest.mark.parametrize("budget", [{"noise_multiplier": 1.0},
                                    {"noise_multiplier": None, "epsilon": 50.0}])
def test_a_server_forging_dropouts_gets_at_most_rounds_plus_retries(
        fed: fl.Federation, budget: dict[str, Any]) -> None:
    """A deviating server forges a dropout after every attempt, skips rounds and asks
    rounds beyond the plan: client 0 answers one attempt a round so far plus its retries,
    rounds + retries in all (without its own ε as with it), and refuses every other."""
    from fedlabels.core.errors import BudgetRefusal

    rounds, retries = 2, 1
    s = session(fed, rounds=rounds, min_group=2, retries=retries, **budget)
    p, weights = s.server.params, s.server.weights
    answered: list[tuple[int, int]] = []
    for rnd in (0, 1):
        keys = _keys_round(s, "0,1,2", rnd)
        for attempt in range(3):
            try:
                s.clients[0].handle(_train(keys, [0, 1], rnd=rnd, attempt=attempt, params=p,
                                           weights=weights, steps=2))
            except BudgetRefusal as exc:
                assert "option retries" in str(exc) and "\n" not in str(exc)
            else:
                answered.append((rnd, attempt))
    # round 3, beyond the plan's 2: refused at its keys (until 2026-11-30 keyed, then its
    # attempts refused by the allowance alone)
    from fedlabels.core.errors import ParameterRefusal, error_category

    with pytest.raises(ParameterRefusal) as refused:
        _keys_round(s, "0,1,2", 3)
    assert error_category(refused.value) == ("refused: parameters (round must be an integer "
                                             "from 0 to 1)")
    # round 0: its release and the one retry; round 1: its own release; no more
    assert answered == [(0, 0), (0, 1), (1, 0)]
    assert len(s.clients[0].ledger.events) == rounds + retries  # type: ignore[attr-defined]


def test_an_honest_server_retries_within_the_allowance_only(fed: fl.Federation) -> None:
    """A member that drops out of every attempt: with retries 1 the first round is retried
    once and decoded without it; the next round (it answered again) has no retry left and
    is given up, rather than taking a later round's release."""
    s = session(fed, rounds=3, min_group=2, retries=1)
    drop = {(r, a, 2) for r in range(3) for a in range(3)}
    grid = grid_of(s, swallow=drop)
    metrics = [s.server.run_round(r, grid) for r in range(3)]
    assert [m["attempts"] for m in metrics] == [2.0, 1.0, 1.0]
    assert [m["group_size"] for m in metrics] == [2.0, 0.0, 0.0]
    for cid in range(3):  # within rounds + retries each, and never refused
        assert len(s.clients[cid].ledger.events) <= 4  # type: ignore[attr-defined]
    privacy = s.server.result_extra()["privacy"]
    assert privacy["retries"] == 1 and privacy["releases_planned"] == 4


def test_epsilon_is_calibrated_for_rounds_plus_retries(fed: fl.Federation) -> None:
    """Oracle: the accountant at the σ each party found. Rounds + retries releases fit ε,
    one more does not (so σ is no larger than needed); without retries σ covers the rounds
    only, and is smaller."""
    rounds, retries, eps = 3, 2, 4.0
    s = session(fed, rounds=rounds, min_group=2, retries=retries, noise_multiplier=None,
                epsilon=eps)
    p = s.server.params
    client = s.clients[0].params()  # type: ignore[attr-defined]
    assert client.sigma == p.sigma and p.releases == rounds + retries

    def spent(sigma: float, releases: int) -> float:
        return distributed_discrete_epsilon(sigma, 2, p.sensitivity, p.dim, releases, 1e-5)

    assert spent(p.sigma, rounds + retries) <= eps * (1 + 1e-9)
    assert spent(p.sigma * 0.999, rounds + retries) > eps
    plain = session(fed, rounds=rounds, min_group=2, noise_multiplier=None, epsilon=eps)
    assert plain.server.params.sigma < p.sigma
    assert spent(plain.server.params.sigma, rounds + retries) > eps
    assert len(s.clients[0].planned_events()) == rounds + retries  # type: ignore[attr-defined]


def test_a_plan_that_cannot_retry_says_so(fed: fl.Federation) -> None:
    from fedlabels.core.errors import FedLabelsWarning

    with pytest.warns(FedLabelsWarning, match="retries = 0.*--opt retries=A") as record:
        session(fed, rounds=1, min_group=2)
    assert all("\n" not in str(w.message) for w in record)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FedLabelsWarning)
        session(fed, rounds=1)  # min_group: every client, so no retry could decode
        session(fed, rounds=1, min_group=2, retries=1)


@pytest.mark.parametrize("held", [0, 1, 20])
def test_crafted_weights_do_not_show_which_records_a_client_holds(
        held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finite global weights that overflow on records with x_0 > t (an infinite logit) made
    the client's local update NaN exactly when it held such a record, and its refusal to
    encode it told the server so, with no noise: a search over t finds the client's records.
    Whatever t, the client now answers with a masked vector; where the update is not finite,
    it is a zero update (the oracle: its noise share set to zero, the vector it masks)."""
    from test_deviating_server import _role_factory, honest
    from test_dpsgd_crafted_weights import _crafted
    from test_method_contract import CLIENTS, DATASET, SEED, Case

    case = Case("dp-fedavg", {"epsilon": 8.0, "noise": "discrete", "aggregation": "secure"})
    fed = fl.load_federation(DATASET, clients=CLIENTS, seed=SEED)
    traces, _ = honest(case, fed)
    keys = next(m for m in traces[0] if m.kind == "dpfedavg.keys")
    train = next(m for m in traces[0] if m.kind == "dpfedavg.train")
    client = _role_factory(case, fed)(0)
    client.handle(keys)
    client.ensure_built()
    x = np.asarray(client.data.X, dtype=np.float32)[:, 0]
    threshold = float(np.sort(x)[len(x) - held - 1]) if held else float(x.max()) + 1.0
    assert int((x > threshold).sum()) == held  # the client's records above it
    _crafted(client.learner.model_, 0, threshold)
    weights = np.asarray(client.learner.get_weights(), dtype=np.float32)
    assert np.isfinite(weights).all()
    sent: list[np.ndarray] = []
    masked = client.masked

    def spy(vector: np.ndarray, *args: Any) -> np.ndarray:
        sent.append(np.array(vector))
        return masked(vector, *args)

    monkeypatch.setattr(client, "masked", spy)
    monkeypatch.setattr("fedlabels.privacy.discrete_gaussian.sample_discrete_gaussian",
                        lambda sigma, size, rng: np.zeros(size, dtype=np.int64))
    reply = client.handle(Message(train.kind, arrays={**train.arrays, "weights": weights},
                                  config=dict(train.config)))
    assert reply.kind == "dpfedavg.masked"  # FedLabelsError on main when held > 0
    assert len(sent) == 1 and len(client.ledger.events) == 1
    assert sent[0].any() != bool(held)  # an honest update is not zero
    assert all(np.isfinite(v).all() for v in client.state_dict().values()
               if isinstance(v, np.ndarray) and v.dtype.kind == "f")


def test_a_rounds_keys_are_drawn_once_and_an_attempt_needs_that_rounds_keys(
        fed: fl.Federation) -> None:
    """Keys announced again for a round (a fresh key pair that forgets the attempts
    answered, so attempt 0 would be answered twice) are refused; so is an attempt of round 1
    to a client still holding round 0's key, though its peers' round-1 keys are validly
    signed. Nothing is charged for either; the round's own attempt is answered."""
    s = session(fed, min_group=3)
    client = s.clients[0]
    keys = _keys_round(s, "0,1,2")
    p, weights = s.server.params, s.server.weights
    with pytest.raises(RefusedError, match="for round 0 after round 0"):
        client.handle(Message("dpfedavg.keys", config={"round": 0, "participants": "0,1,2"}))
    announce = Message("dpfedavg.keys", config={"round": 1, "participants": "0,1,2"})
    later = {**keys, **{c: s.clients[c].handle(announce) for c in (1, 2)}}
    with pytest.raises(RefusedError, match="for round 1 without this round's"):
        client.handle(_train(later, [0, 1, 2], rnd=1, attempt=1, params=p, weights=weights))
    assert not client.ledger.events  # type: ignore[attr-defined]
    client.handle(_train(keys, [0, 1, 2], params=p, weights=weights))
    assert len(client.ledger.events) == 1  # type: ignore[attr-defined]
