"""A site's own privacy plan: the method, rounds, period and options its client role obeys.

On Flower the run config comes from the coordinator. A site that does not want the
coordinator to decide how its data is protected names its own plan in its node config,
``privacy-plan=/path/site_plan.json`` (``fedlabels deploy prepare`` writes one per site,
``client_<i>.plan.json``)::

    {"method": "dp-fedct", "rounds": 20, "period": 5, "model": "mlp",
     "options": {"epsilon": 1.0, "mechanism": "xor", "sensitivity": "worst"}}

The site's client role is then built from this plan, not from the run's: its noise, its
release and step counts and the message kinds it answers follow the site's options, and a
message asking for less noise or more releases is refused, and so is any message of a
round beyond the plan's rounds, whatever the method. A run whose method differs is
refused outright, and so is one whose model differs from the plan's ``model`` (optional;
plans written before it have none). The file is read once a run (:func:`own_plan`): the
plan read at the run's first message (answered or refused) is kept in the site's message
record (:attr:`~.sequence.SequenceGuard.plan`), so a changed file applies from the next run.

A site without ``privacy-plan`` refuses every message, the hello included (``refused:
parameters``; its log says to name a plan or opt in), unless its node config says
``trust-coordinator=true``: then, and only then, it follows the coordinator's run config
(method, options, noise, rounds) and so trusts the coordinator's plan, says so in its log
at each run's hello and records each run's plan in its ledger
(:meth:`~fedlabels.privacy.site_ledger.SiteLedger.note_coordinator_plan`). Even then it
never imports and runs a network of its own (``module:PKG:FACTORY``) that only the
coordinator names: a site runs such code only where its plan's ``model`` names it, and it
trains no step count above its own ``max-steps`` (node config, default
:data:`DEFAULT_MAX_STEPS`): the run config's ``period`` and ``*_steps`` options, and every
``*steps`` a message names (a count derived from the period, PATE's teachers' 20 periods),
and answers no run of more rounds than its own ``max-rounds`` (default
:data:`DEFAULT_MAX_ROUNDS`), nor a message of a round beyond the run config's ``rounds``
(:func:`check_planned_round`). Every site also counts the rounds of a run it answers
itself (:meth:`~.sequence.SequenceGuard.rounds_with`) and answers no more than its plan's
(or that run config's) rounds, whatever the messages' round numbers. A site with a plan
trains its plan's counts and rounds, so ``max-steps`` or ``max-rounds`` beside
``privacy-plan`` is an error. This module does not import Flower.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedlabels.core.errors import BudgetRefusal, FedLabelsError, ParameterRefusal
from fedlabels.engines.flower.site import node_flag, node_integer
from fedlabels.runs.config import RunConfig

PLAN_KEYS = ("method", "rounds", "period", "options")
#: keys a plan may hold besides :data:`PLAN_KEYS`
OPTIONAL_PLAN_KEYS = ("model",)


def plan_of(cfg: RunConfig) -> dict[str, Any]:
    """The privacy plan of run ``cfg`` (what ``deploy prepare`` gives each site)."""
    return {"method": cfg.method, "rounds": cfg.rounds, "period": cfg.period,
            "model": cfg.model, "options": dict(cfg.options)}


def load_site_plan(path: str | Path) -> dict[str, Any]:
    """Read a site plan (JSON only; never code): the keys of :data:`PLAN_KEYS`, and
    perhaps those of :data:`OPTIONAL_PLAN_KEYS`."""
    path = Path(path).expanduser()
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: [[[[...]]]]
        raise FedLabelsError(f"the site's privacy-plan {str(path)!r} cannot be read as "
                             f"JSON ({type(exc).__name__}); fix the path in the node "
                             "config or rewrite the file.") from None
    if not isinstance(plan, dict) or not set(PLAN_KEYS) <= set(plan) \
            or not set(plan) <= {*PLAN_KEYS, *OPTIONAL_PLAN_KEYS}:
        raise FedLabelsError(f"the site's privacy-plan {str(path)!r} must hold exactly the "
                             f"keys {', '.join(PLAN_KEYS)} (and perhaps "
                             f"{', '.join(OPTIONAL_PLAN_KEYS)}).")
    if not isinstance(plan.get("model", ""), str):
        raise FedLabelsError(f"the site's privacy-plan {str(path)!r}: model must be a model "
                             "spec (a string, as --model takes it).")
    if not isinstance(plan["options"], dict):
        raise FedLabelsError(f"the site's privacy-plan {str(path)!r}: options must be a "
                             "table of method options.")
    return plan


#: the node config key by which a site without a plan opts in to the coordinator's plan
TRUST_KEY = "trust-coordinator"
#: the node config key of a site's bound on the step counts the coordinator names
MAX_STEPS_KEY = "max-steps"
#: ``max-steps`` where the node config names none: 2⁶² kept a site training for good
DEFAULT_MAX_STEPS = 10_000
#: the node config key of a site's bound on the rounds the coordinator's run config names
MAX_ROUNDS_KEY = "max-rounds"
#: ``max-rounds`` where the node config names none (the docs' longest run is 400 rounds;
#: the run config allows 10⁶)
DEFAULT_MAX_ROUNDS = 1_000


def trusts_coordinator(node_config: Mapping[str, Any]) -> bool:
    """Whether the site follows the coordinator's run config (``trust-coordinator=true``, no
    ``privacy-plan``) rather than its own plan; a site that names neither is refused
    (:class:`ParameterRefusal`), and one that names both is a configuration error."""
    trusts = node_flag(node_config, TRUST_KEY, False)
    if node_config.get("privacy-plan"):
        if trusts:
            raise FedLabelsError(f"the node config names a privacy-plan and {TRUST_KEY}=true; "
                                 "a site follows one of them: drop one.")
        for key, what in ((MAX_STEPS_KEY, "step counts"), (MAX_ROUNDS_KEY, "rounds")):
            if key in node_config:
                raise FedLabelsError(f"the node config names a privacy-plan and {key}, "
                                     f"which bounds the coordinator's {what} only where "
                                     f"{TRUST_KEY}=true; the plan's are the site's: drop "
                                     f"{key}.")
        return False
    max_steps(node_config)  # a bad value is refused at the first message, the hello too
    max_rounds(node_config)
    if trusts:
        return True
    raise ParameterRefusal(
        "this site names no privacy-plan in its node config, so it would follow whatever "
        "method, noise and rounds the coordinator's run config asks; refusing. Name the "
        "site's own plan, privacy-plan=/path/client_<i>.plan.json (the one `fedlabels "
        f"deploy prepare` wrote, checked), or set {TRUST_KEY}=true to follow the "
        "coordinator's run config.")


def own_plan(node_config: Mapping[str, Any],
             pinned: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The site's own plan: ``pinned`` (the run's, as read at its first message:
    :attr:`~.sequence.SequenceGuard.plan`) where given, else its ``privacy-plan`` file read
    now; None where the site trusts the coordinator (:func:`trusts_coordinator`)."""
    if trusts_coordinator(node_config):
        return None
    return pinned if pinned is not None else load_site_plan(str(node_config["privacy-plan"]))


