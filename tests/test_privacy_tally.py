"""A ledger's running totals (fedlabels.privacy.tally): every check and ``spent`` equals the
full walk over the events (``_walk_events`` / ``_walk_per_client`` below, the oracle) for
random, mixed sequences, after a restored state and after a refusal; and a check reads only
the new events, however long the history."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from fedlabels.core.errors import BudgetRefusal
from fedlabels.privacy.accounting import PrivacySpent
from fedlabels.privacy.discrete_accounting import discrete_gaussian_spent
from fedlabels.privacy.dpsgd_accounting import DPSGD_ACCOUNTANTS, DPSGDRoundEvent, dpsgd_epsilon
from fedlabels.privacy.events import (
    DiscreteGaussianEvent,
    DistributedDiscreteGaussianEvent,
    GNMaxEvent,
    KaryRREvent,
    LaplaceNoisyMaxEvent,
    SampledGaussianEvent,
    XorEvent,
)
from fedlabels.privacy.ledger import Ledger, LedgerEvents, events_from_json
from fedlabels.privacy.mechanisms import flip_probability
from fedlabels.privacy.tally import (
    FAST_ACCOUNTANTS,
    ClientTallies,
    Tally,
    basic,
    client_part,
    named_clients,
)

DELTA = 1e-5


def _walk_dpsgd(events: Sequence[DPSGDRoundEvent], delta: float,
                accountants: tuple[str, ...] | None = None) -> list[PrivacySpent]:
    steps: dict[tuple[float, float], int] = {}
    for ev in events:
        key = (ev.noise_multiplier, ev.sample_rate)
        steps[key] = steps.get(key, 0) + sum(int(k) for _, k in ev.steps)
    return [dpsgd_epsilon(s, q, n, delta, accountants or DPSGD_ACCOUNTANTS)
            for (s, q), n in sorted(steps.items())]


def _walk_events(events: Sequence[Any], delta: float,
                 gaussian_accountants: tuple[str, ...] | None = None,
                 fast: bool = False) -> PrivacySpent:
    """The oracle: (ε, δ) of one party's events by walking every one (the ledger's accounting
    before its running totals): each kind with its own accountant, kinds composed.

    ``gaussian_accountants``: the accountants of sampled-Gaussian events (None: the
    defaults of :func:`~fedlabels.privacy.accounting.account_gaussian`); ``fast``: Gaussian
    and DP-SGD events by :data:`FAST_ACCOUNTANTS` only (a valid bound, maybe not the
    tightest). Basic composition adds the δ's: where k parts spend one, each at δ / k."""
    parts = _walk_parts(events, delta, gaussian_accountants, fast)
    k = sum(p.accountant != "none" and p.delta > 0 for p in parts)
    return basic(_walk_parts(events, delta / k, gaussian_accountants, fast) if k > 1
                 else parts)


def _walk_parts(events: Sequence[Any], delta: float,
                gaussian_accountants: tuple[str, ...] | None,
                fast: bool) -> list[PrivacySpent]:
    if fast:
        gaussian_accountants = FAST_ACCOUNTANTS
    from fedlabels.privacy.accounting import account_gaussian, account_labels
    from fedlabels.privacy.vote_accounting import account_gnmax, account_laplace

    labels = [ev for ev in events if isinstance(ev, XorEvent | KaryRREvent)]
    dpsgd = [ev for ev in events if isinstance(ev, DPSGDRoundEvent)]
    gauss = [ev for ev in events if isinstance(ev, SampledGaussianEvent)]
    discrete = [ev for ev in events if isinstance(ev, DiscreteGaussianEvent)]
    gnmax = [ev for ev in events if isinstance(ev, GNMaxEvent)]
    laplace = [ev for ev in events if isinstance(ev, LaplaceNoisyMaxEvent)]
    parts = []
    if labels:
        parts.append(account_labels(labels, delta))
    if dpsgd:
        parts.extend(_walk_dpsgd(dpsgd, delta, FAST_ACCOUNTANTS if fast else None))
    for key in sorted({(ev.noise_multiplier, ev.sampling_rate) for ev in gauss}):
        parts.append(account_gaussian(
            [ev for ev in gauss if (ev.noise_multiplier, ev.sampling_rate) == key], delta,
            gaussian_accountants))
    for key in sorted({(ev.noise_multiplier, ev.sampling_rate) for ev in discrete}):
        n = sum((ev.noise_multiplier, ev.sampling_rate) == key for ev in discrete)
        parts.append(discrete_gaussian_spent(*key, n, delta))
    for sigma in sorted({ev.sigma for ev in gnmax}):
        acc = account_gnmax([ev for ev in gnmax if ev.sigma == sigma], delta)
        parts.append(PrivacySpent(acc.epsilon, delta, "exact_gaussian"))
    for key in sorted({(ev.scale, ev.l1_sensitivity) for ev in laplace}):
        acc_l = account_laplace([ev for ev in laplace
                                 if (ev.scale, ev.l1_sensitivity) == key], delta)
        parts.append(PrivacySpent(acc_l.epsilon, acc_l.delta, acc_l.accountant))
    return parts


