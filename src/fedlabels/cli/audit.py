"""``fedlabels audit``: a run attacked by membership inference; its options and the command."""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import nullcontext
from typing import Any

from fedlabels.core.errors import FedLabelsError


def add_audit_options(p: argparse.ArgumentParser) -> None:
    """The audit's own options (membership inference)."""
    g = p.add_argument_group("privacy audit (membership inference)")
    g.add_argument("--threat", default="forged-u",
                   choices=["forged-u", "fixed-u", "released-model", "curious-client"],
                   help="who attacks: forged-u (a server that slips the candidates into U; "
                        "default), fixed-u (a server with the ordinary U), released-model "
                        "(the final models are published), curious-client (a client seeing "
                        "what the server sends back); see docs/audit.md")
    g.add_argument("--mia-attacks", default=None, metavar="ATTACKS",
                   help="membership-inference attacks, comma-separated: rmia,lira,loss,shadow,"
                        "label-only (default all)")
    g.add_argument("--audit-members", type=int, default=200,
                   help="members per audited client (as many non-members and ghost "
                        "members; default 200, reduced to what the split offers)")
    g.add_argument("--audit-refs", type=int, default=4,
                   help="attacker reference/shadow models (default 4)")
    g.add_argument("--audit-views", type=int, default=3,
                   help="rounds recorded and attacked: round 1, the last, evenly spaced; "
                        "0 = all, for per-round VUL curves (default 3)")
    g.add_argument("--audit-population", type=int, default=200,
                   help="RMIA population points z (default 200)")
    g.add_argument("--audit-aug", type=int, default=4,
                   help="perturbed copies per candidate for the augmentation attack "
                        "(default 4)")
    g.add_argument("--audit-clients", default=None,
                   help="comma-separated client indices to attack (default all)")
    g.add_argument("--canaries", type=int, default=None,
                   help="DP audit: canaries in client 0's data for an empirical lower bound "
                        "on ε (one-run; a second run); default 100 or what the test split "
                        "spares for dp-fedct, dp-fedavg, dp-pate and fredy, 0 (off) otherwise")


def _title(result: Any, what: str) -> str:
    """``dp-fedct on breast_cancer, m = 5, R = 3, seed 0: membership inference (fixed-u)``
    and, below, the run's guarantee: an audit plot read without the ε it tests misleads."""
    from fedlabels.reporting.plots import wrap
    from fedlabels.results.run_result import guarantee_text

    privacy = result.extra.get("privacy") or {}
    model = privacy.get("threat_model") or {}
    threat = model.get("name") or model.get("key", "")
    eps = privacy.get("epsilon")
    claim = (f"ε = {eps:.3g}, δ = {privacy.get('delta', 0.0):g}, {guarantee_text(privacy)}"
             if isinstance(eps, int | float) and math.isfinite(eps)
             else "no DP guarantee")
    head = (f"{result.method} on {result.dataset}, m = {result.federation.get('n_clients')}, "
            f"R = {result.config.get('rounds')}, seed {result.seed}: {what}"
            + (f" ({threat})" if threat else ""))
    return wrap(head, 70) + "\n" + wrap(claim, 70)


