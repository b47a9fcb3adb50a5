"""A deviating server, for any registered method, in the simulator and over the Flower grid.

An honest run records what every client is sent (its *trace*) and what each client's
mechanisms did (:class:`NoiseSpy`: every noise draw a client makes, with its parameter and
how much it released, and every answer computed on private data without noise). The
harness then drives fresh client roles with the trace changed as a server that does not
follow the protocol would change it (:data:`DEVIATIONS`: lowered noise, replays, extra
rounds, reordering, unplanned message kinds, local step counts it did not plan). The
assertion is the same for every method and every deviation (:func:`check_within_plan`): a
client never releases more than in the honest run — which is its own plan — and never with
less noise than in the honest run, whose noise the server calibrated from the same options
the client holds.

A message a client refuses may raise; the harness only looks at what the client released.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.method.base import ClientRole

#: noise parameters that a server might lower, with the least-noise value it could ask for
LEAST_NOISE: dict[str, Any] = {
    "flip_probability": 0.0, "epsilon_per_label": 1e3, "vote_sigma": 0.0,
    "noise_multiplier": 0.0, "example_clip": 1e6, "example_rate": 1.0, "clip": 1e6,
    "teachers": 1, "data_dependent": True, "subset_size": 10**6,
    "grid": 1e6, "noise": "continuous", "aggregation": "plain",
}
#: parameters where a larger value means more noise (the others: smaller is noisier)
NOISIER_ABOVE = {"flip_probability", "vote_sigma", "noise_multiplier", "discrete_share_sigma"}
#: a request that computes on private data without noise (DP-FedCT's sensitivity estimate);
#: its steps, neighbours, relation and model are the contract cases' (period 2,
#: sensitivity_neighbours 3, the defaults), the clients' own (another is refused)
SENSITIVITY_REQUEST = Message("dpfedct.sensitivity", category="control", config={
    "neighbours": 3, "relation": "both", "steps": 2, "model": ""})


@dataclass
class Draw:
    """One noisy release by a client: the noise parameter, its value, what it released."""

    cid: int
    parameter: str
    value: float
    amount: int  # releases (xor, kary), labels (GNMax) or DP-SGD steps


@dataclass
class NoiseSpy:
    """Records every noise draw and every noiseless answer made inside a client's handler."""

    draws: list[Draw] = field(default_factory=list)
    noiseless: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    active: list[int] = field(default_factory=list)  # the client handling a message now

    def record(self, parameter: str, value: float, amount: int) -> None:
        if self.active:
            self.draws.append(Draw(self.active[-1], parameter, float(value), int(amount)))

    def totals(self) -> dict[tuple[int, str], int]:
        out: dict[tuple[int, str], int] = defaultdict(int)
        for d in self.draws:
            out[(d.cid, d.parameter)] += d.amount
        return dict(out)

    def least_noise(self) -> dict[tuple[int, str], float]:
        out: dict[tuple[int, str], float] = {}
        for d in self.draws:
            key = (d.cid, d.parameter)
            noisier = (min if d.parameter in NOISIER_ABOVE else max)
            out[key] = noisier(out.get(key, d.value), d.value) if key in out else d.value
        return out


