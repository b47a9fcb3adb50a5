"""The method contract as a public check, for a method's author to run in their own tests.

In the spirit of scikit-learn's ``check_estimator``::

    from fedlabels.testing import check_method

    def test_echo_keeps_the_contract():
        check_method(Echo())                      # or check_method("echo") once installed

Each check runs small real runs (``breast_cancer``, 3 clients, 3 rounds of 5 local steps by
default) and raises :class:`ContractViolation`, an ``AssertionError`` whose message names
the check, at the first broken promise:

* ``declarations``: a name, a description, a :class:`~fedlabels.method.ThreatModel`, a
  :class:`~fedlabels.method.Capabilities` value and options all declared with
  ``option()``;
* ``options``: the options survive a JSON round trip, and an unknown option is rejected
  naming every valid one;
* ``determinism``: two runs with the same seed (and the same secret randomness) give the
  same per-round records;
* ``payloads``: every value a client sends (protocol and evaluation replies) is a payload
  its threat model declares;
* ``state``: before every message, a freshly built client role loaded with the live role's
  ``state_dict()`` has the same state and sends the same reply bytes;
* ``flower``: the real Flower ServerApp loop and ClientApp over the loopback grid give the
  simulator's accuracies and bytes (skipped without ``flwr``, and for a method whose client
  roles are not the sites, like ``centralized``).

Secret randomness (noise, keys, masks) is not derived from the run seed by design; the
checks that compare runs install the same reproducible source for each
(:func:`fedlabels.core.randomness.reproducible`).
"""

from __future__ import annotations

import json
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import Federation
from fedlabels.method import Capabilities, ClientRole, Method, ThreatModel
from fedlabels.method.options import MethodOptions
from fedlabels.method.state import copied
from fedlabels.methods import METHODS, get_method
from fedlabels.results import RoundRecord, RunResult

CHECKS = ("declarations", "options", "determinism", "payloads", "state", "flower")
SMALL_MLP = "mlp(hidden=8)"


class ContractViolation(AssertionError):
    """A method broke its contract; ``check`` names the check, the message says how."""

    def __init__(self, method: str, check: str, detail: str) -> None:
        super().__init__(f"method {method!r} fails check {check!r}: {detail}")
        self.method = method
        self.check = check


def check_method(method: Method | str, *, options: Mapping[str, Any] | None = None,
                 model: str | None = None, dataset: str = "breast_cancer", clients: int = 3,
                 rounds: int = 3, period: int = 5, seed: int = 1,
                 checks: Iterable[str] | None = None) -> list[str]:
    """Run the contract checks (default: all of :data:`CHECKS`) on ``method``.

    ``options`` are the method's options for the runs (those it needs, e.g. an ε);
    ``model`` the model spec of every client (default: the method's default model, a small
    MLP where that is ``mlp``); ``dataset`` (a registered name), ``clients``, ``rounds``,
    ``period`` (local steps per round) and ``seed`` set up the small runs the checks make;
    ``checks`` chooses among :data:`CHECKS`. Returns the names of the checks that ran and passed (a
    skipped ``flower`` check is not among them); raises :class:`ContractViolation` naming
    the first one that failed. While it runs, ``method`` is the registered method of its
    name (the Flower ClientApp resolves methods by name).
    """
    impl = get_method(method) if isinstance(method, str) else method
    wanted = list(CHECKS if checks is None else checks)
    unknown = sorted(set(wanted) - set(CHECKS))
    if unknown:
        raise FedLabelsError(f"unknown check(s) {', '.join(unknown)}; choose from "
                             f"{', '.join(CHECKS)}.")
    name = str(getattr(impl, "name", "") or type(impl).__name__)
    if "declarations" in wanted:  # first: the others rely on the declarations
        _run(name, "declarations", lambda: _check_declarations(impl))
    run = _Run(impl, dict(options or {}), model or _default_model(impl), dataset, clients,
               rounds, period, seed)
    passed = ["declarations"] if "declarations" in wanted else []
    with _registered(impl):
        for check in (c for c in CHECKS if c in wanted and c != "declarations"):
            if _run(name, check, partial(_CHECKS[check], run)):
                passed.append(check)
    return passed


def _run(method: str, check: str, body: Callable[[], bool | None]) -> bool:
    """Run one check; any failure becomes a :class:`ContractViolation` naming it."""
    try:
        return body() is not False
    except ContractViolation:
        raise
    except Exception as exc:  # the method may fail in any way: report it as this check's
        text = " ".join(str(exc).split())
        raise ContractViolation(method, check, f"{type(exc).__name__}: {text}") from exc


def _default_model(method: Method) -> str:
    spec = method.model_default()
    return SMALL_MLP if spec == "mlp" else spec


