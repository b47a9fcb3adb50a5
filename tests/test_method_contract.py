"""What every registered method promises, checked on a small real run of each.

* the Flower engine (real ServerApp loop and ClientApp over the loopback grid, state only in
  ``context.state``) gives the simulator's per-round accuracies and bytes;
* two simulator runs with the same seed give the same records;
* unknown options are rejected, naming the valid ones;
* a threat model is declared, and every value a client sends in a protocol or evaluation
  reply is one of its payloads;
* a client role's ``state_dict()`` restored into a freshly built role gives the same state
  and the same reply to the next message.

Secret randomness (XCLP's keys, masks and seed shares) is not derived from the run seed by
design; the tests that compare runs install the same reproducible source for each
(:func:`fedlabels.core.randomness.reproducible`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedlabels.engines.inprocess as inprocess
from fedlabels.api import load_federation, run_config
from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import current_source, reproducible
from fedlabels.data import Federation
from fedlabels.engines.inprocess import InProcessGrid, simulate
from fedlabels.learners import as_models, expand_per_client
from fedlabels.method import ClientRole, Method, ThreatModel
from fedlabels.methods import METHODS
from fedlabels.results import RunResult
from fedlabels.runs.config import RunConfig
from fedlabels.runs.loop import CommMeter, plan_run

DATASET, CLIENTS, ROUNDS, PERIOD, SEED = "breast_cancer", 3, 3, 5, 1
MLP = "mlp(hidden=8)"
#: methods that exchange soft labels (class probabilities): they need a torch model
SOFT_LABELS = {"dd", "fedmd", "ds-fl"}
XCLP_SMALL = {"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3, "key_bits": 512,
              "insecure_small_keys": True}  # functional test: short Paillier keys
#: the options each method needs to run (a list: one case per entry); others run with none
OPTIONS: dict[str, list[dict[str, Any]]] = {
    "dp-fedct": [{"epsilon": 1.0},
                 {"epsilon": 8.0, "mechanism": "subsample-aggregate", "teachers": 3,
                  "label_queries": 40, "data_dependent": True},
                 {"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1},
                 {"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1,
                  "site_model": "private"}],
    "dp-fedavg": [{"epsilon": 8.0}, {"epsilon": 8.0, "level": "record"}],
    "dp-pate": [{"epsilon": 2.0}],
    "fredy": [{"epsilon": 1.0}],
    "xclp": [{**XCLP_SMALL, "test_points": 20, "secure": "ot"},
             {**XCLP_SMALL, "test_points": 20, "secure": "paillier"}],
    # the secure protocols are the xclp cases' (the same client code); plaintext here
    "fedavg-xclp": [{**XCLP_SMALL, "warmup_rounds": 1, "secure": "none"}],
}
#: methods the Flower engine refuses, with (a pattern of) the reason it gives
FLOWER_REFUSED = {"feddf": "Flower ServerApp holds no copy of U"}


@dataclass(frozen=True)
class Case:
    method: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def impl(self) -> Method:
        return METHODS[self.method]

    @property
    def model(self) -> str:
        dpsgd = self.options.get("mechanism") == "dpsgd"  # DP-SGD needs a torch MLP
        return MLP if self.impl.requires_weights or self.method in SOFT_LABELS or dpsgd \
            else "dt"

    def config(self) -> RunConfig:
        return RunConfig(method=self.method, dataset=DATASET, clients=CLIENTS,
                         model=self.model, rounds=ROUNDS, period=PERIOD, seed=SEED,
                         options=dict(self.options))

    def simulate(self, federation: Federation, **kw: Any) -> RunResult:
        return simulate(self.impl, federation, as_models(self.model), rounds=ROUNDS,
                        period=PERIOD, seed=SEED, progress=False, options=self.options, **kw)


def _cases() -> list[Any]:
    out = []
    for name in sorted(METHODS):
        variants = OPTIONS.get(name, [{}])
        for options in variants:
            which = (f"secure={options['secure']}" if "secure" in options
                     else f"mechanism={options.get('mechanism', 'default')}"
                     + (f",site_model={options['site_model']}" if "site_model" in options
                        else ""))
            label = name if len(variants) == 1 else f"{name}[{which}]"
            out.append(pytest.param(Case(name, options), id=label))
    return out


CASES = _cases()


@pytest.fixture(scope="module")
def federation() -> Federation:
    return load_federation(DATASET, n_clients=CLIENTS, seed=SEED)


def _records(result: RunResult) -> list[str]:
    """Each round as JSON (NaN-safe), without its wall-clock seconds."""
    return [json.dumps([r.round, r.local_steps, r.accuracies, r.server, r.bytes_up,
                        r.bytes_down], sort_keys=True) for r in result.rounds]


def _sites_are_roles(case: Case, federation: Federation) -> None:
    roles = len(case.impl.client_datasets(federation.clients))
    if roles != federation.n_clients:
        pytest.skip(f"{case.method}'s client roles are not the sites ({federation.n_clients} "
                    f"sites -> {roles} role(s)): it cannot be deployed")


# ------------------------------------------------------------------ engines agree

@pytest.mark.parametrize("case", CASES)
def test_flower_loopback_equals_simulator(case: Case, federation: Federation,
                                          tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server

    _sites_are_roles(case, federation)
    cfg = case.config()
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites", reply_timeout=60.0)
    if case.method in FLOWER_REFUSED:  # refused with its reason, before any round
        with pytest.raises(FedLabelsError, match=FLOWER_REFUSED[case.method]):
            run_server(grid, server_context(prepared.spec))
        return
    with reproducible(SEED):  # the same secret randomness (XCLP's keys, masks) in both
        deployed = run_server(grid, server_context(prepared.spec))
    with reproducible(SEED):
        simulated = run_config(cfg, progress=False)
    assert deployed is not None
    assert [r.accuracies for r in deployed.rounds] == [r.accuracies for r in simulated.rounds]
    assert [(r.bytes_up, r.bytes_down) for r in deployed.rounds] == \
        [(r.bytes_up, r.bytes_down) for r in simulated.rounds]
    assert deployed.extra["deployment"]["lost"] == {}


# ------------------------------------------------------------------ determinism, options

@pytest.mark.parametrize("case", CASES)
def test_same_seed_same_records(case: Case, federation: Federation) -> None:
    with reproducible(SEED):  # secret randomness is not seeded by the run seed, by design
        first = _records(case.simulate(federation))
    with reproducible(SEED):
        assert _records(case.simulate(federation)) == first


@pytest.mark.parametrize("name", sorted(METHODS))
def test_unknown_option_is_rejected_naming_the_valid_ones(name: str) -> None:
    method = METHODS[name]
    valid = [info.name for info in method.options_class.declared()]
    with pytest.raises(FedLabelsError, match="no_such_option") as err:
        method.parse_options({"no_such_option": 1})
    for option in valid:
        assert option in str(err.value)


# ------------------------------------------------------------------ threat model

@pytest.mark.parametrize("name", sorted(METHODS))
def test_threat_model_is_declared(name: str) -> None:
    model = getattr(METHODS[name], "threat_model", None)
    assert isinstance(model, ThreatModel), f"{name} declares no ThreatModel"
    assert model.view and model.adversary and model.sees


class RecordingGrid(InProcessGrid):
    """The simulator's grid, keeping every client reply in ``log``."""

    def __init__(self, clients: Mapping[int, ClientRole], meter: CommMeter,
                 log: list[Message]) -> None:
        super().__init__(clients, meter)
        self.log = log

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        replies = super().exchange(messages, rnd)
        self.log.extend(replies[c] for c in sorted(replies))
        return replies