def _walk_per_client(events: Sequence[Any], delta: float,
                       gaussian_accountants: tuple[str, ...] | None = None, fast: bool = False
                       ) -> tuple[PrivacySpent, dict[int, PrivacySpent]]:
    """The oracle of a server's ledger: every client's (ε, δ) over what it released, and the
    worst one.

    A release that names no clients counts for every client; without any client named the
    ledger is accounted as one party's."""
    cids = sorted({c for ev in events for c in named_clients(ev)})
    if not cids:
        return _walk_events(events, delta, gaussian_accountants, fast), {}
    per_client = {}
    for cid in cids:
        parts = [p for ev in events if (p := client_part(ev, cid)) is not None]
        per_client[cid] = _walk_events(parts, delta, gaussian_accountants, fast)
    return max(per_client.values(), key=lambda s: s.epsilon), per_client


def _xor(eps: float, bits: int = 4) -> XorEvent:
    return XorEvent(eps, bits, flip_probability(eps, bits), 40)


def _party_event(rng: random.Random) -> Any:
    """One release of a party's ledger, of any kind (accountants kept fast: few composed
    responses, q = 1 Gaussians)."""
    kind = rng.choice(["xor", "xor", "xor2", "kary", "gauss", "discrete", "gnmax",
                       "gnmax_conf", "laplace", "dpsgd"])
    if kind == "xor":
        return _xor(0.7)
    if kind == "xor2":
        return _xor(1.3, 2)
    if kind == "kary":
        return KaryRREvent(0.9, 2, 0.45, 3, 10)
    if kind == "gauss":
        return SampledGaussianEvent(rng.choice([1.5, 3.0]), 1.0, 1.0)
    if kind == "discrete":
        return DiscreteGaussianEvent(rng.choice([1.5, 3.0]), rng.choice([1.0, 0.5]), 1.0,
                                     0.01, 101.0)
    if kind == "gnmax":
        return GNMaxEvent(rng.choice([4.0, 8.0]), n_queries=rng.randint(0, 5), n_answered=0)
    if kind == "gnmax_conf":
        return GNMaxEvent(20.0, 3, 1, threshold=5.0, threshold_sigma=10.0)
    if kind == "laplace":
        return LaplaceNoisyMaxEvent(rng.choice([10.0, 20.0]), 2.0, rng.randint(1, 4))
    return DPSGDRoundEvent(1.2, 0.2, 1.0, ((0, rng.randint(1, 3)),))


def _same(got: Any, want: Any) -> None:
    assert got == want  # (ε, δ), the accountant and every accountant's ε: equal, not close


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_party_ledger_checks_and_spends_exactly_what_the_full_walk_accounts(seed: int
                                                                             ) -> None:
    rng = random.Random(seed)
    ledger = Ledger(DELTA, gaussian_accountants=("rdp",))
    for _ in range(14):
        new = [_party_event(rng) for _ in range(rng.choice([1, 1, 2]))]
        for tight in (False, True):
            _same(ledger.check(new, tight=tight),
                  _walk_events([*ledger.events, *new], DELTA, ("rdp",), fast=not tight))
        ledger.record(*new, tight=rng.random() < 0.5)
        _same(ledger.spent(), _walk_events(ledger.events, DELTA, ("rdp",)))


@dataclass(frozen=True)
class _Named:
    """A release that names its clients (as subsample-aggregate's does); counts the
    ``client_part`` calls made on it."""

    sigma: float
    clients: tuple[int, ...]
    calls: list[int]

    def client_part(self, cid: int) -> Any:
        self.calls.append(cid)
        return GNMaxEvent(self.sigma, 2, 2) if cid in self.clients else None