@contextlib.contextmanager
def spying(monkeypatch: Any) -> Iterator[NoiseSpy]:
    """Install a :class:`NoiseSpy` on the mechanisms clients draw noise with."""
    import fedlabels.learners.dpsgd as dpsgd
    import fedlabels.methods.fedct.sensitivity as sens
    import fedlabels.privacy.discrete_gaussian as dg
    import fedlabels.privacy.gnmax as gnmax
    import fedlabels.privacy.mechanisms as mech

    spy = NoiseSpy()
    real = {"xor": mech.xor_release, "kary": mech.kary_release, "gnmax": gnmax.gnmax_aggregate,
            "dpsgd": dpsgd.dpsgd_steps, "sens": sens.empirical_sensitivity,
            "share": dg.sample_discrete_gaussian, "handle": ClientRole.handle}

    def xor_release(bits: Any, f: float, rng: Any) -> Any:
        spy.record("flip_probability", min(f, 1.0 - f), 1)
        return real["xor"](bits, f, rng)

    def kary_release(labels: Any, eps: float, k: int, rng: Any) -> Any:
        spy.record("epsilon_per_label", abs(eps), 1)
        return real["kary"](labels, eps, k, rng)

    def gnmax_aggregate(counts: Any, sigma: float, rng: Any, *a: Any, **kw: Any) -> Any:
        spy.record("vote_sigma", sigma, len(counts))
        return real["gnmax"](counts, sigma, rng, *a, **kw)

    def dpsgd_steps(mlp: Any, X: Any, y: Any, n_steps: int, config: Any, *a: Any,
                    **kw: Any) -> int:
        taken = int(real["dpsgd"](mlp, X, y, n_steps, config, *a, **kw))
        # the steps run (a negative count runs none), not the count returned
        spy.record("noise_multiplier", config.noise_multiplier, max(int(n_steps), 0))
        spy.record("example_clip", config.clip, 0)
        spy.record("example_rate", config.sample_rate, 0)
        return taken

    def sample_discrete_gaussian(sigma: float, size: int, rng: Any) -> Any:
        # a client's own discrete Gaussian share (DP-FedAvg aggregation secure); the
        # server's draws are not a client's (no client is handling a message then)
        spy.record("discrete_share_sigma", sigma, 1)
        return real["share"](sigma, size, rng)

    def empirical_sensitivity(*a: Any, **kw: Any) -> Any:
        if spy.active:
            spy.noiseless[spy.active[-1]] += 1
        return real["sens"](*a, **kw)

    def handle(role: ClientRole, message: Message) -> Message:
        spy.active.append(role.cid)
        try:
            return real["handle"](role, message)
        finally:
            spy.active.pop()

    monkeypatch.setattr(mech, "xor_release", xor_release)
    monkeypatch.setattr(mech, "kary_release", kary_release)
    monkeypatch.setattr(gnmax, "gnmax_aggregate", gnmax_aggregate)
    monkeypatch.setattr(dpsgd, "dpsgd_steps", dpsgd_steps)
    monkeypatch.setattr(sens, "empirical_sensitivity", empirical_sensitivity)
    monkeypatch.setattr(dg, "sample_discrete_gaussian", sample_discrete_gaussian)
    monkeypatch.setattr(ClientRole, "handle", handle)
    yield spy


# ------------------------------------------------------------------ deviations

Trace = list[Message]


def _copy(message: Message) -> Message:
    return decode_message(encode_message(message))


def _lowered(message: Message, keys: set[str]) -> Message:
    return Message(message.kind, arrays=dict(message.arrays), category=message.category,
                   config={k: LEAST_NOISE[k] if k in keys else v
                           for k, v in message.config.items()})


def lowered_noise(trace: Trace) -> list[Trace]:
    """The trace with one noise parameter at its least-noise value in every message that
    carries it (one scenario per parameter), and with all of them at once."""
    keys = sorted({k for m in trace for k in m.config if k in LEAST_NOISE})
    return [[_lowered(m, chosen) for m in trace]
            for chosen in ([{k} for k in keys] + [set(keys)] if keys else [set()])]


def replayed(trace: Trace) -> list[Trace]:
    """Every message sent twice in a row."""
    return [[_copy(m) for m in trace for _ in range(2)]]


def extra_rounds(trace: Trace) -> list[Trace]:
    """The whole run sent again: twice the planned rounds."""
    return [[_copy(m) for m in trace + trace]]


def reordered(trace: Trace) -> list[Trace]:
    """The messages in reverse order, then in order."""
    return [[_copy(m) for m in trace[::-1] + trace]]


def unplanned_kinds(trace: Trace) -> list[Trace]:
    """The noiseless sensitivity request, three times, before the trace."""
    return [[_copy(SENSITIVITY_REQUEST) for _ in range(3)] + [_copy(m) for m in trace]]


