"""What each site's own ledger says, beside the coordinator's accounting in the result.

On Flower a DP site charges its own lifetime ledger (:mod:`fedlabels.privacy.site_ledger`)
and follows its own plan (:mod:`.site_plan`); the coordinator's ``privacy`` block is the
coordinator's accounting only. After every message that charged its ledger, a site puts
what the ledger says in its reply's header (``site_ledger``, JSON:
:func:`~.site_privacy.ledger_report`); the coordinator keeps each site's latest and the
result's ``privacy.site_ledgers`` shows them, marked as reported by the sites and not
verified by the coordinator, with the disagreements (:func:`site_ledgers_block`): a site
whose ledger spent more in this run than the coordinator's ε, one that states ε at another
δ, one whose plan is not the run's, one that released more than its own budget (where the
site reports its lifetime figures, ``report-lifetime=true``), one that reported nothing
(when others did) or something unreadable.

This module does not import Flower.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from fedlabels.privacy.ledger import REL_TOL

#: the reply header key a site's report travels under
SITE_LEDGER = "site_ledger"
#: what marks the figures in the result
SOURCE = "reported by the site, not verified by the coordinator"
#: the largest report read (a site's reply is untrusted input)
MAX_REPORT = 16_384

_NUMBERS = ("epsilon", "delta", "ledger_epsilon", "ledger_delta")
_COUNTS = ("releases", "ledger_releases")
_BUDGET_FROM = ("privacy-plan", "ledger-epsilon", None)
#: a report's keys: this run's figures and the plan, always
RUN_KEYS = frozenset({"epsilon", "delta", "releases", "plan"})
#: the ledger's lifetime figures, in a report only where the site's node config says
#: ``report-lifetime=true``
LIFETIME_KEYS = frozenset({"ledger_epsilon", "ledger_delta", "ledger_releases", "budget",
                           "budget_from"})


def read_report(text: Any, rnd: int) -> dict[str, Any]:
    """A site's ``site_ledger`` header, checked (the round it came in, 1-based, added);
    ``{"malformed": why, "round": ...}`` where it is not one."""
    try:
        if not isinstance(text, str) or len(text) > MAX_REPORT:
            raise ValueError(f"not text of at most {MAX_REPORT} characters")
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) not in (RUN_KEYS, RUN_KEYS | LIFETIME_KEYS):
            raise ValueError("not the keys of a site ledger report")
        for key in (k for k in _NUMBERS if k in data):
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"{key} is not a number >= 0")
        for key in (k for k in _COUNTS if k in data):
            if isinstance(data[key], bool) or not isinstance(data[key], int) or data[key] < 0:
                raise ValueError(f"{key} is not an integer >= 0")
        budget = data.get("budget")
        if budget is not None and (isinstance(budget, bool) or not isinstance(
                budget, int | float) or not budget > 0):
            raise ValueError("budget is neither null nor a positive number")
        if data.get("budget_from") not in _BUDGET_FROM:
            raise ValueError("budget_from is not one of privacy-plan, ledger-epsilon, null")
        if data["plan"] is not None and not isinstance(data["plan"], dict):
            raise ValueError("plan is neither null nor a table")
    except (ValueError, RecursionError) as exc:
        return {"malformed": " ".join(str(exc).split())[:200], "round": rnd + 1}
    return {**data, "round": rnd + 1}


def _plan_differences(plan: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """What of a site's plan is not the run's configuration: its method, rounds and period,
    and each option the plan names (against the run's value of it)."""
    def show(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    run_options = config.get("options") or {}
    pairs = [(k, plan.get(k), config.get(k)) for k in ("method", "rounds", "period")]
    options = plan.get("options")
    pairs += [(f"option {k}", v, run_options.get(k))
              for k, v in (options.items() if isinstance(options, dict) else [])]
    return [f"{name} {show(mine)} (the run's {show(theirs)})" for name, mine, theirs in pairs
            if mine != theirs]


def site_ledgers_block(privacy: Mapping[str, Any], config: Mapping[str, Any],
                       reports: Mapping[int, dict[str, Any]],
                       lost: Mapping[int, Any], n_clients: int) -> dict[str, Any] | None:
    """The result's ``privacy.site_ledgers``: every site's report (``sites``, by client id),
    marked :data:`SOURCE`, and the ``disagreements`` with the coordinator's ``privacy``
    (its ε and δ) and run ``config``; None where no site reported (a method whose sites
    charge no ledger of their own)."""
    if not reports:
        return None
    eps, delta = privacy.get("epsilon"), privacy.get("delta")
    sites: dict[str, Any] = {}
    flags: list[str] = []
    for cid in range(n_clients):
        report = reports.get(cid)
        gone = lost.get(cid)
        if report is None:
            sites[str(cid)] = {"reported": False, **({"lost": True} if gone else {})}
            if gone is None:
                flags.append(f"site {cid} reported no ledger figures")
            continue
        sites[str(cid)] = dict(report)
        if "malformed" in report:
            flags.append(f"site {cid} sent an unreadable ledger report ({report['malformed']})")
            continue
        if isinstance(delta, int | float) and report["delta"] != delta:
            flags.append(f"site {cid} states its ε at δ = {report['delta']:g}, the "
                         f"coordinator at δ = {delta:g}: not compared")
        elif isinstance(eps, int | float) and report["epsilon"] > eps * (1.0 + REL_TOL):
            flags.append(f"site {cid}'s ledger spent ε = {report['epsilon']:.6g} in this run "
                         f"({report['releases']} release(s)), more than the coordinator's "
                         f"ε = {eps:.6g}")
        budget = report.get("budget")  # lifetime figures: only with report-lifetime=true
        if budget is not None and report["ledger_epsilon"] > budget * (1.0 + REL_TOL):
            flags.append(f"site {cid}'s ledger spent ε = {report['ledger_epsilon']:.6g} in "
                         f"its lifetime, more than its own budget ε = {budget:.6g}")
        if report["plan"] is not None:
            differ = _plan_differences(report["plan"], config)
            if differ:
                flags.append(f"site {cid}'s privacy-plan is not the run's: "
                             + "; ".join(differ))
    if not isinstance(eps, int | float):
        flags.append("the coordinator states no ε to compare the sites' figures with")
    return {"source": SOURCE, "sites": sites, "disagreements": flags}