@contextmanager
def _registered(method: Method) -> Iterator[None]:
    """``method`` as the registered method of its name while the block runs."""
    name = method.name
    before = METHODS.get(name)
    METHODS[name] = method
    try:
        yield
    finally:
        if before is None:
            METHODS.pop(name, None)
        else:
            METHODS[name] = before


@dataclass
class _Run:
    """One configuration of small runs of the method under test."""

    method: Method
    options: dict[str, Any]
    model: str
    dataset: str
    clients: int
    rounds: int
    period: int
    seed: int
    _federation: Federation | None = field(default=None, repr=False)
    _reference: list[str] | None = field(default=None, repr=False)

    def fail(self, check: str, detail: str) -> ContractViolation:
        return ContractViolation(self.method.name, check, detail)

    def reference_records(self) -> list[str]:
        """The records of one uninterrupted run under reproducible randomness (made once;
        the determinism and resume checks compare against it)."""
        if self._reference is None:
            from fedlabels.core.randomness import reproducible

            with reproducible(self.seed):
                self._reference = _records(self.simulate())
        return self._reference

    @property
    def federation(self) -> Federation:
        if self._federation is None:
            from fedlabels.api import load_federation

            self._federation = load_federation(self.dataset, clients=self.clients,
                                               seed=self.seed)
        return self._federation

    def simulate(self, wrap_grid: Callable[[Any], Any] | None = None,
                 **engine: Any) -> RunResult:
        """A run of this configuration; ``engine``: more of ``simulate``'s keywords
        (``checkpoint``, ``resume``, ``on_round``)."""
        from fedlabels.engines.inprocess import simulate
        from fedlabels.learners import as_models

        return simulate(self.method, self.federation, as_models(self.model),
                        rounds=self.rounds, period=self.period, seed=self.seed,
                        progress=False, options=self.options, wrap_grid=wrap_grid, **engine)

    def fresh_role(self) -> Callable[[int], ClientRole]:
        """Client roles built as the simulator builds them (same plan, seeds and data)."""
        from fedlabels.learners import as_models
        from fedlabels.runs.session import role_factory

        roles = role_factory(self.method, self.federation, as_models(self.model),
                             rounds=self.rounds, period=self.period, seed=self.seed,
                             options=self.options)
        return roles.client


# ------------------------------------------------------------------ the checks
def _check_declarations(method: Method) -> None:
    name = getattr(method, "name", "")
    if not isinstance(method, Method):
        raise ContractViolation(str(name), "declarations",
                                f"{type(method).__name__} is not a fedlabels Method")
    missing = [a for a in ("name", "description") if not isinstance(getattr(method, a, None),
                                                                     str)
               or not getattr(method, a)]
    if missing:
        raise ContractViolation(str(name), "declarations", f"no {' or '.join(missing)}")
    threat = getattr(method, "threat_model", None)
    if not isinstance(threat, ThreatModel):
        raise ContractViolation(name, "declarations", "no threat_model (a ThreatModel)")
    if not (threat.view and threat.adversary and threat.sees):
        raise ContractViolation(name, "declarations", "its threat model must name the view, "
                                "the adversary and what it sees")
    if not isinstance(method.capabilities, Capabilities):
        raise ContractViolation(name, "declarations", "capabilities is not a Capabilities "
                                f"value: {method.capabilities!r}")
    if not (isinstance(method.options_class, type)
            and issubclass(method.options_class, MethodOptions)):
        raise ContractViolation(name, "declarations", "options_class is not a MethodOptions "
                                "dataclass")
    method.options_class.declared()  # TypeError on a field not declared with option()


def _check_options(run: _Run) -> None:
    method = run.method
    parsed = method.parse_options(run.options)
    again = method.parse_options(json.loads(json.dumps(parsed.to_dict())))
    if again != parsed:
        raise run.fail("options", f"{parsed!r} does not survive a JSON round trip: {again!r}")
    valid = [info.name for info in method.options_class.declared()]
    try:
        method.parse_options({**run.options, "no_such_option": 1})
    except FedLabelsError as err:
        left_out = [v for v in valid if v not in str(err)]
        if "no_such_option" not in str(err) or left_out:
            raise run.fail("options", f"the error for an unknown option must name it and "
                           f"every valid option; it says {str(err)!r}") from None
    else:
        raise run.fail("options", "an unknown option ('no_such_option') was accepted")


def _records(result: RunResult) -> list[str]:
    """Each round as JSON (NaN-safe), without its wall-clock seconds."""
    return [json.dumps([r.round, r.local_steps, r.accuracies, r.rmse, r.r2, r.server,
                        r.bytes_up, r.bytes_down], sort_keys=True) for r in result.rounds]