def _server_event(rng: random.Random, calls: list[int], late: bool) -> Any:
    """A server's ledger entry: DP-SGD steps of some clients, a release that names some,
    or one that names none (every client's); client 7 appears only when ``late``."""
    pool = [0, 1, 2, 7] if late else [0, 1, 2]
    chosen = tuple(sorted(rng.sample(pool, rng.randint(1, len(pool)))))
    kind = rng.choice(["dpsgd", "named", "all"])
    if kind == "dpsgd":
        return DPSGDRoundEvent(1.1, 0.25, 1.0, tuple((c, rng.randint(1, 2)) for c in chosen))
    if kind == "named":
        return _Named(rng.choice([5.0, 9.0]), chosen, calls)
    return _xor(0.5)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_server_ledger_per_client_equals_the_full_walk_with_a_late_client(seed: int
                                                                           ) -> None:
    rng, calls = random.Random(seed), []
    ledger = Ledger(DELTA, per_client=True)
    assert ledger.spent() == _walk_per_client([], DELTA)[0]
    for i in range(12):
        new = [_server_event(rng, calls, late=i >= 8)]
        _same(ledger.check(new, tight=False),
              _walk_per_client([*ledger.events, *new], DELTA, fast=True)[0])
        ledger.record(*new, tight=False)
        tally = ledger._tally()
        assert isinstance(tally, ClientTallies)
        assert tally.per_client(DELTA) == _walk_per_client(ledger.events, DELTA)
    assert 7 in ledger._tally().clients or not any(  # the late client, where it came
        7 in getattr(ev, "clients", ()) for ev in ledger.events)


def test_a_restored_ledger_continues_from_its_events() -> None:
    """A client's state replaces its ledger's events in place (``events[:] = ...``), a
    server's assigns a new list (:class:`LedgerEvents`): either is counted again, not
    added to what the ledger held before."""
    rng = random.Random(5)
    ledger = Ledger(DELTA, gaussian_accountants=("rdp",))
    for _ in range(6):
        ledger.record(_party_event(rng))
    saved = ledger.events_json()
    ledger.record(_party_event(rng), _party_event(rng))  # after the checkpoint
    ledger.events[:] = events_from_json(saved)  # the client's load_state_dict
    _same(ledger.spent(), _walk_events(ledger.events, DELTA, ("rdp",)))
    nxt = _party_event(rng)
    _same(ledger.check([nxt]), _walk_events([*ledger.events, nxt], DELTA, ("rdp",)))

    class Server(LedgerEvents):
        def __init__(self) -> None:
            self.ledger = Ledger(DELTA, per_client=True)

    server = Server()
    server.ledger.record(DPSGDRoundEvent(1.1, 0.25, 1.0, ((0, 1), (1, 1))))
    server.ledger.spent()
    server.events = [DPSGDRoundEvent(1.1, 0.25, 1.0, ((1, 3),))] * 2  # a new list
    assert server.ledger._tally().per_client(DELTA) == _walk_per_client(server.events, DELTA)


def test_a_refused_release_leaves_the_totals_as_the_events() -> None:
    ev, tiny = _xor(0.7), _xor(0.01)
    ledger = Ledger(DELTA, target=_walk_events([ev] * 3 + [tiny], DELTA).epsilon)
    for _ in range(3):
        ledger.record(ev)
    with pytest.raises(BudgetRefusal):
        ledger.record(_xor(1.3, 2), ev)
    assert len(ledger.events) == 3
    _same(ledger.spent(), _walk_events([ev] * 3, DELTA))
    _same(ledger.check([tiny]), _walk_events([ev] * 3 + [tiny], DELTA))


class _CountedXor(XorEvent):
    """An XOR release that counts how often accounting reads it."""

    reads: ClassVar[list[int]] = []

    def __getattribute__(self, name: str) -> Any:
        if name == "flip_probability":
            _CountedXor.reads.append(1)
        return super().__getattribute__(name)


def _reads_of_one_check(history: int, per_client: bool) -> tuple[int, int]:
    """(reads of XOR releases, client_part calls) of one check after ``history`` rounds
    (s* = 8 bits: more than PLD_MAX_COMPOSITIONS responses, so no slow PLD)."""
    calls: list[int] = []
    ledger = Ledger(DELTA, per_client=per_client)
    eps = 0.7
    ev = _CountedXor(eps, 8, flip_probability(eps, 8), 40)
    ledger.record(ev, tight=False)
    for _ in range(history):  # recorded as record() would, without a check each
        ledger.events.extend([ev, *([_Named(5.0, (0, 1), calls)] if per_client else [])])
    ledger.check([ev], tight=False)
    _CountedXor.reads.clear()
    calls.clear()
    ledger.check([ev, *([_Named(5.0, (0, 1), calls)] if per_client else [])], tight=False)
    return len(_CountedXor.reads), len(calls)


@pytest.mark.parametrize("per_client", [False, True])
def test_a_check_reads_the_new_releases_only_however_long_the_history(per_client: bool
                                                                      ) -> None:
    """Before, each check walked every recorded event (about 10 ms a client's ledger at
    3,000 DP-FedCT rounds): the reads grew with the history."""
    short, long = _reads_of_one_check(5, per_client), _reads_of_one_check(300, per_client)
    assert long == short
    assert short[0] <= 2 * (3 if per_client else 1)  # the new release, once per party


