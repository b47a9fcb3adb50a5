"""A site's own privacy plan: the method, rounds, period and options its client role obeys.

On Flower the run config comes from the coordinator. A site that does not want the
coordinator to decide how its data is protected names its own plan in its node config,
``privacy-plan=/path/site_plan.json`` (``fedlabels deploy prepare`` writes one per site,
``client_<i>.plan.json``)::

    {"method": "dp-fedct", "rounds": 20, "period": 5,
     "options": {"epsilon": 1.0, "mechanism": "xor", "sensitivity": "worst"}}

The site's client role is then built from this plan, not from the run's: its noise, its
release and step counts and the message kinds it answers follow the site's options, and a
message asking for less noise or more releases is refused, and so is any message of a
round beyond the plan's rounds, whatever the method. A run whose method differs is
refused outright. Without ``privacy-plan`` the site follows the run config (and so trusts
the coordinator's plan). This module does not import Flower.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedlabels.core.errors import BudgetRefusal, FedLabelsError, ParameterRefusal
from fedlabels.runs.config import RunConfig

PLAN_KEYS = ("method", "rounds", "period", "options")


def plan_of(cfg: RunConfig) -> dict[str, Any]:
    """The privacy plan of run ``cfg`` (what ``deploy prepare`` gives each site)."""
    return {"method": cfg.method, "rounds": cfg.rounds, "period": cfg.period,
            "options": dict(cfg.options)}


def load_site_plan(path: str | Path) -> dict[str, Any]:
    """Read a site plan (JSON only; never code): exactly the keys of :data:`PLAN_KEYS`."""
    path = Path(path).expanduser()
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FedLabelsError(f"the site's privacy-plan {str(path)!r} cannot be read as "
                             f"JSON ({type(exc).__name__}); fix the path in the node "
                             "config or rewrite the file.") from None
    if not isinstance(plan, dict) or sorted(plan) != sorted(PLAN_KEYS):
        raise FedLabelsError(f"the site's privacy-plan {str(path)!r} must hold exactly the "
                             f"keys {', '.join(PLAN_KEYS)}.")
    if not isinstance(plan["options"], dict):
        raise FedLabelsError(f"the site's privacy-plan {str(path)!r}: options must be a "
                             "table of method options.")
    return plan


def site_config(run: RunConfig, node_config: dict[str, Any]) -> RunConfig:
    """The configuration the site's client role is built from: the run's, with the method,
    rounds, period and options of the site's own plan where it names one."""
    given = node_config.get("privacy-plan")
    if not given:
        return run
    plan = load_site_plan(str(given))
    if plan["method"] != run.method:
        raise ParameterRefusal(f"the run uses method {run.method!r} but this site's "
                               f"privacy-plan says {plan['method']!r}; refusing.")
    return replace(run, rounds=int(plan["rounds"]), period=int(plan["period"]),
                   options=dict(plan["options"]))


def check_planned_round(node_config: dict[str, Any], rnd: int) -> None:
    """Refuse a message of round ``rnd`` (0-based) beyond the rounds of the site's own plan,
    for every method: a coordinator may not make a site answer more often than its plan."""
    given = node_config.get("privacy-plan")
    if not given:
        return
    rounds = int(load_site_plan(str(given))["rounds"])
    if rnd + 1 > rounds:
        raise BudgetRefusal(f"round {rnd + 1} is beyond this site's privacy-plan of {rounds} "
                            "round(s); refusing.")