@pytest.mark.parametrize("case", CASES)
def test_every_value_a_client_sends_is_a_declared_payload(
        case: Case, federation: Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    threat = getattr(case.impl, "threat_model", None)
    assert isinstance(threat, ThreatModel), f"{case.method} declares no ThreatModel"
    log: list[Message] = []
    monkeypatch.setattr(inprocess, "InProcessGrid",
                        lambda clients, meter: RecordingGrid(clients, meter, log))
    case.simulate(federation)
    sent = [r for r in log if r.category in ("protocol", "evaluation")]
    assert sent, "no client replied"
    undeclared = sorted({f"{r.kind}: {source} {key!r}" for r in sent
                         for source, keys in (("arrays", r.arrays), ("config", r.config))
                         for key in keys if threat.payload(r.kind, key, source) is None})
    assert not undeclared, f"{case.method} sends undeclared values: {undeclared}"


# ------------------------------------------------------------------ client state

def _same_state(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Keys whose values differ (arrays by dtype and content, NaN equal to NaN)."""
    diff = sorted(set(a) ^ set(b))
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            same = (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
                    and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind
                                                              in "fc"))
        elif isinstance(x, float) and isinstance(y, float) and np.isnan(x):
            same = bool(np.isnan(y))
        else:
            same = type(x) is type(y) and x == y
        if not same:
            diff.append(key)
    return diff


def _copied(state: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in state.items()}


class RestoringGrid(InProcessGrid):
    """The simulator's grid that, before each message, rebuilds the client from its state.

    A fresh role (``fresh(cid)``) loads a copy of the live role's ``state_dict()``; its
    ``state_dict()`` must be the same, and its reply to the message the same bytes as the
    live role's.
    """

    def __init__(self, clients: Mapping[int, ClientRole], meter: CommMeter,
                 fresh: Callable[[int], ClientRole], problems: list[str]) -> None:
        super().__init__(clients, meter)
        self.fresh = fresh
        self.problems = problems

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        replies = {}
        for cid in sorted(messages):  # one client at a time: twin, then the live role
            state = self.clients[cid].state_dict()
            twin = self.fresh(cid)
            twin.load_state_dict(_copied(state))
            diff = _same_state(state, twin.state_dict())
            if diff:
                self.problems.append(f"round {rnd + 1}, client {cid}: restored "
                                     f"state differs in {diff}")
            message = decode_message(encode_message(messages[cid]))
            source = current_source()  # the twin draws the secret randomness the live role
            position = source.getstate()  # will draw next, so both must answer the same
            expected = encode_message(twin.handle(message))
            source.setstate(position)
            replies.update(super().exchange({cid: messages[cid]}, rnd))
            if encode_message(replies[cid]) != expected:
                self.problems.append(
                    f"round {rnd + 1}, client {cid}: a restored role answers "
                    f"{messages[cid].kind!r} differently")
        return replies


def _role_factory(case: Case, federation: Federation) -> Callable[[int], ClientRole]:
    """Client roles built as ``simulate`` builds them (same plan, seeds and data)."""
    method = case.impl
    datasets = method.client_datasets(federation.clients)
    plan = plan_run(method, n_roles=len(datasets), n_classes=federation.n_classes,
                    n_features=federation.n_features, rounds=ROUNDS, period=PERIOD,
                    seed=SEED, options=case.options,
                    models=expand_per_client(as_models(case.model), federation.n_clients))
    ctx = plan.context(truth_public=federation.y_public)
    ctx.scaling = federation.public_scaling  # as simulate sets it
    X_public = federation.X_public if method.uses_public else None
    return lambda cid: method.make_client(cid, datasets[cid], plan.learner(cid), ctx,
                                          X_public, federation.X_test, federation.y_test)


@pytest.mark.parametrize("case", CASES)
def test_state_round_trip_gives_the_same_role(case: Case, federation: Federation,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fresh, problems = _role_factory(case, federation), []
    monkeypatch.setattr(inprocess, "InProcessGrid",
                        lambda clients, meter: RestoringGrid(clients, meter, fresh, problems))
    with reproducible(SEED):
        case.simulate(federation)
    assert not problems, "\n".join(problems[:10])
