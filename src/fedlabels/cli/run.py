"""``fedlabels run``: one method on one dataset, the result written beside its rounds."""

from __future__ import annotations

import argparse
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
    from fedlabels.results import format_table, privacy_line

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


def add_run_parser(sub: Any) -> None:
    p = run_parser(sub, "run", help="run one method on one dataset")
    add_audit_options(p, flag=True)
    p.set_defaults(func=cmd_run)
