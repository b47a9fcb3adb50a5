"""``fedlabels run``: one method on one dataset, the result written beside its rounds."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fedlabels.cli.audit import add_audit_options, cmd_audit
from fedlabels.cli.run_options import (
    add_metric_flag,
    checked_outputs,
    config_from_args,
    interrupted_message,
    run_parser,
    save_result,
    show_table,
)


def cmd_run(args: argparse.Namespace) -> int:
    from fedlabels.api import run_config
    from fedlabels.results import privacy_line
    from fedlabels.runs.loop import terminate_as_interrupt
    from fedlabels.runs.progress import info

    if args.resume is not None:  # continue (or extend) a checkpointed run
        from fedlabels.cli.resume import resumed_run

        result, files = resumed_run(args, args.run_parser)
    elif args.audit:  # run + membership-inference audit
        return cmd_audit(args)
    else:
        from fedlabels.runs.checkpoint import SUFFIX

        cfg = config_from_args(args)
        files = checked_outputs(cfg, args, checkpoint=SUFFIX)  # before any data is loaded
        with terminate_as_interrupt():  # SIGTERM keeps the completed rounds, like Ctrl-C
            result = run_config(cfg, progress=not args.no_progress,
                                checkpoint=files["checkpoint"])
    save_result(result, files)
    show_table(result, args.metric)
    info(f"\nresult: {files['result']}  (rounds: {files['rounds table']})")
    line = privacy_line(result.extra.get("privacy") or {})
    if line:
        info(line)
    if result.extra.get("interrupted"):
        print(interrupted_message(result), file=sys.stderr)
        return 130
    return 0


def participation_arg(text: str) -> float | int:
    """``3`` -> 3 clients per round; ``0.5`` or ``1.0`` -> a probability (range checked in
    :class:`~fedlabels.runs.config.RunConfig`)."""
    try:
        return int(text) if text.strip().isdigit() else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability such as 0.5 or a whole "
                                         f"number of clients such as 3, got {text!r}") from None


def add_run_parser(sub: Any) -> None:
    p = run_parser(sub, "run", help="run one method on one dataset")
    add_metric_flag(p)
    p.add_argument("--participation", type=participation_arg, metavar="Q|K",
                   help="partial participation: each client takes part in a round with "
                        "probability Q (0 < Q <= 1, with a decimal point: 0.5, 1.0), or "
                        "exactly K clients per round (a whole number: 3); default every client")
    p.add_argument("--dropout", type=float, metavar="P",
                   help="probability that a selected client fails to reply (0 <= P < 1)")
    p.add_argument("--deadline", type=float, metavar="S",
                   help="drop replies whose simulated time exceeds S (1 = a client of mean "
                        "size and median speed; stragglers, see docs/robustness.md)")
    p.add_argument("--batch-clients", choices=("auto", "on", "off"),
                   help="train the clients' torch models together, one vectorised step for "
                        "all: on | off | auto (default: on when they run on CUDA)")
    p.add_argument("--resume", metavar="RESULT.json",
                   help="continue the interrupted run of this result from the checkpoint "
                        "beside it (RESULT.checkpoint.npz), or with --rounds N extend a "
                        "finished one; its files are updated in place")
    add_audit_options(p, flag=True)
    p.set_defaults(func=cmd_run, run_parser=p)
