"""Every registered method against a deviating server, in the simulator and on Flower.

The harness (:mod:`deviating_server`) changes an honest run's messages as a server that
does not follow the protocol would, and checks one thing for every method and deviation: a
client never releases more than its own plan (the honest run) and never with less noise
than its own options (the honest run's noise, calibrated from the same options).

On Flower the deviations also rewind and replay a site's message sequence numbers, which
the site's sequence guard and ledger refuse or answer with the stored reply.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from deviating_server import (
    DEVIATIONS,
    SENSITIVITY_REQUEST,
    NoiseSpy,
    Trace,
    check_within_plan,
    drive,
    outcomes,
    spying,
    with_neighbour,
)
from fedlabels.api import load_federation
from fedlabels.comm import Message
from fedlabels.core.errors import FedLabelsError, ParameterRefusal, RefusedError, error_category
from fedlabels.core.randomness import reproducible
from fedlabels.data import Federation
from fedlabels.method.base import ClientRole
from fedlabels.methods import METHODS
from fedlabels.testing import _Run  # the contract check's small runs
from test_method_contract import (  # the contract test's cases and roles
    CASES,
    CLIENTS,
    DATASET,
    PERIOD,
    ROUNDS,
    SEED,
    Case,
)

#: beyond the contract test's cases: the one configuration that may answer noiselessly
EMPIRICAL = Case("dp-fedct", {"epsilon_per_round": 2.0, "mechanism": "kary",
                              "sensitivity": "empirical", "sensitivity_neighbours": 3})
ALL_CASES = [*CASES, pytest.param(EMPIRICAL, id="dp-fedct[kary,sensitivity=empirical]")]
_HONEST: dict[str, tuple[dict[int, Trace], NoiseSpy]] = {}


@pytest.fixture(scope="module")
def federation() -> Federation:
    return load_federation(DATASET, clients=CLIENTS, seed=SEED)


def _key(case: Case) -> str:
    return f"{case.method}:{sorted(case.options.items())}"


def small_run(case: Case, fed: Federation) -> _Run:
    """The contract check's small run of ``case`` on ``fed``."""
    run = _Run(case.impl, dict(case.options), case.model, DATASET, CLIENTS, ROUNDS, PERIOD,
               SEED)
    run._federation = fed
    return run


def _role_factory(case: Case, fed: Federation) -> Callable[[int], ClientRole]:
    """Client roles built as the simulator builds them (same plan, seeds and data, and the
    honest run's trusted setup: the identity keys its clients signed with)."""
    with reproducible(SEED):  # the out-of-band setup's own stream (core/randomness.py)
        return small_run(case, fed).fresh_role()


class _Recording:
    """A grid that passes every exchange on and keeps what each client was sent."""

    def __init__(self, inner: Any, traces: dict[int, Trace]) -> None:
        self.inner, self.traces = inner, traces

    @property
    def client_ids(self) -> list[int]:
        return list(self.inner.client_ids)

    def exchange(self, messages: Any, rnd: int) -> dict[int, Message]:
        for cid, message in messages.items():
            self.traces.setdefault(cid, []).append(message)
        replies: dict[int, Message] = self.inner.exchange(messages, rnd)
        return replies


def honest(case: Case, fed: Federation) -> tuple[dict[int, Trace], NoiseSpy]:
    """What every client was sent in an honest run, and what its mechanisms did (cached)."""
    if _key(case) not in _HONEST:
        traces: dict[int, Trace] = {}
        # under the seed's stream: the trusted setup _role_factory's roles share
        with pytest.MonkeyPatch.context() as mp, spying(mp) as spy, reproducible(SEED):
            small_run(case, fed).simulate(wrap_grid=lambda grid: _Recording(grid, traces))
        _HONEST[_key(case)] = traces, spy
    return _HONEST[_key(case)]


# ------------------------------------------------------------------ the simulator

@pytest.mark.parametrize("deviation", sorted(DEVIATIONS))
@pytest.mark.parametrize("case", ALL_CASES)
def test_client_stays_within_its_own_plan(case: Case, deviation: str,
                                          federation: Federation) -> None:
    traces, plan = honest(case, federation)
    fresh = _role_factory(case, federation)
    problems = []
    for cid, trace in sorted(traces.items()):
        for scenario in DEVIATIONS[deviation](trace):  # each to a fresh role
            with pytest.MonkeyPatch.context() as mp, spying(mp) as spy:
                drive(fresh(cid), scenario)
            problems += check_within_plan(plan, spy, plan.noiseless)
    assert not problems, "\n".join(problems)


