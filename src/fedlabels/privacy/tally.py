"""A party's releases as running totals: what accounting reads of them, kept as they come.

Walking every event of a ledger at each check (a DP run checks its budget before every
round) cost about 10 ms a client's ledger, a round, at 3,000 rounds. A :class:`Tally` keeps,
per kind, exactly what that walk read of the events: the label releases' Σ ε and composed
randomized responses (:class:`~fedlabels.privacy.accounting.LabelTally`), the DP-SGD steps
and the DP-FedAvg rounds per (σ, q) (continuous and discrete noise apart; secure aggregation's
per (σ, shares, Δ, d)), the GNMax queries per σ (composed exactly as one Gaussian
mechanism) and the Laplace queries per (b, Δ₁). Adding an event is O(1); its (ε, δ)
costs O(the distinct kinds), plus the accountants' own (memoised) work, whatever the
number of events.
It is the ledger's one accounting: :func:`~fedlabels.privacy.ledger.account_events` is a
:class:`Tally` of the events, and tests/test_privacy_tally.py checks it against the walk.
:class:`ClientTallies` does the same per client for a server's ledger
(:func:`~fedlabels.privacy.ledger.account_per_client`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fedlabels.privacy.accounting import LabelTally, PrivacySpent
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent
from fedlabels.privacy.events import (
    DiscreteGaussianEvent,
    DistributedDiscreteGaussianEvent,
    GNMaxEvent,
    KaryRREvent,
    LaplaceNoisyMaxEvent,
    SampledGaussianEvent,
    XorEvent,
)

#: the accountants of Gaussian and DP-SGD events when any valid bound will do (a check
#: within the target): RDP, fast; PLD is tighter but takes seconds per call
FAST_ACCOUNTANTS = ("rdp",)


def basic(parts: Sequence[PrivacySpent]) -> PrivacySpent:
    """Basic composition of (ε_i, δ_i): (Σ ε_i, Σ δ_i); one part is returned as it is."""
    used = [p for p in parts if p.accountant != "none"]
    if not used:
        return PrivacySpent(0.0, 0.0, "none")
    if len(used) == 1:
        return used[0]
    return PrivacySpent(sum(p.epsilon for p in used), sum(p.delta for p in used),
                        "basic composition of " + ", ".join(p.accountant for p in used))


def composed(parts_at: Callable[[float], list[PrivacySpent]], delta: float) -> PrivacySpent:
    """:func:`basic` of the parts ``parts_at(δ)`` gives, within ``delta`` in all: basic
    composition adds the δ's, so where k > 1 parts spend a δ each is accounted at δ / k
    (the parts that spend none, pure-ε ones, keep theirs); one kind has the whole δ."""
    parts = parts_at(delta)
    with_delta = sum(p.accountant != "none" and p.delta > 0 for p in parts)
    if with_delta > 1:
        parts = parts_at(delta / with_delta)
    return basic(parts)


def dpsgd_spent(steps: dict[tuple[float, float], int], delta: float,
                accountants: tuple[str, ...] | None = None) -> PrivacySpent:
    """DP-SGD's (ε, δ) of ``steps`` per (σ, q), the settings composed within ``delta`` by
    :func:`composed`."""
    return composed(lambda d: dpsgd_parts(steps, d, accountants), delta)


def dpsgd_parts(steps: dict[tuple[float, float], int], delta: float,
                accountants: tuple[str, ...] | None = None) -> list[PrivacySpent]:
    """DP-SGD's (ε, δ) of ``steps`` per (σ, q), one part a setting, each at ``delta``."""
    from fedlabels.privacy.dpsgd_accounting import DPSGD_ACCOUNTANTS, dpsgd_epsilon

    return [dpsgd_epsilon(s, q, n, delta, accountants or DPSGD_ACCOUNTANTS)
            for (s, q), n in sorted(steps.items())]


def client_part(event: Any, cid: int) -> Any:
    """What client ``cid`` released of ``event`` (None: nothing). A DP-SGD round names its
    clients' steps; an event of a method that names its clients says so with
    ``client_part(cid)``; any other event is a release every client made alike."""
    if isinstance(event, DPSGDRoundEvent):
        steps = tuple((c, k) for c, k in event.steps if c == cid)
        return replace(event, steps=steps) if steps else None
    part = getattr(event, "client_part", None)
    return event if part is None else part(cid)