def _totals(tally: Tally) -> tuple[Any, ...]:
    """Every total of ``tally``, exactly (arrays as lists: equal bit for bit)."""
    gnmax = {s: (sorted(g.settings), g.queries)
             for s, g in tally.gnmax.items()}
    return (tally.labels, tally.dpsgd, tally.gauss, tally.discrete, tally.distributed, gnmax,
            tally.laplace)


def _random_runs(rng: random.Random, server: bool) -> list[tuple[Any, int]]:
    calls: list[int] = []
    return [(_server_event(rng, calls, late=i >= 5) if server else _party_event(rng),
             rng.choice([1, 2, 3, 17, 400, 5000])) for i in range(rng.randint(1, 9))]


@pytest.mark.parametrize("ev", [
    _xor(0.7), KaryRREvent(0.9, 2, 0.45, 3, 10), SampledGaussianEvent(1.5, 0.5, 1.0),
    DiscreteGaussianEvent(1.5, 0.5, 1.0, 0.01, 101.0),
    DistributedDiscreteGaussianEvent(1.2, 3, 1.0, 0.01, 120.0, 400),
    GNMaxEvent(4.0, n_queries=3, n_answered=0), LaplaceNoisyMaxEvent(10.0, 2.0, 3),
    DPSGDRoundEvent(1.2, 0.2, 1.0, ((0, 2), (1, 1))),
], ids=lambda ev: type(ev).__name__)
def test_a_run_of_seven_equal_events_of_each_kind_counts_seven(ev: Any) -> None:
    """Every kind's total is added n at a time for a run of n equal events (a restored
    ledger's ``{"event": ..., "repeat": n}``): the same totals and ε as seven one by one."""
    at_once, one_by_one = Tally(), Tally.of([ev] * 7)
    at_once.add(ev, 7)
    assert _totals(at_once) == _totals(one_by_one) != _totals(Tally.of([ev]))
    _same(at_once.spent(DELTA, ("rdp",)), one_by_one.spent(DELTA, ("rdp",)))


@pytest.mark.parametrize("seed", range(4))
def test_a_run_of_equal_events_counts_as_its_events_one_by_one(seed: int) -> None:
    """Tally.add(ev, n), ClientTallies.extend_runs and a ledger restored from runs (a site's
    role, restored for every message) give the totals of adding every event in turn."""
    rng = random.Random(seed)
    runs = _random_runs(rng, server=False)
    events = [ev for ev, n in runs for _ in range(n)]
    at_once = Tally()
    at_once.extend_runs(runs)
    assert _totals(at_once) == _totals(Tally.of(events))  # the oracle: event by event
    served = _random_runs(rng, server=True)
    oracle = ClientTallies()
    oracle.extend([ev for ev, n in served for _ in range(n)], [])
    tallies = ClientTallies()
    tallies.extend_runs(served)
    assert _totals(tallies.whole) == _totals(oracle.whole)
    assert {c: _totals(t) for c, t in tallies.clients.items()} == {
        c: _totals(t) for c, t in oracle.clients.items()}
    ledger = Ledger(DELTA, gaussian_accountants=("rdp",), events=list(events))
    restored = Ledger(DELTA, gaussian_accountants=("rdp",))
    restored.restore_json(ledger.events_json())
    assert restored.events == events
    _same(restored.spent(), _walk_events(events, DELTA, ("rdp",)))
    nxt = _party_event(rng)
    _same(restored.check([nxt]), _walk_events([*events, nxt], DELTA, ("rdp",)))


def test_a_restored_ledger_counts_each_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Flower site's role, rebuilt for every message, counted all the run's releases into
    its totals again (0.36 ms at 1,000 releases, 3.4 ms at 10,000): O(events); each run
    of equal events now counts at once."""
    added: list[int] = []
    original = Tally.add

    def counted(self: Tally, ev: Any, n: int = 1) -> None:
        added.append(n)
        original(self, ev, n)

    monkeypatch.setattr(Tally, "add", counted)
    for per_client in (False, True):
        text = Ledger(DELTA, events=[_xor(0.7)] * 3000 + [_xor(0.3)] * 2
                      + [_xor(0.7)] * 5000).events_json()
        restored = Ledger(DELTA, per_client=per_client)
        added.clear()
        restored.restore_json(text)
        restored.check([_xor(0.7)], tight=False)
        assert len(restored.events) == 8002
        assert sorted(added) == [1, 2, 3000, 5000]  # each run at once, and the new release
