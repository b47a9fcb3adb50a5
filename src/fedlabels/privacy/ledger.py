"""One party's privacy ledger: each release recorded once as an event, one accountant over them.

A :class:`Ledger` holds the events of :mod:`fedlabels.privacy.events` (and DP-SGD's
:class:`~fedlabels.privacy.dpsgd_accounting.DPSGDRoundEvent`) a party released, in order.
What the party spent is :func:`account_events` of them, and its budget is a view of the same
list: :meth:`Ledger.record` accounts the events *with* the new ones and refuses, before the
release happens, when that would exceed the target. Nothing else counts releases. A ledger
keeps what that accounting reads of its events as running totals
(:mod:`fedlabels.privacy.tally`), so a check does not walk every release again.

Clients and DP servers each keep one. A server's ledger holds its clients' releases and
accounts them per client (:func:`account_per_client`: an event that names clients counts for
those, one that names none for every client; ε is the worst client's).

Events of different kinds (a site that took part in an XOR run and a DP-SGD run on the same
data) compose by basic composition of the per-kind (ε, δ): sound for any order, tight when
one kind is used, which is every single run. Where k kinds (or settings) each spend a δ,
each is accounted at δ / k, so the ledger's δ holds in all
(:func:`~fedlabels.privacy.tally.composed`).

:func:`events_to_json` / :func:`events_from_json` write events as plain JSON (the client
state and the site ledger's file format): never pickle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, NoReturn

from fedlabels.core.errors import BudgetRefusal, FedLabelsError
from fedlabels.privacy.accounting import PrivacySpent
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
from fedlabels.privacy.tally import ClientTallies, Tally, parties

#: relative slack for the numerical error of a calibration (bisection / root finding)
REL_TOL = 1e-6

EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    XorEvent, KaryRREvent, SampledGaussianEvent, DiscreteGaussianEvent,
    DistributedDiscreteGaussianEvent, GNMaxEvent, LaplaceNoisyMaxEvent, DPSGDRoundEvent)}


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def event_to_dict(event: Any) -> dict[str, Any]:
    name = type(event).__name__
    if name not in EVENT_TYPES:
        raise FedLabelsError(f"{name} is not a privacy event; known: {', '.join(EVENT_TYPES)}.")
    return {"type": name, **asdict(event)}


def event_from_dict(data: dict[str, Any]) -> Any:
    cls = EVENT_TYPES.get(str(data.get("type")))
    if cls is None:
        raise FedLabelsError(f"unknown privacy event type {data.get('type')!r}; known: "
                             f"{', '.join(EVENT_TYPES)}.")
    names = {f.name for f in fields(cls)}
    return cls(**{k: _tuples(v) for k, v in data.items() if k in names})


def _event_json(event: Any) -> str:
    """One event as :func:`events_to_json` writes it in its list."""
    return json.dumps(event_to_dict(event), sort_keys=True)


def events_to_json(events: Iterable[Any]) -> str:
    return json.dumps([event_to_dict(ev) for ev in events], sort_keys=True)


#: the most events one encoded list may expand to (a repeat count beyond it is refused)
MAX_EVENTS = 10**8


def events_from_json(text: str) -> list[Any]:
    """The events of :func:`events_to_json`'s or :meth:`Ledger.events_json`'s text (the
    latter writes a run of equal events as ``{"event": ..., "repeat": n}``, n >= 2; the run
    comes back as one event object, n times)."""
    return _expand(_event_runs(text))


def _expand(runs: Sequence[tuple[Any, int]]) -> list[Any]:
    out: list[Any] = []
    for event, count in runs:
        out.extend([event] * count)
    return out


def _event_runs(text: str) -> list[tuple[Any, int]]:
    """(event, how many in a row) of an encoded list; a bad repeat is refused."""
    items = json.loads(text)
    if not isinstance(items, list):
        raise FedLabelsError("a ledger's events must be a JSON list.")
    runs: list[tuple[Any, int]] = []
    total = 0
    for item in items:
        count = 1
        if isinstance(item, dict) and "repeat" in item:
            count = item["repeat"]
            if set(item) != {"event", "repeat"} or isinstance(count, bool) \
                    or not isinstance(count, int) or count < 2:
                raise FedLabelsError(f"a ledger's repeated event must be {{\"event\": ..., "
                                     f"\"repeat\": n}} with a whole n >= 2; got "
                                     f"{str(item)[:80]}.")
            item = item["event"]
        if not isinstance(item, dict):
            raise FedLabelsError(f"a ledger's event must be a JSON object; got "
                                 f"{str(item)[:80]}.")
        total += count
        if total > MAX_EVENTS:
            raise FedLabelsError(f"a ledger's events expand to more than {MAX_EVENTS:,}; "
                                 "refusing it.")
        runs.append((event_from_dict(item), count))
    return runs


def _runs_json(runs: Sequence[list[Any]]) -> str:
    """The JSON list of ``runs`` (``[event's JSON text, how many in a row]``), a run of more
    than one as ``{"event": ..., "repeat": n}``."""
    return "[" + ", ".join(text if count == 1 else f'{{"event": {text}, "repeat": {count}}}'
                           for text, count in runs) + "]"


def _add_run(runs: list[list[Any]], text: str, count: int = 1) -> None:
    """Append ``count`` events of JSON ``text`` to ``runs``, extending the last run where
    it is the same event."""
    if runs and runs[-1][0] == text:
        runs[-1][1] += count
    else:
        runs.append([text, count])


def _cut_runs(runs: list[list[Any]], total: int, keep: int) -> None:
    """Cut ``runs`` (``total`` events) to their first ``keep`` events, in place."""
    while runs and total - runs[-1][1] >= keep:
        total -= runs.pop()[1]
    if runs and total > keep:
        runs[-1][1] -= total - keep


def account_events(events: Sequence[Any], delta: float,
                   gaussian_accountants: tuple[str, ...] | None = None,
                   fast: bool = False) -> PrivacySpent:
    """(ε, δ) of one party's events: each kind with its own accountant, kinds composed
    (:class:`~fedlabels.privacy.tally.Tally`, which a ledger also keeps running).

    ``gaussian_accountants``: the accountants of sampled-Gaussian events (None: the
    defaults of :func:`~fedlabels.privacy.accounting.account_gaussian`); ``fast``: Gaussian
    and DP-SGD events by :data:`~fedlabels.privacy.tally.FAST_ACCOUNTANTS` only (a valid
    bound, maybe not the tightest)."""
    return Tally.of(events).spent(delta, gaussian_accountants, fast)


def account_per_client(events: Sequence[Any], delta: float,
                       gaussian_accountants: tuple[str, ...] | None = None, fast: bool = False
                       ) -> tuple[PrivacySpent, dict[int, PrivacySpent]]:
    """A server's ledger: every client's (ε, δ) over what it released, and the worst one
    (:class:`~fedlabels.privacy.tally.ClientTallies`).

    A release that names no clients counts for every client; without any client named the
    ledger is accounted as one party's."""
    tallies = ClientTallies()
    tallies.extend(list(events), [])
    return tallies.per_client(delta, gaussian_accountants, fast)


#: a budget the server keeps (it adds the noise, or the guarantee is not against it)
SERVER_ENFORCES = ("the server checks spent + next release <= target before every release "
                   "and stops the run otherwise")


@dataclass
class Ledger:
    """One party's releases and what they spent; the budget is a view of the same events.

    ``target``: the ε the party will not exceed (None: recorded, not limited); ``delta``:
    the δ every ε of this ledger is stated at. ``per_client``: a server's ledger of its
    clients' releases, whose ε is the worst client's (:func:`account_per_client`);
    ``gaussian_accountants``: see :func:`account_events`; ``calibrated_by``: the accountant
    that calibrated the party's noise to its target, or ``given`` where its options gave σ
    (:data:`~fedlabels.privacy.gaussian_calibration.SIGMA_GIVEN`; None: neither stated),
    stated in :meth:`to_dict` and :meth:`target_view`."""

    delta: float
    target: float | None = None
    events: list[Any] = field(default_factory=list)
    what: str = "this party"
    per_client: bool = False
    gaussian_accountants: tuple[str, ...] | None = None
    calibrated_by: str | None = None
    #: the events encoded so far and their JSON, in order (:meth:`events_json`)
    _encoded: list[Any] = field(default_factory=list, init=False, repr=False,
                                            compare=False)
    #: the running totals of :attr:`events` (:meth:`_tally`): the tally, the list it counts,
    #: how many of its events and the last of them
    _tallied: tuple[Tally | ClientTallies, list[Any], int, Any] | None = field(
        default=None, init=False, repr=False, compare=False)
    #: the parties' tallies of the plan :meth:`check_plan` found within the target, and its
    #: bound (:meth:`_within_plan`)
    _plan: tuple[list[Tally], PrivacySpent] | None = field(default=None, init=False,
                                                           repr=False, compare=False)
    #: the events of the last plan :meth:`check_plan` was given, and what they are
    #: (``"5 round(s)"``); None: no plan given
    planned: tuple[list[Any], str] | None = field(default=None, init=False, repr=False,
                                                  compare=False)

    def account(self, events: Sequence[Any], fast: bool = False) -> PrivacySpent:
        """What ``events`` spend under this ledger's accountant (``fast``: a valid bound by
        the fast accountants, see :func:`account_events`)."""
        if self.per_client:
            return account_per_client(events, self.delta, self.gaussian_accountants,
                                      fast)[0]
        return account_events(events, self.delta, self.gaussian_accountants, fast)

    def spent(self) -> PrivacySpent:
        return self._tally().spent(self.delta, self.gaussian_accountants)

    def _tally(self) -> Tally | ClientTallies:
        """The running totals of :attr:`events` (:mod:`fedlabels.privacy.tally`), so a
        check costs the same at release 3,000 as at release 10: kept by :meth:`record`,
        added to where the list grew otherwise, and counted again from the start where it
        was replaced or changed (a restored state)."""
        events, kept = self.events, self._tallied
        if kept is not None and kept[1] is events and kept[2] <= len(events) \
                and (kept[2] == 0 or events[kept[2] - 1] is kept[3]):
            tally, n = kept[0], kept[2]
        else:
            tally, n = (ClientTallies() if self.per_client else Tally()), 0
        if n < len(events):
            tally.extend(events[n:], events[:n])
        self._tallied = (tally, events, len(events), events[-1] if events else None)
        return tally

    def _bound_of(self, tally: Tally | ClientTallies, tight: bool) -> PrivacySpent:
        """The tight (ε, δ) of ``tally``; with ``tight`` False the fast bound when it is
        within the target or there is none (the tight one decides when the fast one does
        not fit)."""
        if not tight:
            fast = tally.spent(self.delta, self.gaussian_accountants, True)
            if self.target is None or fast.epsilon <= self.target * (1.0 + REL_TOL):
                return fast
        return tally.spent(self.delta, self.gaussian_accountants, False)

    def check_plan(self, planned: Sequence[Any], what: str) -> None:
        """Refuse to start when the ``planned`` events (``what``: e.g. "5 round(s)") would
        already exceed the target. The plan is kept (:attr:`planned`) for a dry run's
        statement (:func:`fedlabels.runs.budget_plan.privacy_plan`)."""
        self.planned = (list(planned), what)
        if self.target is None:
            return
        tally = ClientTallies() if self.per_client else Tally()
        tally.extend(list(planned), [])
        after = self._bound_of(tally, tight=False)
        if after.epsilon > self.target * (1.0 + REL_TOL):
            raise FedLabelsError(
                f"privacy budget exceeded: the plan of {what} would spend ε = "
                f"{after.epsilon:.6g} (δ = {self.delta:g}) > {self.what}'s budget ε = "
                f"{self.target:.6g}. Refusing to start; plan fewer releases or more noise.")
        self._plan = (parties(tally), after)

    def _within_plan(self, tally: Tally | ClientTallies) -> PrivacySpent | None:
        """The plan's bound where every party of ``tally`` released fewer of the same
        mechanisms than one of the plan :meth:`check_plan` found within the target (a valid
        bound of theirs, within it: :meth:`Tally.fewer_than`); None otherwise. So a server
        with PLD's σ, whose RDP bound is above the target in its last planned rounds,
        checks them without a PLD of each (docs/privacy.md §4, "DP-FedAvg")."""
        if self._plan is None or self.target is None:
            return None
        plan, bound = self._plan
        if bound.epsilon > self.target * (1.0 + REL_TOL) or bound.delta > self.delta:
            return None
        if all(any(mine.fewer_than(theirs) for theirs in plan) for mine in parties(tally)):
            return bound
        return None

    def check(self, new: Sequence[Any], tight: bool = True) -> PrivacySpent:
        """What the ledger would spend with ``new`` added; refuse it beyond the target.
        ``tight`` False: a check that needs only a bound within the target (a server's, a
        client's); the same decision, and the plan's bound returned where the plan covers
        the events (:meth:`_within_plan`), else the fast bound where it is within.
        Accounted from the running totals plus ``new``: the same (ε, δ) as accounting every
        event again (:meth:`account`), in O(the distinct kinds of event)."""
        return self._checked(new, tight)[0]

    def _checked(self, new: Sequence[Any],
                 tight: bool) -> tuple[PrivacySpent, Tally | ClientTallies]:
        tally = self._with(new)
        return self._bound_within(tally, tight), tally

    def _bound_within(self, tally: Tally | ClientTallies, tight: bool) -> PrivacySpent:
        """The bound of ``tally`` (:meth:`_bound_of`; with ``tight`` False the plan's where
        it covers ``tally``, :meth:`_within_plan`), refused beyond the target."""
        if not tight and (planned := self._within_plan(tally)) is not None:
            return planned
        after = self._bound_of(tally, tight)
        if self.target is not None and after.epsilon > self.target * (1.0 + REL_TOL):
            self._refuse(after)
        return after

    def _with(self, new: Sequence[Any]) -> Tally | ClientTallies:
        """The running totals with ``new`` added (a copy: the ledger's own are unchanged)."""
        tally = self._tally().copy()
        tally.extend(list(new), self.events)
        return tally

    def _refuse(self, after: PrivacySpent) -> NoReturn:
        before = self.spent().epsilon
        raise BudgetRefusal(
            f"privacy budget exceeded: {self.what} has spent ε = {before:.6g} over "
            f"{len(self.events)} release(s); the next would bring it to ε = "
            f"{after.epsilon:.6g} (δ = {self.delta:g}) > its budget ε = "
            f"{self.target:.6g}. Refusing the release.")

    def _admitted(self, new: Sequence[Any]) -> Tally | ClientTallies:
        tally = self._with(new)
        if not tally.labels_only():  # accounted as check(tight=False) does (it may refuse
            self._bound_within(tally, tight=False)  # the kinds' mix itself)
        elif self.target is not None and not tally.within(
                self.target * (1.0 + REL_TOL), self.delta, self.gaussian_accountants):
            self._bound_within(tally, tight=False)  # the refusal, with its ε
        return tally

    def admit(self, new: Sequence[Any]) -> None:
        """Refuse ``new`` where :meth:`check` with ``tight=False`` does (the same decision,
        the same message). Where the ledger holds label releases only (DP-FedCT's xor and
        kary), no ε is computed unless it refuses: without a target nothing is, with one
        the check asks whether the releases stay within it
        (:meth:`~fedlabels.privacy.tally.Tally.within`: one or two evaluations of the
        exact accountant's δ(ε), not its ~40-step bisection for ε). A DP run checks before
        every round; its ε is computed where it is asked (:meth:`spent`)."""
        self._admitted(new)

    def add(self, *new: Any) -> None:
        """Record ``new`` events before they are released, refused where :meth:`admit`
        refuses them (what :meth:`record` with ``tight=False`` does, without its ε)."""
        self._keep(new, self._admitted(new))

    def record(self, *new: Any, tight: bool = True) -> PrivacySpent:
        """Record ``new`` events before they are released (refused beyond the target)."""
        after, tally = self._checked(new, tight)
        self._keep(new, tally)
        return after

    def _keep(self, new: Sequence[Any], tally: Tally | ClientTallies) -> None:
        self.events.extend(new)
        events = self.events
        self._tallied = (tally, events, len(events), events[-1] if events else None)

    def to_dict(self) -> dict[str, Any]:
        calibrated = {} if self.calibrated_by is None else {"calibrated_by": self.calibrated_by}
        return {**self.spent().to_dict(), "target": self.target, "releases": len(self.events),
                **calibrated}

    def events_json(self) -> str:
        """:attr:`events` as JSON, each event encoded once, and a run of equal events in a
        row as one ``{"event": ..., "repeat": n}`` (:func:`events_from_json` reads both):
        a client's state holds its ledger, and a DP run checkpoints every round (the
        simulator) or stores the state after every message (a Flower site, which builds
        its role afresh for each one), so encoding the whole ledger again each time cost
        O(T), and the text itself grew by one event a round (about 360 bytes for DP-FedCT)
        where every round releases the same event. Events are frozen: an element is
        encoded again only where the list no longer holds the object encoded there."""
        from fedlabels.core.json_list import kept

        done, events = self._encoded, self.events
        if not done:
            done[:] = [[], []]  # the events encoded, and their JSON as runs
        objects, runs = done
        keep = kept(events, done)  # compared in C: no Python loop over the history
        _cut_runs(runs, len(objects), keep)
        del objects[keep:]
        new = events[keep:]
        objects.extend(new)
        for event in new:
            _add_run(runs, _event_json(event))
        return _runs_json(runs)

    def restore_json(self, text: str) -> None:
        """Set :attr:`events` to those of ``text`` (:meth:`events_json`), each run of equal
        events decoded and kept encoded once (a role restored for every message does not
        encode its whole ledger again)."""
        runs = _event_runs(text)
        self.restore_runs(runs)
        merged: list[list[Any]] = []  # equal runs in a row (an older text) become one
        for event, count in runs:
            _add_run(merged, _event_json(event), count)
        self._encoded[:] = [list(self.events), merged]

    def restore_runs(self, runs: Sequence[tuple[Any, int]]) -> None:
        """Set :attr:`events` to ``runs`` ((event, how many in a row), in order), their
        running totals counted a run at a time: O(runs), not O(events)."""
        self.events[:] = _expand(runs)
        tally = ClientTallies() if self.per_client else Tally()
        tally.extend_runs(runs)
        self._tallied = (tally, self.events, len(self.events),
                         self.events[-1] if self.events else None)

    def target_view(self, unit: str, planned: int, released: int,
                    enforced: str = SERVER_ENFORCES) -> dict[str, Any] | None:
        """A result's ``privacy.target``: the budget as a view of this ledger (None: no
        target), ``released`` of ``planned`` units (``unit``: round, query) so far;
        ``enforced`` says who keeps the releases within it."""
        if self.target is None:
            return None
        calibrated = {} if self.calibrated_by is None else {"calibrated_by": self.calibrated_by}
        return {"epsilon": self.target, "delta": self.delta, "unit": unit, "planned": planned,
                "released": released, "accountant": self.spent().accountant,
                **calibrated, "enforced": enforced}


class LedgerEvents:
    """A role whose privacy state is its ``ledger``: ``events`` (the attribute its state
    names) are the ledger's own list, so a checkpoint stores and restores them."""

    ledger: Ledger

    @property
    def events(self) -> list[Any]:
        return self.ledger.events

    @events.setter
    def events(self, events: list[Any]) -> None:
        self.ledger.events = list(events)