def site_config(run: RunConfig, node_config: Mapping[str, Any],
                pinned: dict[str, Any] | None = None) -> RunConfig:
    """The configuration the site's client role is built from: the method, rounds, period
    and options of the site's own plan (:func:`own_plan`); the run's only where the site says
    ``trust-coordinator=true`` (:func:`trusts_coordinator`)."""
    plan = own_plan(node_config, pinned)
    check_site_model(run, plan)
    if plan is None:
        check_steps({"period": run.period, **run.options}, node_config, "run config")
        check_rounds(run.rounds, node_config)
        return run
    if plan["method"] != run.method:
        raise ParameterRefusal(f"the run uses method {run.method!r} but this site's "
                               f"privacy-plan says {plan['method']!r}; refusing.")
    return replace(run, rounds=int(plan["rounds"]), period=int(plan["period"]),
                   options=dict(plan["options"]))


def check_site_model(run: RunConfig, plan: dict[str, Any] | None) -> None:
    """The run's model must be the plan's ``model`` where the plan names one; a network of
    the site's own (``module:``) is imported and run only where the plan names it, never
    because the coordinator's run config does."""
    from fedlabels.learners import canonical_model_spec

    model = str(run.model)
    own = None if plan is None else plan.get("model")
    if own is not None:
        if canonical_model_spec(own) != canonical_model_spec(model):
            raise ParameterRefusal(f"the run uses model {model!r} but this site's "
                                   f"privacy-plan says {own!r}; refusing.")
        return
    if "module:" in model:
        raise ParameterRefusal(
            f"the run asks this site to import and run {model!r}, named by the coordinator "
            "only; a site runs a network of its own only where its privacy-plan names it: "
            f"add \"model\": {model!r} to the plan (deploy prepare writes it).")


