"""The ``fedlabels`` command line.

One module per group of subcommands: :mod:`.run` (``run`` and the run options shared with
``audit`` and ``deploy``), :mod:`.audit`, :mod:`.deploy`, :mod:`.info` (``datasets``,
``models``, ``methods``), :mod:`.bound`, :mod:`.misc` (``fetch``, ``inspect``, ``plot``,
``demo``); :mod:`.method_flags` generates the method-option flags from the methods'
declarations. Building the parser imports neither torch, Flower nor dp-accounting.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from fedlabels.errors import FedLabelsError


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, like every other ``fedlabels`` error (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fedlabels: error: {message} (see `{self.prog} -h`)\n")


def build_parser() -> argparse.ArgumentParser:
    from fedlabels.cli.audit import add_audit_parser
    from fedlabels.cli.bound import add_bound_parser
    from fedlabels.cli.deploy import add_deploy_parser
    from fedlabels.cli.info import add_info_parsers
    from fedlabels.cli.misc import add_misc_parsers
    from fedlabels.cli.run import add_run_parser

    parser = _Parser(
        prog="fedlabels",
        description="Federated learning that shares labels, not models.")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice; 1 is best on a "
                             "busy machine)")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    add_audit_parser(sub)
    add_info_parsers(sub)
    add_misc_parsers(sub)
    add_bound_parser(sub)
    add_deploy_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.threads is not None:
            if args.threads < 1:
                raise FedLabelsError(f"--threads must be >= 1, got {args.threads}.")
            import torch

            torch.set_num_threads(args.threads)
        code = args.func(args)
    except FedLabelsError as exc:
        print(f"fedlabels: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("fedlabels: interrupted", file=sys.stderr)
        code = 130
    if argv is None:
        sys.exit(code)
    return code


__all__ = ["build_parser", "main"]
