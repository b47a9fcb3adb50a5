"""The ``fedlabels`` command line.

One module per group of subcommands: :mod:`.run` (``run`` and the run options shared with
``audit`` and ``deploy``), :mod:`.audit`, :mod:`.deploy`, :mod:`.info` (``datasets``,
``models``, ``methods``), :mod:`.bound`, :mod:`.misc` (``fetch``, ``inspect``, ``plot``,
``demo``), :mod:`.report` (``report``, ``predict``); :mod:`.method_flags` generates the
method-option flags from the methods' declarations. Building the parser imports neither
torch, Flower nor dp-accounting.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from fedlabels.core.errors import FedLabelsError, show_warnings_in_one_line


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, like every other ``fedlabels`` error (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fedlabels: error: {message}{self._hint(message)} "
                     f"(see `{self.prog} -h`)\n")

    def _hint(self, message: str) -> str:
        """A "did you mean" for an unknown flag or an invalid choice, or where a global flag
        goes; "" when there is nothing close."""
        import re

        from fedlabels.core.errors import did_you_mean

        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            return did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        if not message.startswith("unrecognized arguments:"):
            return ""
        unknown = [t.split("=")[0] for t in message.split(":", 1)[1].split()
                   if t.startswith("-")]
        globals_ = {s for a in self._actions for s in a.option_strings}
        if any(t in globals_ for t in unknown):
            return (" (-q, -v and --threads go before the subcommand, e.g. "
                    "`fedlabels -q run ...`)")
        known = {s for a in self._actions if isinstance(a, argparse._SubParsersAction)
                 for p in a.choices.values() for b in p._actions for s in b.option_strings
                 if s.startswith("--")}
        return next((did_you_mean(t, known) for t in unknown if did_you_mean(t, known)), "")


def build_parser() -> argparse.ArgumentParser:
    from fedlabels.cli.audit import add_audit_parser
    from fedlabels.cli.bound import add_bound_parser
    from fedlabels.cli.deploy import add_deploy_parser
    from fedlabels.cli.info import add_info_parsers
    from fedlabels.cli.misc import add_misc_parsers
    from fedlabels.cli.report import add_report_parsers
    from fedlabels.cli.run import add_run_parser
    from fedlabels.core.provenance import version

    parser = _Parser(
        prog="fedlabels",
        description="Federated learning that shares labels, not models.")
    parser.add_argument("--version", action="version", version=f"fedlabels {version()}")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per training process (default: $FEDLABELS_THREADS, "
                             "else 1, the fastest for these small models on a busy machine)")
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true",
                      help="print only errors and the final table (no progress)")
    loud.add_argument("-v", "--verbose", action="store_true",
                      help="a progress line per round, even on a terminal")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    add_audit_parser(sub)
    add_info_parsers(sub)
    add_misc_parsers(sub)
    add_report_parsers(sub)
    add_bound_parser(sub)
    add_deploy_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from fedlabels.core.provenance import command_line

    parser = build_parser()
    args = parser.parse_args(argv)
    show_warnings_in_one_line()
    from fedlabels.core.threads import set_threads
    from fedlabels.runs.progress import NORMAL, QUIET, VERBOSE, set_verbosity, verbosity

    before = verbosity()
    set_verbosity(QUIET if args.quiet else VERBOSE if args.verbose else NORMAL)
    try:
        if args.threads is not None:
            if args.threads < 1:
                raise FedLabelsError(f"--threads must be >= 1, got {args.threads}.")
            set_threads(args.threads)
        # results record the command line they were made by (provenance)
        with command_line(["fedlabels", *(sys.argv[1:] if argv is None else argv)]):
            code = args.func(args)
    except FedLabelsError as exc:
        print(f"fedlabels: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("fedlabels: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # `fedlabels ... | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
    finally:
        set_verbosity(before)
    if argv is None:
        sys.exit(code)
    return code


__all__ = ["build_parser", "main"]