def named_clients(event: Any) -> tuple[int, ...]:
    if isinstance(event, DPSGDRoundEvent):
        return tuple(int(c) for c, _ in event.steps)
    return tuple(int(c) for c in getattr(event, "clients", ()))


@dataclass
class _GNMaxTally:
    """The GNMax batches of one σ: their settings (the first event of each; accounting
    refuses more than one) and their queries, which ``account_gnmax``'s exact Gaussian
    composition reads (μ² adds per query)."""

    settings: dict[tuple[Any, ...], GNMaxEvent] = field(default_factory=dict)
    queries: int = 0

    def add(self, ev: GNMaxEvent, n: int = 1) -> None:
        self.settings.setdefault((ev.sigma, ev.threshold, ev.threshold_sigma), ev)
        self.queries += n * int(ev.n_queries)

    def copy(self) -> _GNMaxTally:
        return _GNMaxTally(dict(self.settings), self.queries)

    def spent(self, delta: float) -> PrivacySpent:
        from fedlabels.privacy.validation import check_delta
        from fedlabels.privacy.vote_accounting import (
            GNMAX_ACCOUNTANT,
            gnmax_exact_epsilon,
            gnmax_setting,
        )

        check_delta(delta)
        # one setting, or account_gnmax's error
        sigma, _, threshold_sigma = gnmax_setting(list(self.settings.values()))
        eps = gnmax_exact_epsilon(sigma, self.queries, delta, threshold_sigma)
        return PrivacySpent(eps, delta, GNMAX_ACCOUNTANT)