def _check_determinism(run: _Run) -> None:
    from fedlabels.core.randomness import reproducible

    first = run.reference_records()
    with reproducible(run.seed):
        second = _records(run.simulate())
    if first != second:
        at = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b) \
            if len(first) == len(second) else min(len(first), len(second))
        raise run.fail("determinism", f"two runs with seed {run.seed} differ from round "
                       f"{at + 1} on")


class _Observing:
    """A grid that passes every exchange to ``inner`` and hands each reply to ``seen``."""

    def __init__(self, inner: Any, seen: Callable[[int, Message], None]) -> None:
        self.inner = inner
        self.seen = seen

    @property
    def client_ids(self) -> list[int]:
        return list(self.inner.client_ids)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        replies: dict[int, Message] = self.inner.exchange(messages, rnd)
        for cid in sorted(replies):
            self.seen(cid, replies[cid])
        return replies


def _check_payloads(run: _Run) -> None:
    """Every value a client sends is declared, and is what its declaration says: no array
    holds one of the client's own private rows, and hard labels said to be on U have
    exactly one label per point of U (the names alone would let raw rows, or the client's
    private labels, pass under a declared key)."""
    threat = run.method.threat_model
    log: list[tuple[int, Message]] = []
    run.simulate(wrap_grid=lambda grid: _Observing(grid, lambda c, m: log.append((c, m))))
    sent = [(c, r) for c, r in log if r.category in ("protocol", "evaluation")]
    if not sent:
        raise run.fail("payloads", "no client replied")
    undeclared = sorted({f"{r.kind}: {source} {key!r}" for _, r in sent
                         for source, keys in (("arrays", r.arrays), ("config", r.config))
                         for key in keys if threat.payload(r.kind, key, source) is None})
    if undeclared:
        raise run.fail("payloads", f"clients send values their threat model does not "
                       f"declare: {', '.join(undeclared)}")
    problems = _payload_contents(run, threat, sent)
    if problems:
        raise run.fail("payloads", "; ".join(problems[:5]))


def _payload_contents(run: _Run, threat: Any, sent: list[tuple[int, Message]]) -> list[str]:
    """What the sent arrays hold that their declarations do not allow (see above)."""
    from fedlabels.comm.labels import packed_size

    fed = run.federation
    datasets = run.method.client_datasets(fed.clients)
    rows = {cid: _private_rows(d.X) for cid, d in enumerate(datasets)}
    packed_u = packed_size(len(fed.X_public), fed.n_classes)
    problems: set[str] = set()
    for cid, reply in sent:
        for key, value in reply.arrays.items():
            blob = np.ascontiguousarray(value).tobytes()
            if any(row in blob for row in rows.get(cid, ())):
                problems.add(f"{reply.kind}: arrays {key!r} holds rows of client {cid}'s "
                             "private data")
            declared = threat.payload(reply.kind, key, "arrays")
            if declared is not None and declared.content == "hard-labels" \
                    and declared.rows == "public" and (np.asarray(value).dtype != np.uint8
                                                       or np.asarray(value).size != packed_u):
                problems.add(f"{reply.kind}: arrays {key!r} is declared as hard labels on U "
                             f"(uint8, {packed_u} bytes: {len(fed.X_public)} labels) but is "
                             f"{np.asarray(value).dtype} of {np.asarray(value).size} values")
    return sorted(problems)


def _private_rows(X: Any) -> set[bytes]:
    """A client's private rows as float32 and float64 bytes (rows of one repeated value,
    e.g. a blank image, are left out: they could match anything)."""
    X = np.asarray(X)
    if X.ndim != 2 or X.dtype.kind not in "fiu":
        return set()
    keep = X[np.ptp(X, axis=1) > 0] if len(X) else X
    return {row.tobytes() for dtype in (np.float32, np.float64)
            for row in np.ascontiguousarray(keep, dtype=dtype)}


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
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


class _Restoring:
    """The in-process grid that, before each message, rebuilds the client from its state:
    a fresh role loads a copy of the live role's ``state_dict()``; its state must be the
    same, and its reply the same bytes as the live role's."""

    def __init__(self, inner: Any, fresh: Callable[[int], ClientRole],
                 problems: list[str]) -> None:
        self.inner = inner
        self.fresh = fresh
        self.problems = problems

    @property
    def client_ids(self) -> list[int]:
        return list(self.inner.client_ids)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        from fedlabels.core.randomness import ReproducibleSource, current_source

        source = current_source()  # the twin draws the secret randomness the live role
        if not isinstance(source, ReproducibleSource):  # draws next: both must answer alike
            raise FedLabelsError("the state check needs a reproducible source of secret "
                                 "randomness (fedlabels.core.randomness.reproducible)")
        replies: dict[int, Message] = {}
        for cid in sorted(messages):  # one client at a time: its twin, then the live role
            state = self.inner.clients[cid].state_dict()
            twin = self.fresh(cid)
            twin.load_state_dict(copied(state))
            diff = _differing(state, twin.state_dict())
            if diff:
                self.problems.append(f"round {rnd + 1}, client {cid}: the restored state "
                                     f"differs in {diff}")
            message = decode_message(encode_message(messages[cid]))
            position = source.getstate()
            expected = encode_message(twin.handle(message))
            source.setstate(position)
            replies.update(self.inner.exchange({cid: messages[cid]}, rnd))
            if encode_message(replies[cid]) != expected:
                self.problems.append(f"round {rnd + 1}, client {cid}: a restored role "
                                     f"answers {messages[cid].kind!r} differently")
        return replies