def _holds_against_a_deviating_server(case: Case) -> bool:
    """The cases privacy.md's party table says hold against a server that deviates."""
    options = case.options
    return case.method == "dp-fedct" or (
        case.method == "dp-fedavg" and (options.get("level") == "record"
                                        or options.get("aggregation") == "secure")) or (
        case.method == "dp-pate" and options.get("aggregation") == "secure")


GUARDED = [p for p in ALL_CASES if _holds_against_a_deviating_server(p.values[0])]


@pytest.mark.parametrize("deviation", sorted(DEVIATIONS))
@pytest.mark.parametrize("case", GUARDED)
def test_whether_a_client_answers_does_not_depend_on_its_records(
        case: Case, deviation: str, federation: Federation) -> None:
    """A refusal reaches the server in the clear (its category), without noise: which
    messages a client answers must be the same on neighbouring datasets."""
    traces, _ = honest(case, federation)
    fresh = _role_factory(case, federation)
    for scenario in DEVIATIONS[deviation](traces[0]):
        assert outcomes(fresh(0), scenario) == outcomes(with_neighbour(fresh(0)), scenario)


@pytest.mark.parametrize("case", GUARDED)
def test_every_step_count_is_the_clients_own(case: Case, federation: Federation) -> None:
    """Each step count a message names (a round's, a teacher's, the student's, the s*
    estimate's learners'), after the honest messages before it, is refused with 25 times or
    minus its value: the client trains its own plan's steps, never the server's (until
    2026-11-30 secure dp-fedavg's and dp-pate's clients trained any number, 2^62 too, and
    the s* request's and subsample-aggregate's teacher steps were sent but unread)."""
    traces, _ = honest(case, federation)
    fresh = _role_factory(case, federation)
    trace = traces[0]
    asked = [(i, key) for i, m in enumerate(trace) for key in m.config if key.endswith("steps")]
    assert asked
    for i, key in asked:
        for steps in (25 * int(trace[i].config[key]), -1):
            role = fresh(0)
            assert not drive(role, trace[:i])
            changed = Message(trace[i].kind, arrays=dict(trace[i].arrays),
                              config={**trace[i].config, key: steps},
                              category=trace[i].category)
            with pytest.raises(ParameterRefusal) as refused:
                role.handle(changed)
            assert error_category(refused.value).startswith(
                f"refused: parameters (the site's {key} is "), (trace[i].kind, key)


@pytest.mark.parametrize("case", [p for p in GUARDED if p.values[0].method == "dp-fedavg"])
def test_crafted_weights_get_the_same_answers_from_neighbouring_datasets(
        case: Case, federation: Federation) -> None:
    """Every message's weights crafted to overflow (an infinite logit) on records with x_0
    above all but the client's largest: only the record the neighbour lacks sets it off.
    Until 2026-11-30 the secure client refused to encode the non-finite update ('error:
    data') where its neighbour answered."""
    from test_dpsgd_crafted_weights import _crafted

    traces, _ = honest(case, federation)
    fresh = _role_factory(case, federation)
    role = fresh(0)
    role.ensure_built()
    x = np.sort(np.asarray(role.data.X, dtype=np.float32)[:, 0])
    _crafted(role.learner.model_, 0, float(x[-2]))
    weights = np.asarray(role.learner.get_weights(), dtype=np.float32)
    scenario = [Message(m.kind, category=m.category, config=dict(m.config),
                        arrays={**m.arrays, **({"weights": weights} if "weights" in m.arrays
                                               else {})}) for m in traces[0]]
    assert any("weights" in m.arrays for m in scenario)
    seen = outcomes(fresh(0), scenario)
    assert seen == outcomes(with_neighbour(fresh(0)), scenario)
    assert not any(s.startswith(("error", "refused")) for s in seen), seen


@pytest.mark.parametrize("case", ALL_CASES)
def test_client_answers_only_its_own_message_kinds(case: Case,
                                                   federation: Federation,
                                                   ) -> None:
    """An unplanned kind is refused as such (its category is all the server learns); the
    noiseless sensitivity request only where the options choose ``empirical``."""
    role = _role_factory(case, federation)(0)
    traces, _ = honest(case, federation)
    planned = {m.kind for m in traces[0]} | {"evaluate"}
    kinds = {m.kind for trace in _every_trace() for m in trace}
    for kind in sorted(kinds - set(role.handlers)):
        with pytest.raises(RefusedError):
            role.handle(Message(kind))
    empirical = case.options.get("sensitivity") == "empirical"
    assert ("dpfedct.sensitivity" in role.handlers) == empirical
    unplanned = set(role.handlers) - planned
    assert unplanned <= ({"dpfedct.sensitivity"} if empirical else set()), unplanned