@dataclass
class Tally:
    """What accounting reads of one party's events (see the module docstring); events of
    other kinds count for nothing."""

    labels: LabelTally = field(default_factory=LabelTally)
    dpsgd: dict[tuple[float, float], int] = field(default_factory=dict)
    gauss: dict[tuple[float, float], int] = field(default_factory=dict)
    discrete: dict[tuple[float, float], int] = field(default_factory=dict)
    #: secure-aggregation DP-FedAvg releases per (σ, shares, Δ, d)
    distributed: dict[tuple[float, int, float, int], int] = field(default_factory=dict)
    gnmax: dict[float, _GNMaxTally] = field(default_factory=dict)
    laplace: dict[tuple[float, float], int] = field(default_factory=dict)

    @classmethod
    def of(cls, events: Iterable[Any]) -> Tally:
        tally = cls()
        for ev in events:
            tally.add(ev)
        return tally

    def add(self, ev: Any, n: int = 1) -> None:
        """Add ``n`` releases equal to ``ev`` at once: every total is additive over equal
        events (counts per (σ, q), (p, bits), (b, Δ₁); RDP and Σ ε summed as one by one),
        so this is ``n`` calls' tally in O(1) Python steps (a restored run of
        ``{"event": ..., "repeat": n}``, :meth:`extend_runs`)."""
        if isinstance(ev, XorEvent | KaryRREvent):
            self.labels.add(ev, n)
        elif isinstance(ev, DPSGDRoundEvent):
            key = (ev.noise_multiplier, ev.sample_rate)
            self.dpsgd[key] = self.dpsgd.get(key, 0) + n * sum(int(k) for _, k in ev.steps)
        elif isinstance(ev, SampledGaussianEvent):
            key = (ev.noise_multiplier, ev.sampling_rate)
            self.gauss[key] = self.gauss.get(key, 0) + n
        elif isinstance(ev, DiscreteGaussianEvent):
            key = (ev.noise_multiplier, ev.sampling_rate)
            self.discrete[key] = self.discrete.get(key, 0) + n
        elif isinstance(ev, DistributedDiscreteGaussianEvent):
            dkey = (ev.noise_multiplier, ev.shares, ev.sensitivity, ev.dimension)
            self.distributed[dkey] = self.distributed.get(dkey, 0) + n
        elif isinstance(ev, GNMaxEvent):
            self.gnmax.setdefault(ev.sigma, _GNMaxTally()).add(ev, n)
        elif isinstance(ev, LaplaceNoisyMaxEvent):
            key = (ev.scale, ev.l1_sensitivity)
            self.laplace[key] = self.laplace.get(key, 0) + n * ev.n_queries

    def extend_runs(self, runs: Sequence[tuple[Any, int]]) -> None:
        """Add ``runs`` of equal events ((event, how many in a row), in order)."""
        for ev, n in runs:
            self.add(ev, n)

    def extend(self, new: Sequence[Any], history: Sequence[Any]) -> None:
        """Add ``new``, released after ``history`` (the events tallied so far)."""
        for ev in new:
            self.add(ev)

    def copy(self) -> Tally:
        return Tally(self.labels.copy(), dict(self.dpsgd), dict(self.gauss), dict(self.discrete),
                     dict(self.distributed), {s: g.copy() for s, g in self.gnmax.items()},
                     dict(self.laplace))

    def fewer_than(self, other: Tally) -> bool:
        """Whether every release tallied here is one ``other`` tallies at least as often, with
        the same noise (per (σ, q), (σ, shares, Δ, d), (b, Δ₁)): fewer of the same
        mechanisms spend no more (their transcript is post-processing of the larger one's),
        so any valid bound on ``other`` bounds these. Label releases and GNMax batches are
        not compared (False where any is tallied here)."""
        if self.labels.count or self.gnmax:
            return False
        pairs: tuple[tuple[dict[Any, int], dict[Any, int]], ...] = (
            (self.dpsgd, other.dpsgd), (self.gauss, other.gauss),
            (self.discrete, other.discrete), (self.distributed, other.distributed),
            (self.laplace, other.laplace))
        return all(n <= theirs.get(key, 0) for mine, theirs in pairs for key, n in mine.items())

    def labels_only(self) -> bool:
        """Whether the events tallied are label releases only (or none)."""
        return not (self.dpsgd or self.gauss or self.discrete or self.distributed
                    or self.gnmax or self.laplace)

    def within(self, limit: float, delta: float,
               gaussian_accountants: tuple[str, ...] | None = None) -> bool:
        """Whether the events tallied are within ``limit``: the fast bound's ε or the tight
        one's is at most ``limit`` (a check's decision, ``Ledger.check(tight=False)``).
        Label releases alone (DP-FedCT's) are decided without computing ε
        (:func:`~fedlabels.privacy.accounting.label_tally_within`); any other kind by the
        ε of :meth:`spent`."""
        from fedlabels.privacy.accounting import label_tally_within

        if self.labels_only():
            return label_tally_within(self.labels, limit, delta)
        return any(self.spent(delta, gaussian_accountants, fast).epsilon <= limit
                   for fast in (True, False))

    def spent(self, delta: float, gaussian_accountants: tuple[str, ...] | None = None,
              fast: bool = False) -> PrivacySpent:
        """(ε, δ) of the events tallied: each kind (each setting of DP-SGD and Gaussian
        releases) with its own accountant, composed within ``delta`` by :func:`composed`."""
        return composed(lambda d: self.parts(d, gaussian_accountants, fast), delta)

    def parts(self, delta: float, gaussian_accountants: tuple[str, ...] | None = None,
              fast: bool = False) -> list[PrivacySpent]:
        """The (ε, δ) of each kind (each setting) of the events tallied, each at ``delta``."""
        from fedlabels.privacy.accounting import (
            account_label_tally,
            default_gaussian_accountants,
            tightest_gaussian,
        )
        from fedlabels.privacy.discrete_accounting import discrete_gaussian_spent
        from fedlabels.privacy.distributed_discrete import distributed_discrete_spent
        from fedlabels.privacy.validation import check_delta
        from fedlabels.privacy.vote_accounting import account_laplace

        if fast:
            gaussian_accountants = FAST_ACCOUNTANTS
        parts = []
        if self.labels.count:
            parts.append(account_label_tally(self.labels, delta))
        if self.dpsgd:
            parts.extend(dpsgd_parts(self.dpsgd, delta, FAST_ACCOUNTANTS if fast else None))
        for (sigma, q), n in sorted(self.gauss.items()):
            check_delta(delta)
            parts.append(tightest_gaussian(sigma, q, n, delta, gaussian_accountants
                                           or default_gaussian_accountants(q)))
        for (sigma, q), n in sorted(self.discrete.items()):
            # RDP only, whatever the continuous Gaussian's accountants (discrete_accounting)
            parts.append(discrete_gaussian_spent(sigma, q, n, delta))
        for (sigma, shares, sens, dim), n in sorted(self.distributed.items()):
            parts.append(distributed_discrete_spent(sigma, shares, sens, dim, n, delta))
        for sigma in sorted(self.gnmax):
            parts.append(self.gnmax[sigma].spent(delta))
        for (scale, l1), n in sorted(self.laplace.items()):
            acc = account_laplace([LaplaceNoisyMaxEvent(scale, l1, n)], delta)
            parts.append(PrivacySpent(acc.epsilon, acc.delta, acc.accountant))
        return parts