def _check_state(run: _Run) -> None:
    from fedlabels.core.randomness import reproducible

    with reproducible(run.seed):  # the run's out-of-band setup (identity keys) is its first
        fresh = run.fresh_role()  # secret draw: the twins get the live roles' configuration
    problems = list[str]()
    with reproducible(run.seed):
        run.simulate(wrap_grid=lambda grid: _Restoring(grid, fresh, problems))
    if problems:
        raise run.fail("state", "; ".join(problems[:5]))
    _check_resume(run)


def _check_resume(run: _Run) -> None:
    """A run interrupted after round 1 and resumed from its checkpoint equals the
    uninterrupted run: what the server (or a client) keeps across rounds outside its
    ``state_dict()`` would make them differ."""
    from fedlabels.core.randomness import reproducible

    whole = run.reference_records()
    if len(whole) < 2:
        return  # one round (a one-shot method): nothing to resume

    def stop(record: RoundRecord) -> None:
        if record.round == 1:
            raise KeyboardInterrupt

    with tempfile.TemporaryDirectory(prefix="fedlabels-check-") as tmp:
        path = Path(tmp) / "run.checkpoint.npz"
        with reproducible(run.seed):
            run.simulate(checkpoint=path, on_round=stop)
        with reproducible(run.seed):
            resumed = _records(run.simulate(resume=path))
    if resumed != whole:
        at = next((i for i, (a, b) in enumerate(zip(whole, resumed, strict=False)) if a != b),
                  min(len(whole), len(resumed)))
        raise run.fail("state", f"a run interrupted after round 1 and resumed from its "
                       f"checkpoint differs from the uninterrupted run from round {at + 1} on: "
                       "the server or a client keeps something across rounds that its "
                       "state_dict() leaves out (declare it in state_attrs)")


def _check_flower(run: _Run) -> bool:
    """False (skipped) without flwr, when the client roles are not the sites, or on a text
    dataset (a deployment exchanges numeric files)."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        return False
    if len(run.method.client_datasets(run.federation.clients)) != run.federation.n_clients:
        return False  # a method that pools the sites' data cannot be deployed
    if np.asarray(run.federation.X_public).ndim == 1:
        return False  # text: deployments refuse it (the method is not at fault)
    from fedlabels.api import run_config
    from fedlabels.core.errors import RunCaveatWarning
    from fedlabels.core.randomness import reproducible
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.runs.config import RunConfig

    cfg = RunConfig(method=run.method.name, dataset=run.dataset, clients=run.clients,
                    model=run.model, rounds=run.rounds, period=run.period, seed=run.seed,
                    options=dict(run.options))
    with tempfile.TemporaryDirectory(prefix="fedlabels-check-") as tmp:
        prepared, grid = loopback_deployment(cfg, Path(tmp) / "sites", reply_timeout=60.0)
        with reproducible(run.seed):  # the same secret randomness in both engines
            deployed = run_server(grid, server_context(prepared.spec),
                                  on_round=lambda record: None)  # no per-round lines
    with reproducible(run.seed), warnings.catch_warnings():
        warnings.simplefilter("ignore", RunCaveatWarning)  # a check's run, not the user's
        simulated = run_config(cfg, progress=False)
    if deployed is None:
        raise run.fail("flower", "the ServerApp returned no result")
    lost = deployed.extra["deployment"]["lost"]
    if lost:
        raise run.fail("flower", f"clients were lost over the loopback grid: {lost}")
    if [r.accuracies for r in deployed.rounds] != [r.accuracies for r in simulated.rounds]:
        raise run.fail("flower", "the Flower loopback run's accuracies differ from the "
                       "simulator's")
    if [(r.bytes_up, r.bytes_down) for r in deployed.rounds] != \
            [(r.bytes_up, r.bytes_down) for r in simulated.rounds]:
        raise run.fail("flower", "the Flower loopback run's bytes differ from the simulator's")
    return True


_CHECKS: dict[str, Callable[[_Run], bool | None]] = {
    "options": _check_options,
    "determinism": _check_determinism,
    "payloads": _check_payloads,
    "state": _check_state,
    "flower": _check_flower,
}

__all__ = ["CHECKS", "ContractViolation", "check_method"]
