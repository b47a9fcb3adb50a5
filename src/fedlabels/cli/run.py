"""``fedlabels run`` and ``fedlabels resume``: one method on one dataset, the result written
beside its rounds; or a checkpointed run continued."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fedlabels.cli.run_options import (
    add_renamed_flags,
    checked_outputs,
    config_from_args,
    interrupted_message,
    run_parser,
    save_result,
)


def cmd_run(args: argparse.Namespace) -> int:
    from fedlabels.api import run_config
    from fedlabels.engines.checkpoint import SUFFIX
    from fedlabels.engines.runner import terminate_as_interrupt

    cfg = config_from_args(args, simulator=True)
    files = checked_outputs(cfg, args, checkpoint=SUFFIX)  # before any data is loaded
    with terminate_as_interrupt():  # SIGTERM keeps the completed rounds, like Ctrl-C
        result = run_config(cfg, progress=not args.no_progress,
                            checkpoint=files["checkpoint"])
    return _finish(result, files)


def cmd_resume(args: argparse.Namespace) -> int:
    from fedlabels.cli.resume import resumed_run

    return _finish(*resumed_run(args))


def _finish(result: Any, files: dict[str, Path]) -> int:
    """Write the run's files, print its table; 130 for an interrupted run."""
    from fedlabels.progress import info
    from fedlabels.results import format_table, privacy_line

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
    p = run_parser(sub, "run", simulator=True, help="run one method on one dataset")
    add_renamed_flags(p)
    p.set_defaults(func=cmd_run)
    r = sub.add_parser("resume", help="continue an interrupted run from the checkpoint beside "
                                      "its result, or extend a finished one (--rounds N)",
                       description="Continue the run of RESULT.json from the checkpoint "
                                   "beside it (RESULT.checkpoint.npz), which holds its "
                                   "configuration; its files are updated in place.")
    r.add_argument("result", metavar="RESULT.json", help="the result of `fedlabels run`")
    r.add_argument("--rounds", type=int, metavar="N", help="extend the run to N rounds")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    r.set_defaults(func=cmd_resume, unknown_hint="; resume takes RESULT.json, --rounds and "
                   "--no-progress only: the checkpoint holds the run's configuration")