def _clients(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise FedLabelsError(f"--audit-clients {text!r}: give comma-separated client indices, "
                             "e.g. 0,1,2.") from None


def cmd_audit(args: argparse.Namespace) -> int:
    """Run a method under its threat model, attack it, write the JSON and a ROC plot."""
    from fedlabels.audit.adversaries import audit_view
    from fedlabels.audit.canaries import (
        add_epsilon_lower_bound,
        canaries_for,
        epsilon_lower_bound_audit,
        format_lower_bound,
    )
    from fedlabels.audit.core import audit_federation, check_counts, parse_attacks
    from fedlabels.audit.curves import plot_vul_curves
    from fedlabels.audit.report import format_audit, plot_roc
    from fedlabels.cli.run_options import (
        checked_outputs,
        config_from_args,
        note_progress_metric,
        save_result,
        show_table,
    )
    from fedlabels.core.files import writing
    from fedlabels.core.randomness import reproducible
    from fedlabels.learners import as_models
    from fedlabels.results import privacy_line
    from fedlabels.runs.federation import federation_for
    from fedlabels.runs.loop import terminate_as_interrupt

    cfg = config_from_args(args)
    refuse_placement(cfg)
    audit_view(cfg.method, args.threat)  # fail before loading data
    check_counts(args.audit_refs, args.audit_views, args.audit_aug)
    attacks = parse_attacks(args.mia_attacks)
    audit_cfg = {"attacks": attacks, "members": args.audit_members, "refs": args.audit_refs,
                 "views": args.audit_views, "population": args.audit_population,
                 "aug": args.audit_aug, "clients": args.audit_clients, "threat": args.threat}
    # the default name tells audits apart: the threat in words, every audit setting hashed
    files = checked_outputs(cfg, args, models=False, roc=".roc.png", curves=".vul_rounds.png",
                            tag=f"_audit-{args.threat}",
                            hashed={"audit": {**audit_cfg, "canaries": args.canaries}})
    models = as_models(cfg.model)
    federation = federation_for(cfg)
    n_canaries = canaries_for(cfg.method, args.canaries, federation)
    note_progress_metric(args)
    # --insecure-reproducible-noise: the audited run's noise repeats from the seed (stamped)
    with (reproducible(cfg.seed) if cfg.insecure_reproducible_noise else nullcontext(),
          terminate_as_interrupt()):  # SIGTERM takes the Ctrl-C path, as in `run`
        result, _ = audit_federation(
            cfg.method, federation, models, rounds=cfg.rounds, period=cfg.period,
            seed=cfg.seed, eval_every=cfg.eval_every, options=cfg.options,
            config={**cfg.to_dict(), "audit": audit_cfg}, progress=not args.no_progress,
            attacks=attacks, n_members=args.audit_members, n_refs=args.audit_refs,
            n_population=args.audit_population, aug_k=args.audit_aug,
            views=args.audit_views, clients=_clients(args.audit_clients),
            threat=args.threat)
        if n_canaries and not result.extra.get("interrupted"):  # DP audit: canaries
            add_epsilon_lower_bound(result, epsilon_lower_bound_audit(
                cfg.method, federation, models, rounds=cfg.rounds, period=cfg.period,
                seed=cfg.seed, eval_every=cfg.eval_every, options=cfg.options,
                n_canaries=n_canaries))
    save_result(result, files)
    privacy = result.extra["privacy"]
    with writing(str(files["roc"])):
        roc = plot_roc(privacy, files["roc"],
                       title=_title(result, "membership inference"))
    with writing(str(files["curves"])):
        curves = plot_vul_curves(privacy, files["curves"],
                                 title=_title(result, "VUL per round"))
    show_table(result, args.metric)
    print()
    print(audit_header(privacy))
    print(format_audit(privacy))
    print(f"\nresult: {files['result']}  (ROC: {roc}; VUL per round: {curves})")
    line = privacy_line(result.extra.get("privacy") or {})
    if line:
        print(line)
    if "epsilon_lower_bound_audit" in result.extra.get("privacy", {}):
        print(format_lower_bound(result.extra["privacy"]["epsilon_lower_bound_audit"]))
    if result.extra.get("interrupted"):
        print("fedlabels: interrupted; the audit covers the rounds completed", file=sys.stderr)
        return 130
    return 0


def audit_header(privacy: dict[str, Any]) -> str:
    """Threat model, the sizes the audit chose, and the null baseline, in three lines."""
    t = privacy["threat_model"]
    s = privacy["audit"]["settings"]
    ci = privacy.get("null_vul_ci")
    ci_text = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    return (f"threat model {t['name']}: {t['description']}\n"
            f"audit sizes: {s['n_members_per_client']} members per client, as many "
            f"non-members and ghost members, {s['n_attacker']} attacker records, "
            f"{s['n_population']} population points, {s['n_evaluation']} for ACC "
            f"({s['sizing']})\n"
            f"null VUL (ghost members, same attacks and views) = {privacy['null_vul']:.4f}"
            f"{ci_text}")


def _fill_audit(p: argparse.ArgumentParser) -> None:
    """``audit``'s flags after the run options."""
    from fedlabels.cli.run_options import add_metric_flag, add_renamed_flags

    add_metric_flag(p)
    add_audit_options(p)
    add_renamed_flags(p, only=("--attacks",))
    p.set_defaults(func=cmd_audit)


def add_audit_parser(sub: Any) -> None:
    from fedlabels.cli.run_options import run_parser

    run_parser(sub, "audit", _fill_audit, help="run a method and attack what its server "
                                               "receives (membership inference: VUL, TPR at "
                                               "low FPR, ROC)")


def refuse_placement(cfg: Any) -> None:
    """The audit trains the audited run and its reference models on the CPU in fp32: a
    ``--device`` or ``--precision`` it would not honour is an error, not a silent CPU run."""
    from fedlabels.runs.config import RunConfig
    from fedlabels.runs.spec import by_name

    declared = by_name(RunConfig)
    asked = [f"{declared[name].flag} {getattr(cfg, name)}" for name in ("device", "precision")
             if getattr(cfg, name) != declared[name].default]
    if asked:
        raise FedLabelsError(f"{', '.join(asked)}: the audit trains the audited run and its "
                             "reference models on the CPU in fp32; leave "
                             f"{'it' if len(asked) == 1 else 'them'} out (a run of "
                             "`fedlabels run` takes them).")
