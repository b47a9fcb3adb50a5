"""The one session builder: a run's roles, built the same way by every engine.

Every role of every run is made here, from the run's plan (:func:`~fedlabels.runs.loop.plan_run`):

* :func:`build_session` sets up a run whose federation is in this process (the simulator,
  the audit through it, :func:`fedlabels.testing.check_method`, the tests): the plan, the
  checks made before any training, the learners, the client roles (the malicious ones
  turned), the server role. :func:`role_factory` is its first half (the plan, the checks
  and the context, no learner yet), for code that rebuilds client roles of a run.
* A deployment builds one side at a time from the same plan: :func:`build_server` (the
  Flower ServerApp: the sites' sizes, no private data, no copy of U) and
  :func:`build_client_role` (a Flower ClientApp: one site's role, rebuilt per message).

What a role is given (U only for a method that uses it, U's scaling, the true labels of U
for the simulator's diagnostics, U for a server that distils on it) is decided here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedlabels.core.randomness import out_of_band
from fedlabels.data import ClientData, Federation
from fedlabels.learners import expand_per_client
from fedlabels.learners.text_input import check_run_input
from fedlabels.method.adversary import Attack, make_malicious, plan_attack
from fedlabels.method.base import ClientRole, Method, MethodContext, ServerRole
from fedlabels.method.options import MethodOptions
from fedlabels.methods import get_method
from fedlabels.runs.checkpoint import Checkpoint, check_extension
from fedlabels.runs.loop import RunPlan, plan_run, rounds_to_run, uses_iterative
from fedlabels.runs.participation import Participation, check_method


def client_role(plan: RunPlan, ctx: MethodContext, cid: int, data: ClientData, learner: Any,
                X_public: np.ndarray | None, X_test: np.ndarray,
                y_test: np.ndarray) -> ClientRole:
    """Client ``cid``'s role: its private ``data`` and ``learner``, U if the method uses it."""
    method = plan.method
    public = X_public if method.capabilities.uses_public else None
    return method.make_client(cid, data, learner, ctx, public, X_test, y_test)


def server_role(plan: RunPlan, ctx: MethodContext, n_public: int, learners: list[Any],
                client_sizes: list[int]) -> ServerRole:
    """The server role, for clients of ``client_sizes`` private examples and |U| = ``n_public``
    (told the run's task, which its check of evaluation replies needs)."""
    server = plan.method.make_server(ctx, n_public, learners, list(client_sizes))
    server.task = plan.settings.task
    return server


@dataclass
class RoleFactory:
    """What builds a run's roles in one process: the plan, the context every role shares,
    each client role's private data, and U and the test set as the roles get them."""

    plan: RunPlan
    context: MethodContext
    datasets: list[ClientData]  # one per client role (``centralized`` pools them into one)
    X_public: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    # the run's out-of-band setup (``Method.trusted_setup``: identity keys, roster, run id):
    # each client role gets its own share on its context, the server role none
    trust: Any = None

    @property
    def client_sizes(self) -> list[int]:
        return [len(d) for d in self.datasets]

    def client(self, cid: int, learner: Any = None) -> ClientRole:
        """A new role of client ``cid`` (with a fresh learner from the plan unless one is
        given), as the session builds it and a deployment rebuilds it per message."""
        ctx = (self.context if self.trust is None
               else replace(self.context, trust=self.trust.site(cid)))
        return client_role(self.plan, ctx, cid, self.datasets[cid],
                           self.plan.learner(cid) if learner is None else learner,
                           self.X_public, self.X_test, self.y_test)

    def server(self, learners: list[Any]) -> ServerRole:
        return server_role(self.plan, self.context, len(self.X_public), learners,
                           self.client_sizes)


@dataclass
class Session:
    """A run's parties, built from its plan: the learners, the client roles, the server role.

    ``rounds`` is what the run takes (a one-shot method: fewer than planned, said by
    ``rounds_note``); ``malicious`` names the clients that ``attack`` turned."""

    roles: RoleFactory
    learners: list[Any]
    clients: dict[int, ClientRole]
    server: ServerRole
    rounds: int
    rounds_note: dict[str, Any] | None = None
    malicious: list[int] = field(default_factory=list)
    attack: Attack | None = None

    @property
    def plan(self) -> RunPlan:
        return self.roles.plan

    @property
    def method(self) -> Method:
        return self.roles.plan.method

    @property
    def client_sizes(self) -> list[int]:
        return self.roles.client_sizes

    @property
    def iterative(self) -> bool:
        """Whether a learner trains in steps (the records then count local steps)."""
        return uses_iterative(self.learners)

    def fresh_client(self, cid: int, learner: Any = None) -> ClientRole:
        """A new role of client ``cid``, built as this session built its own."""
        return self.roles.client(cid, learner)


