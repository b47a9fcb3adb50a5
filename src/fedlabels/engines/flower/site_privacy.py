"""A site's privacy settings from its node config, and its lifetime ledger.

Node config keys (``flower-supernode --node-config '...'``), set by the site operator:

``ledger-dir``
    Where the site keeps its privacy ledgers and message records (a 0700 directory; default
    ``$FLWR_HOME/fedlabels-ledger``, or ``~/.flwr/fedlabels-ledger``). Keep it across runs:
    it is the site's memory of what it released.
``ledger-epsilon``
    The lifetime ε budget of each dataset of this site over all runs (a positive number),
    recorded in the dataset's ledger when it is first used or changed (``deploy ledger``
    shows it and what is left).
    Without it, a site with its own ``privacy-plan`` allows each dataset one run of that
    plan (:func:`with_plan_budget`); a site without a plan (``trust-coordinator=true``:
    :mod:`.site_plan`) records releases, unlimited.
``ledger-delta``
    The δ at which the ledger states ε (default 1e-5).
``evaluate``
    ``false``: the site declines every evaluation request (:func:`site_evaluates`). Its test
    scores are computed on the coordinator's test set with a model that the privacy
    guarantee may not cover (DP-FedCT's XOR, k-ary and subsample-aggregate sites keep a
    model trained without noise), so a coordinator that chooses the test set can query
    that model. Default ``true``.

This module does not import Flower.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.site import node_flag
from fedlabels.method.dpsgd_client import SecretNoiseClient
from fedlabels.privacy.ledger import Ledger
from fedlabels.privacy.site_ledger import SiteLedger

DEFAULT_DELTA = 1e-5


def _site_path(node_config: Mapping[str, Any], key: str, default: str) -> Path:
    """The node config's ``key``, else ``default`` in ``$FLWR_HOME`` (or ``~/.flwr``)."""
    given = node_config.get(key)
    if given:
        return Path(str(given)).expanduser()
    return Path(os.environ.get("FLWR_HOME") or str(Path.home() / ".flwr")) / default


def ledger_dir(node_config: Mapping[str, Any]) -> Path:
    """Where this site keeps its ledgers (node config ``ledger-dir``, else FLWR_HOME)."""
    return _site_path(node_config, "ledger-dir", "fedlabels-ledger")


def key_path(node_config: Mapping[str, Any]) -> Path:
    """Where this site's state key lives (node config ``state-key``, else FLWR_HOME); the
    key seals its state and authenticates its ledger."""
    return _site_path(node_config, "state-key", "fedlabels-state.key")


def _number(node_config: Mapping[str, Any], key: str, default: float | None,
            upper: float) -> float | None:
    raw = node_config.get(key, default)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(raw, bool) or not (0 < value < upper):
        raise FedLabelsError(f"node config {key} must be a number in (0, {upper:g}), got "
                             f"{raw!r}.")
    return value


def site_ledger_budget(node_config: Mapping[str, Any]) -> tuple[float | None, float]:
    """The operator's lifetime ε (None: not set) and the ledger's δ, checked."""
    return (_number(node_config, "ledger-epsilon", None, math.inf),
            _number(node_config, "ledger-delta", DEFAULT_DELTA, 1.0) or DEFAULT_DELTA)


def open_site_ledger(node_config: Mapping[str, Any], key: bytes, X: Any,
                     y: Any) -> SiteLedger:
    """This site's ledger of the dataset (X, y), with the operator's budget and δ."""
    epsilon, delta = site_ledger_budget(node_config)
    return SiteLedger.open(ledger_dir(node_config), key, X, y, epsilon=epsilon, delta=delta)


def charges_site_ledger(role: Any) -> bool:
    """Whether a site whose client is ``role`` releases with its own noise and charges its
    ledger: with a ``privacy-plan`` and no ``ledger-epsilon`` it then takes one run of that
    plan as its lifetime budget (:func:`with_plan_budget`; every built-in such role's
    options plan a total, which its method's validation requires). Computes nothing from
    the data (``role.planned_events()`` may: an ``empirical`` s*)."""
    return isinstance(role, SecretNoiseClient)


