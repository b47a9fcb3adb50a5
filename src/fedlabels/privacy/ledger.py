"""One party's privacy ledger: each release recorded once as an event, one accountant over them.

A :class:`Ledger` holds the events of :mod:`fedlabels.privacy.events` (and DP-SGD's
:class:`~fedlabels.privacy.dpsgd_accounting.DPSGDRoundEvent`) a party released, in order.
What the party spent is :func:`account_events` of them, and its budget is a view of the same
list: :meth:`Ledger.record` accounts the events *with* the new ones and refuses, before the
release happens, when that would exceed the target. Nothing else counts releases.

Events of different kinds (a site that took part in an XOR run and a DP-SGD run on the same
data) compose by basic composition of the per-kind (ε, δ): sound for any order, tight when
one kind is used, which is every single run.

:func:`events_to_json` / :func:`events_from_json` write events as plain JSON (the client
state and the site ledger's file format): never pickle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.privacy.accounting import PrivacySpent
from fedlabels.privacy.dpsgd_accounting import DPSGDRoundEvent
from fedlabels.privacy.events import (
    GNMaxEvent,
    KaryRREvent,
    LaplaceNoisyMaxEvent,
    SampledGaussianEvent,
    XorEvent,
)

#: relative slack for the numerical error of a calibration (bisection / root finding)
REL_TOL = 1e-6

EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    XorEvent, KaryRREvent, SampledGaussianEvent, GNMaxEvent, LaplaceNoisyMaxEvent,
    DPSGDRoundEvent)}


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


def events_to_json(events: Iterable[Any]) -> str:
    return json.dumps([event_to_dict(ev) for ev in events], sort_keys=True)


def events_from_json(text: str) -> list[Any]:
    return [event_from_dict(d) for d in json.loads(text)]


def _dpsgd_spent(events: Sequence[DPSGDRoundEvent], delta: float) -> PrivacySpent:
    from fedlabels.privacy.dpsgd_accounting import dpsgd_epsilon

    steps: dict[tuple[float, float], int] = {}
    for ev in events:
        key = (ev.noise_multiplier, ev.sample_rate)
        steps[key] = steps.get(key, 0) + sum(int(k) for _, k in ev.steps)
    parts = [dpsgd_epsilon(s, q, n, delta) for (s, q), n in sorted(steps.items())]
    return _basic(parts)


def _basic(parts: Sequence[PrivacySpent]) -> PrivacySpent:
    """Basic composition of (ε_i, δ_i): (Σ ε_i, Σ δ_i); one part is returned as it is."""
    used = [p for p in parts if p.accountant != "none"]
    if not used:
        return PrivacySpent(0.0, 0.0, "none")
    if len(used) == 1:
        return used[0]
    return PrivacySpent(sum(p.epsilon for p in used), sum(p.delta for p in used),
                        "basic composition of " + ", ".join(p.accountant for p in used))


def account_events(events: Sequence[Any], delta: float) -> PrivacySpent:
    """(ε, δ) of one party's events: each kind with its own accountant, kinds composed."""
    from fedlabels.privacy.accounting import account_gaussian, account_labels
    from fedlabels.privacy.vote_accounting import account_gnmax, account_laplace

    labels = [ev for ev in events if isinstance(ev, XorEvent | KaryRREvent)]
    dpsgd = [ev for ev in events if isinstance(ev, DPSGDRoundEvent)]
    gauss = [ev for ev in events if isinstance(ev, SampledGaussianEvent)]
    gnmax = [ev for ev in events if isinstance(ev, GNMaxEvent)]
    laplace = [ev for ev in events if isinstance(ev, LaplaceNoisyMaxEvent)]
    parts = []
    if labels:
        parts.append(account_labels(labels, delta))
    if dpsgd:
        parts.append(_dpsgd_spent(dpsgd, delta))
    for key in sorted({(ev.noise_multiplier, ev.sampling_rate) for ev in gauss}):
        parts.append(account_gaussian(
            [ev for ev in gauss if (ev.noise_multiplier, ev.sampling_rate) == key], delta))
    for sigma in sorted({ev.sigma for ev in gnmax}):
        acc = account_gnmax([ev for ev in gnmax if ev.sigma == sigma], delta, with_pld=False)
        parts.append(PrivacySpent(acc.epsilon, delta, "rdp"))
    for key in sorted({(ev.scale, ev.l1_sensitivity) for ev in laplace}):
        acc_l = account_laplace([ev for ev in laplace
                                 if (ev.scale, ev.l1_sensitivity) == key], delta)
        parts.append(PrivacySpent(acc_l.epsilon, acc_l.delta, acc_l.accountant))
    return _basic(parts)


@dataclass
class Ledger:
    """One party's releases and what they spent; the budget is a view of the same events.

    ``target``: the ε the party will not exceed (None: recorded, not limited); ``delta``:
    the δ every ε of this ledger is stated at."""

    delta: float
    target: float | None = None
    events: list[Any] = field(default_factory=list)
    what: str = "this party"

    def spent(self) -> PrivacySpent:
        return account_events(self.events, self.delta)

    def check(self, new: Sequence[Any]) -> PrivacySpent:
        """What the ledger would spend with ``new`` added; refuse it beyond the target."""
        after = account_events([*self.events, *new], self.delta)
        if self.target is not None and after.epsilon > self.target * (1.0 + REL_TOL):
            before = self.spent().epsilon
            raise FedLabelsError(
                f"privacy budget exceeded: {self.what} has spent ε = {before:.6g} over "
                f"{len(self.events)} release(s); the next would bring it to ε = "
                f"{after.epsilon:.6g} (δ = {self.delta:g}) > its budget ε = "
                f"{self.target:.6g}. Refusing the release.")
        return after

    def record(self, *new: Any) -> PrivacySpent:
        """Record ``new`` events before they are released (refused beyond the target)."""
        after = self.check(new)
        self.events.extend(new)
        return after

    def to_dict(self) -> dict[str, Any]:
        return {**self.spent().to_dict(), "target": self.target, "releases": len(self.events)}