@dataclass
class ClientTallies:
    """A server's ledger of its clients' releases as running totals: a :class:`Tally` of
    what each named client released (an event that names no clients counts for every
    client), and of every event (the ledger as one party's, while none names a client)."""

    whole: Tally = field(default_factory=Tally)
    clients: dict[int, Tally] = field(default_factory=dict)

    def extend(self, new: Sequence[Any], history: Sequence[Any]) -> None:
        """Add ``new``, released after ``history``. A client named for the first time gets
        its part of ``history`` tallied once (O(the events so far), once a client)."""
        for i, ev in enumerate(new):
            for cid in named_clients(ev):
                if cid not in self.clients:
                    before = [*history, *new[:i]]
                    self.clients[cid] = Tally.of(p for prev in before
                                                 if (p := client_part(prev, cid)) is not None)
            self.whole.add(ev)
            for cid, tally in self.clients.items():
                part = client_part(ev, cid)
                if part is not None:
                    tally.add(part)

    def extend_runs(self, runs: Sequence[tuple[Any, int]]) -> None:
        """:meth:`extend` of the events of ``runs`` ((event, how many in a row)) onto an
        empty tally, each run added at once."""
        for i, (ev, n) in enumerate(runs):
            for cid in named_clients(ev):
                if cid not in self.clients:
                    self.clients[cid] = tally = Tally()
                    for prev, m in runs[:i]:
                        if (p := client_part(prev, cid)) is not None:
                            tally.add(p, m)
            self.whole.add(ev, n)
            for cid, tally in self.clients.items():
                part = client_part(ev, cid)
                if part is not None:
                    tally.add(part, n)

    def copy(self) -> ClientTallies:
        return ClientTallies(self.whole.copy(), {c: t.copy() for c, t in self.clients.items()})

    def per_client(self, delta: float, gaussian_accountants: tuple[str, ...] | None = None,
                   fast: bool = False) -> tuple[PrivacySpent, dict[int, PrivacySpent]]:
        """Every client's (ε, δ) over the events tallied, and the worst one (without any
        client named: the events as one party's, and no client's)."""
        if not self.clients:
            return self.whole.spent(delta, gaussian_accountants, fast), {}
        per_client = {cid: self.clients[cid].spent(delta, gaussian_accountants, fast)
                      for cid in sorted(self.clients)}
        return max(per_client.values(), key=lambda s: s.epsilon), per_client

    def spent(self, delta: float, gaussian_accountants: tuple[str, ...] | None = None,
              fast: bool = False) -> PrivacySpent:
        return self.per_client(delta, gaussian_accountants, fast)[0]

    def labels_only(self) -> bool:
        return self.whole.labels_only()  # (the whole tallies every event)

    def within(self, limit: float, delta: float,
               gaussian_accountants: tuple[str, ...] | None = None) -> bool:
        """:meth:`Tally.within` of the worst client (every client's label releases within
        ``limit``, decided client by client; other kinds by the worst client's ε)."""
        parties = list(self.clients.values()) or [self.whole]
        if all(t.labels_only() for t in parties):
            return all(t.within(limit, delta, gaussian_accountants) for t in parties)
        return any(self.spent(delta, gaussian_accountants, fast).epsilon <= limit
                   for fast in (True, False))


def parties(tally: Tally | ClientTallies) -> list[Tally]:
    """The tallies whose worst ε is ``tally``'s: itself, or a server's per client (without
    any client named: the whole, as :meth:`ClientTallies.per_client` accounts it)."""
    if isinstance(tally, Tally):
        return [tally]
    return list(tally.clients.values()) or [tally.whole]


__all__ = ["FAST_ACCOUNTANTS", "ClientTallies", "Tally", "basic", "client_part", "composed",
           "dpsgd_parts", "dpsgd_spent", "named_clients", "parties"]