def _every_trace() -> Iterable[Trace]:
    for param in ALL_CASES:
        case = param.values[0]
        if _key(case) in _HONEST:
            yield from _HONEST[_key(case)][0].values()
    yield [SENSITIVITY_REQUEST]


def test_every_method_is_covered() -> None:
    assert {p.values[0].method for p in ALL_CASES} == set(METHODS)


# ------------------------------------------------------------------ Flower


def _rewrite(message: Any, change: Any) -> None:
    """Replace the fedlabels message inside a Flower message (meta and attachment kept)."""
    from fedlabels.engines.flower.convert import (
        attached_message,
        from_record_dict,
        to_record_dict,
    )

    ours, meta = from_record_dict(message.content)
    message.content = to_record_dict(change(ours), attached_message(message.content), **meta)


def _deviating_grid(kind: str) -> Any:
    from flwr.app import Message as FlowerMessage

    from fedlabels.engines.flower.loopback import LoopbackGrid
    from fedlabels.engines.flower.spec import HELLO

    class Deviating(LoopbackGrid):
        sent: ClassVar[list[Any]] = []

        def push_messages(self, messages: Iterable[FlowerMessage]) -> Iterable[str]:
            batch = list(messages)
            from fedlabels.engines.flower.convert import from_record_dict

            ours = [from_record_dict(m.content)[0] for m in batch]
            if any(m.kind == HELLO for m in ours):
                return super().push_messages(batch)
            if kind == "lowered_noise":
                for m in batch:
                    _rewrite(m, lambda o: DEVIATIONS["lowered_noise"]([o])[-1][0])
            elif kind == "unplanned_kinds":
                for m in batch:
                    _rewrite(m, lambda o: SENSITIVITY_REQUEST if o.category == "protocol"
                             else o)
            elif kind == "replayed":  # the same sequence number twice: fresh noise?
                for m in batch:
                    copy = FlowerMessage(m.content.copy() if hasattr(m.content, "copy")
                                         else m.content, dst_node_id=m.metadata.dst_node_id,
                                         message_type=m.metadata.message_type,
                                         group_id=m.metadata.group_id)
                    super().push_messages([copy])
            elif kind == "rewound":  # every message of round 1 sent again after it
                self.sent.extend(m for m in batch if from_record_dict(m.content)[1]
                                 .get("round") == 0)
                if batch and from_record_dict(batch[0].content)[1].get("round", 0) >= 1:
                    for old in self.sent:
                        super().push_messages([old])
                    self.sent = []
            return super().push_messages(batch)

    return Deviating


#: rewinds and replays of a site's message numbers: refused by its sequence guard and ledger
FLOWER_DEVIATIONS = ["lowered_noise", "unplanned_kinds", "replayed", "rewound"]


@pytest.mark.parametrize("deviation", FLOWER_DEVIATIONS)
@pytest.mark.parametrize("case", CASES)
def test_site_stays_within_its_own_plan_on_flower(case: Case, deviation: str,
                                                  federation: Federation,
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flwr")
    from fedlabels.engines.flower.client_app import app as client_app
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.engines.flower.spec import RUN_CONFIG_KEY

    if len(case.impl.client_datasets(federation.clients)) != federation.n_clients \
            or case.method == "feddf":
        pytest.skip(f"{case.method} is not deployed on Flower")
    _, plan = honest(case, federation)
    prepared, _ = loopback_deployment(case.config(), tmp_path / "sites", reply_timeout=60.0)
    nodes = [prepared.node_settings(c) for c in range(federation.n_clients)]
    grid = _deviating_grid(deviation)(client_app, nodes,
                                      {RUN_CONFIG_KEY: prepared.spec.to_json()})
    # refusing clients are lost, and the run may stop
    with spying(monkeypatch) as spy, contextlib.suppress(FedLabelsError):
        run_server(grid, server_context(prepared.spec))
    problems = check_within_plan(plan, spy, plan.noiseless)
    assert not problems, "\n".join(problems)
