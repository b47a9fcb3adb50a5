"""``fedlabels run``: one method on one dataset, the result written beside its rounds."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fedlabels.cli.audit import add_audit_options, cmd_audit
from fedlabels.cli.run_options import config_from_args, default_output, run_parser


def cmd_run(args: argparse.Namespace) -> int:
    from fedlabels.api import run_config
    from fedlabels.results import format_table

    if args.audit:  # run + membership-inference audit
        return cmd_audit(args)
    cfg = config_from_args(args)
    out = Path(cfg.output) if cfg.output else default_output(cfg)
    result = run_config(cfg, progress=not args.no_progress)
    result.save_json(out)
    result.save_csv(out.with_suffix(".csv"))
    if result.client_models:  # final models beside the result, for `fedlabels inspect`
        from fedlabels.interpret import save_models

        save_models(result, out)
    print(format_table([result.summary_row()]))
    print(f"\nresult: {out}  (rounds: {out.with_suffix('.csv')})")
    if result.extra.get("interrupted"):
        print(f"fedlabels: interrupted after round {result.rounds[-1].round}; the rounds "
              "completed so far were saved", file=sys.stderr)
        return 130
    return 0


def add_run_parser(sub: Any) -> None:
    p = run_parser(sub, "run", help="run one method on one dataset")
    add_audit_options(p, flag=True)
    p.set_defaults(func=cmd_run)