def check_planned_round(node_config: Mapping[str, Any], rnd: int, run_rounds: int,
                        pinned: dict[str, Any] | None = None,
                        answering: int | None = None) -> None:
    """Refuse a message of round ``rnd`` (0-based) beyond the rounds of the site's own plan
    (:func:`own_plan`; with ``trust-coordinator=true``, the run config's ``run_rounds`` up
    to its ``max-rounds``), for every method, and one that would make ``answering`` (the
    site's own count of the run's rounds it answers, whatever the messages' round numbers
    say) go beyond them: a coordinator may not make a site answer more often than its
    plan."""
    plan = own_plan(node_config, pinned)
    if plan is None:
        bound = max_rounds(node_config)
        rounds, what = ((run_rounds, f"the coordinator's run config of {run_rounds} "
                                     "round(s)") if run_rounds <= bound
                        else (bound, f"this site's {MAX_ROUNDS_KEY} {bound}"))
    else:
        rounds = int(plan["rounds"])
        what = f"this site's privacy-plan of {rounds} round(s)"
    if rnd + 1 > rounds:
        raise BudgetRefusal(f"round {rnd + 1} is beyond {what}; refusing.")
    if answering is not None and answering > rounds:
        raise BudgetRefusal(f"this site has answered {answering - 1} round(s) of this run "
                            f"(its own count); another is beyond {what}; refusing.")


def max_steps(node_config: Mapping[str, Any]) -> int:
    """The node config's ``max-steps`` (:data:`DEFAULT_MAX_STEPS` where it names none)."""
    return node_integer(node_config, MAX_STEPS_KEY, DEFAULT_MAX_STEPS)


def max_rounds(node_config: Mapping[str, Any]) -> int:
    """The node config's ``max-rounds`` (:data:`DEFAULT_MAX_ROUNDS` where it names none)."""
    return node_integer(node_config, MAX_ROUNDS_KEY, DEFAULT_MAX_ROUNDS)


def check_rounds(rounds: int, node_config: Mapping[str, Any]) -> None:
    """Refuse the coordinator's run config of ``rounds`` rounds above the site's
    ``max-rounds``, for a site with ``trust-coordinator=true``."""
    bound = max_rounds(node_config)
    if rounds > bound:
        raise ParameterRefusal(f"the coordinator's run config asks this site for rounds = "
                               f"{rounds}, above its {MAX_ROUNDS_KEY} {bound}; refusing "
                               f"(raise {MAX_ROUNDS_KEY} in the node config to allow it).",
                               named=f"rounds is above the site's {MAX_ROUNDS_KEY} {bound}")


def check_steps(counts: Mapping[str, Any], node_config: Mapping[str, Any],
                where: str) -> None:
    """Refuse a step count of ``counts`` (the coordinator's run config, or a message's
    config, ``where``) above the site's ``max-steps``, for a site with
    ``trust-coordinator=true`` (a site with a plan trains its plan's counts): each key
    ``period`` or ending in ``steps`` whose value is an integer (another kind is the role's
    to refuse)."""
    if node_config.get("privacy-plan"):
        return
    bound = max_steps(node_config)
    for key, value in counts.items():
        if (key == "period" or key.endswith("steps")) and isinstance(value, int) \
                and not isinstance(value, bool) and value > bound:
            shown = value if value < 10**12 else f"{value:.3g}"
            raise ParameterRefusal(f"the coordinator's {where} asks this site for {key} = "
                                   f"{shown}, above its {MAX_STEPS_KEY} {bound}; refusing "
                                   f"(raise {MAX_STEPS_KEY} in the node config to allow it).",
                                   named=f"{key} is above the site's {MAX_STEPS_KEY} {bound}")