def _with_steps(message: Message, steps: Callable[[int], int]) -> Message:
    copy = _copy(message)
    if "steps" in copy.config:
        copy.config["steps"] = steps(int(copy.config["steps"]))
    return copy


def changed_steps(trace: Trace) -> list[Trace]:
    """Local step counts the client did not plan: each message followed by a copy with the
    count negated (which, counted as sent, takes the steps just run off the client's tally
    while it runs none), then the run twice more; and every count ten times larger."""
    return [[c for m in trace for c in (_copy(m), _with_steps(m, lambda k: -k))]
            + [_copy(m) for m in trace + trace],
            [_with_steps(m, lambda k: 10 * k) for m in trace]]


#: each deviation turns a client's honest trace into scenarios, each sent to a fresh role
DEVIATIONS: dict[str, Callable[[Trace], list[Trace]]] = {
    "lowered_noise": lowered_noise, "replayed": replayed, "extra_rounds": extra_rounds,
    "reordered": reordered, "unplanned_kinds": unplanned_kinds,
    "changed_steps": changed_steps}


def drive(role: ClientRole, trace: Trace) -> list[str]:
    """Send ``trace`` to ``role``; returns the errors (one line each) of refused messages."""
    errors = []
    for message in trace:
        try:
            role.handle(_copy(message))
        except Exception as exc:  # a refusal, or a message that makes no sense now
            errors.append(f"{message.kind}: {type(exc).__name__}: {exc}")
    return errors


def outcomes(role: ClientRole, trace: Trace) -> list[str]:
    """What the server learns of each message of ``trace`` sent to ``role``: the reply's
    kind, or the error category a Flower site sends in its place."""
    from fedlabels.core.errors import error_category

    seen = []
    for message in trace:
        try:
            seen.append(role.handle(_copy(message)).kind)
        except Exception as exc:
            seen.append(error_category(exc))
    return seen


def with_neighbour(role: ClientRole) -> ClientRole:
    """``role`` on a neighbouring dataset: its record with the largest first feature
    replaced by a copy of the one with the smallest (same size and order otherwise)."""
    from fedlabels.data import ClientData

    X, y = np.array(role.data.X), np.array(role.data.y)
    top, bottom = int(np.argmax(X[:, 0])), int(np.argmin(X[:, 0]))
    X[top], y[top] = X[bottom], y[bottom]
    role.data = ClientData(X, y)
    return role


def check_within_plan(honest: NoiseSpy, deviated: NoiseSpy,
                      planned_noiseless: Mapping[int, int]) -> list[str]:
    """What the deviating server got beyond the client's own plan (empty: nothing)."""
    problems = []
    plan, floor = honest.totals(), honest.least_noise()
    for key, amount in deviated.totals().items():
        if amount > plan.get(key, 0):
            problems.append(f"client {key[0]} released {amount} ({key[1]}) > planned "
                            f"{plan.get(key, 0)}")
    for key, value in deviated.least_noise().items():
        if key not in floor:
            problems.append(f"client {key[0]} drew {key[1]} noise the honest run never did")
            continue
        less = (value < floor[key] * (1 - 1e-9) if key[1] in NOISIER_ABOVE
                else value > floor[key] * (1 + 1e-9))
        if less:
            problems.append(f"client {key[0]}: {key[1]} = {value:.6g}, less noise than its "
                            f"own {floor[key]:.6g}")
    for cid, n in deviated.noiseless.items():
        if n > planned_noiseless.get(cid, 0):
            problems.append(f"client {cid} answered {n} noiseless sensitivity requests, "
                            f"planned {planned_noiseless.get(cid, 0)}")
    return problems


def released_any(spy: NoiseSpy) -> bool:
    return bool(spy.draws) or any(spy.noiseless.values())


def n_draws(spy: NoiseSpy) -> int:
    return int(np.sum([d.amount for d in spy.draws])) if spy.draws else 0
