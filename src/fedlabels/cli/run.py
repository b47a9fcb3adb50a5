"""``fedlabels run``: one method on one dataset, the result written beside its rounds."""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Any

from fedlabels.cli.audit import add_audit_options, cmd_audit
from fedlabels.cli.run_options import (
    checked_outputs,
    config_from_args,
    interrupted_message,
    run_parser,
    save_result,
)


def cmd_run(args: argparse.Namespace) -> int:
    from fedlabels.api import run_config
    from fedlabels.engines.runner import terminate_as_interrupt
    from fedlabels.progress import info
    from fedlabels.results import format_table

    if args.audit:  # run + membership-inference audit
        return cmd_audit(args)
    cfg = config_from_args(args)
    files = checked_outputs(cfg, args)  # before any data is loaded
    with terminate_as_interrupt():  # SIGTERM keeps the completed rounds, like Ctrl-C
        result = run_config(cfg, progress=not args.no_progress)
    save_result(result, files)
    print(format_table([result.summary_row()]))
    info(f"\nresult: {files['result']}  (rounds: {files['rounds table']})")
    line = privacy_line(result.extra.get("privacy") or {})
    if line:
        info(line)
    if result.extra.get("interrupted"):
        print(interrupted_message(result), file=sys.stderr)
        return 130
    return 0


def privacy_line(privacy: dict[str, Any]) -> str | None:
    """``privacy: ε = 3.21, δ = 1e-05 (conditional on ...)`` for a run with a finite ε."""
    eps = privacy.get("epsilon")
    if not isinstance(eps, int | float) or not math.isfinite(eps):
        return None  # no DP mechanism (or nothing released yet)
    guarantee = privacy.get("guarantee", "none")
    if guarantee == "conditional":
        qualifier = f"conditional on {privacy.get('conditional_on')}"
    elif guarantee == "formal":
        relation = str(privacy.get("neighbouring") or "").split(":")[0]
        against = re.split(r" \(|;", str(privacy.get("guarantee_against") or ""))[0]
        qualifier = ", ".join(x for x in ("formal", relation, against and f"against {against}")
                              if x)
    else:
        qualifier = f"guarantee: none - {privacy.get('reason', 'not stated')}"
    return f"privacy: ε = {eps:.4g}, δ = {privacy.get('delta', 0.0):g} ({qualifier})"


def add_run_parser(sub: Any) -> None:
    p = run_parser(sub, "run", help="run one method on one dataset")
    add_audit_options(p, flag=True)
    p.set_defaults(func=cmd_run)