def with_plan_budget(ledger: SiteLedger, node_config: Mapping[str, Any],
                     role: Any) -> SiteLedger:
    """``ledger`` with the lifetime budget of a site that names its own ``privacy-plan`` but
    no ``ledger-epsilon``: what one run of the plan charges (``role.planned_events()``, at
    the ledger's δ, as the first run computed it: :meth:`SiteLedger.fix_plan_budget`), and
    one noiseless answer. Without this, every new run of the same
    deployment would release the whole plan again with fresh noise (docs/privacy.md, "New
    runs on Flower"). A budget the operator set, or no plan, leaves ``ledger`` as it is."""
    if ledger.epsilon is not None or not node_config.get("privacy-plan"):
        return ledger
    def one_run() -> float | None:  # computed only before the budget is recorded
        planned = role.planned_events()
        return Ledger(ledger.delta, None, list(planned)).spent().epsilon if planned else None

    budget = ledger.fix_plan_budget(one_run)
    return ledger if budget is None else replace(ledger, epsilon=budget, plan_budget=True)


def site_evaluates(node_config: Mapping[str, Any]) -> bool:
    """The node config's ``evaluate`` (default true): false, the site declines evaluation
    requests (:func:`fedlabels.method.replies.declined_evaluation`)."""
    return node_flag(node_config, "evaluate", True)


#: the node config key with which a site adds its ledger's lifetime figures to its reports
REPORT_LIFETIME = "report-lifetime"


def ledger_report(role: Any, node_config: Mapping[str, Any],
                  plan: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What the site's ledger says after the message in hand, for the coordinator's result
    (``site_ledger`` in the reply's header; None where the message charged nothing): this
    run's releases and their (ε, δ) (the role's own ledger of the run) and the plan the site
    follows (None: the coordinator's, ``trust-coordinator=true``). With
    ``report-lifetime=true`` in the node config also the ledger's lifetime releases, ε at its
    δ and budget (``budget_from``: ``privacy-plan``: one run of it; ``ledger-epsilon``: the
    operator's; None: recorded, not limited); without it (the default) those stay at the
    site, since they tell this coordinator about the site's other runs.

    These are functions of the site's configuration (its plan's options, its node config's
    budget and δ), of |U| and of how many releases its ledger holds, as every charged event
    is: its noise comes from the options or the server's request and its s* from the
    options and |U| (an ``empirical`` estimate is the server's: the ledger takes 2|U|),
    never from the rows. The coordinator cannot check them. ``plan``: the site's plan as
    the run pinned it (:func:`~.site_plan.own_plan`; None: read the file, if any)."""
    ledger, spent = getattr(role, "site_ledger", None), getattr(role, "site_spent", None)
    if ledger is None or spent is None or ledger.releases < 0:
        return None
    from fedlabels.engines.flower.site_plan import own_plan

    run = role.ledger
    releases = len(run.events)
    # the ledger holds this run's releases only, at the run's δ: its ε is the run's (else
    # accounted again: a site with ledger-epsilon that allowed earlier runs)
    alone = ledger.releases == releases and ledger.delta == run.delta
    report = {"epsilon": spent.epsilon if alone else run.spent().epsilon, "delta": run.delta,
              "releases": releases, "plan": own_plan(node_config, plan)}
    if node_flag(node_config, REPORT_LIFETIME, False):
        report |= {"ledger_epsilon": spent.epsilon, "ledger_delta": ledger.delta,
                   "ledger_releases": ledger.releases, "budget": ledger.epsilon,
                   "budget_from": "privacy-plan" if ledger.plan_budget else
                   "ledger-epsilon" if ledger.epsilon is not None else None}
    return report