def role_factory(method: Method | str, federation: Federation, models: list[Any], *, rounds: int,
                 period: int, seed: int,
                 options: Mapping[str, Any] | MethodOptions | None = None,
                 device: str = "cpu", precision: str = "fp32",
                 participation: Participation | None = None) -> RoleFactory:
    """The plan of ``method`` on ``federation`` and the context its roles share, checked
    before any learner exists: the options, the ``participation`` policy (a method that
    cannot take missing clients is refused), the models against the features.

    ``method`` is a method or its registered name; ``models`` holds one spec or estimator
    per client, or one for all.
    """
    method = get_method(method) if isinstance(method, str) else method
    options = method.parse_options(options)  # before any model is built
    datasets = method.client_datasets(federation.clients)
    plan = plan_run(method, n_roles=len(datasets), n_classes=federation.n_classes,
                    n_features=federation.n_features, rounds=rounds, period=period, seed=seed,
                    models=expand_per_client(list(models), federation.n_clients),
                    options=options, task=federation.task,
                    target_range=federation.target_range, device=device,
                    precision=precision, input_shape=federation.info.get("image_shape"))
    if participation is not None:  # before any training: refuse methods that cannot take it
        check_method(method, plan.settings, participation)
        participation.check_clients(len(datasets))
    check_run_input(federation.X_public, plan.specs, method, plan.settings)  # text vs numeric
    ctx = plan.context(truth_public=federation.y_public)
    ctx.scaling = federation.public_scaling
    ctx.X_public = federation.X_public  # a server role that distils on U (FedDF)
    with out_of_band():  # made before the run, as a deployment's prepare makes it
        trust = method.trusted_setup(plan.settings, len(datasets))
    return RoleFactory(plan, ctx, datasets, federation.X_public, federation.X_test,
                       federation.y_test, trust)


def build_session(method: Method | str, federation: Federation, models: list[Any], *, rounds: int,
                  period: int, seed: int,
                  options: Mapping[str, Any] | MethodOptions | None = None,
                  device: str = "cpu", precision: str = "fp32",
                  participation: Participation | None = None, malicious: int = 0,
                  attack: str | None = None, resuming: Checkpoint | None = None) -> Session:
    """Every role of a run of ``method`` on ``federation``, in this process.

    The checks of :func:`role_factory`, then the learners (checked by ``Method.validate``;
    against ``resuming``'s planned rounds when a checkpoint's run is extended), the client
    roles, ``malicious`` of them (drawn from ``seed``) turned by ``attack``
    (:mod:`fedlabels.method.adversary`), and the server role.
    """
    roles = role_factory(method, federation, models, rounds=rounds, period=period, seed=seed,
                         options=options, device=device, precision=precision,
                         participation=participation)
    plan, method = roles.plan, roles.plan.method
    learners = plan.checked_learners()
    method.validate(len(roles.datasets), plan.settings, learners)
    if resuming is not None:
        check_extension(plan, learners, resuming)
    n_rounds, note = rounds_to_run(plan, learners)  # a one-shot method stops early
    clients = {cid: roles.client(cid, learners[cid]) for cid in range(len(roles.datasets))}
    bad, used = plan_attack(method, len(roles.datasets), federation.n_classes, malicious,
                            attack, seed, federation.task)
    if used is not None:
        for cid in bad:
            make_malicious(clients[cid], used, seed, method.threat_model)
    return Session(roles, learners, clients, roles.server(learners), n_rounds, note, bad, used)


def build_server(plan: RunPlan, *, n_public: int, client_sizes: list[int],
                 truth_public: np.ndarray | None = None) -> tuple[list[Any], ServerRole]:
    """A deployment's server side: the learners of the plan (checked by ``Method.validate``)
    and the server role, for sites holding ``client_sizes`` private examples and |U| =
    ``n_public``; the server holds no copy of U (``truth_public``: U's true labels, for
    diagnostics, where the operator has them)."""
    learners = plan.checked_learners()
    plan.method.validate(len(client_sizes), plan.settings, learners)
    ctx = plan.context(truth_public=truth_public)
    return learners, server_role(plan, ctx, n_public, learners, client_sizes)


def build_client_role(plan: RunPlan, cid: int, data: ClientData, *, X_public: np.ndarray,
                      X_test: np.ndarray, y_test: np.ndarray,
                      scaling: tuple[np.ndarray, np.ndarray] | None = None,
                      trust: Any = None) -> ClientRole:
    """One site's client role: client ``cid`` of the plan, on the site's own ``data``, U,
    test set and U's ``scaling`` (with a fresh learner from the plan); ``trust``: the
    site's share of the out-of-band setup (its identity key, the roster, the run id)."""
    ctx = plan.context()
    ctx.scaling = scaling
    ctx.trust = trust
    return client_role(plan, ctx, cid, data, plan.learner(cid), X_public, X_test, y_test)
