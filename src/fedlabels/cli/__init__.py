"""The ``fedlabels`` command line.

One module per group of subcommands: :mod:`.run` (``run`` and ``resume``),
:mod:`.run_options` (the run parameters' flags, generated from
:class:`~fedlabels.runs.config.RunConfig` and shared with ``audit`` and ``deploy``),
:mod:`.audit`, :mod:`.deploy`, :mod:`.info` (``datasets``, ``models``, ``methods``),
:mod:`.bound`, :mod:`.misc` (``fetch``, ``inspect``, ``plot``, ``demo``), :mod:`.report`
(``report``, ``predict``); :mod:`.method_flags` generates the method-option flags from the
methods' declarations. The global flags (``-q``, ``-v``, ``--threads``) go before or after
the subcommand. Building the parser imports neither torch, Flower nor dp-accounting, and
:func:`main` adds a subcommand's arguments only when it is chosen (:mod:`.lazy`): ``run``'s
method flags import every method, which ``fedlabels plot`` or ``--help`` does not need.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from fedlabels.core.errors import FedLabelsError, show_warnings_in_one_line


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, like every other ``fedlabels`` error (exit status 2); no
    abbreviated flags (``--rou 3`` ran 3 rounds, ``--text`` meant ``--text-column``: a
    misspelling must be an error, and a flag added later must not change what an old
    command line means). Subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from fedlabels.cli.lazy import Subcommands

        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", Subcommands)  # a subcommand is built when chosen

    def error(self, message: str, prog: str | None = None) -> NoReturn:
        """Exit 2 with one line that ends by naming the help to read (``prog -h``)."""
        hint = self._hint(message)
        self.exit(2, f"fedlabels: error: {self._subcommand_named(message)}{hint} "
                     f"(see `{prog or self.prog} -h`)\n")

    def _subcommand_named(self, message: str) -> str:
        """``message`` with argparse's internal name of the subcommand (``command``,
        ``deploy_command``, ``bound``) put in words: "the following arguments are required:
        command" is ``give a subcommand: run, resume, ...``, and "argument command: invalid
        choice: 'x' (choose from ...)" is ``'x' is not a subcommand (choose from ...)``."""
        import re

        subs = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not subs[0].choices:
            return message
        dest, names = subs[0].dest, ", ".join(dict.fromkeys(subs[0].choices))
        missing = message.removeprefix("the following arguments are required: ").split(", ")
        if dest in missing:  # and a flag it does not know (`fedlabels -V`) said nothing
            return f"give a subcommand: {names}{self._unknown_flags()}"
        choice = re.fullmatch(rf"argument {re.escape(dest)}: invalid choice: '([^']*)' .*",
                              message)
        if choice:
            word = choice.group(1)
            flag = f" (did you mean '--{word}'?)" if f"--{word}" in \
                self._option_string_actions else ""  # `fedlabels version`
            return f"{word!r} is not a subcommand; choose from {names}{flag}"
        return message

    def _unknown_flags(self) -> str:
        """``; --verion is no flag of fedlabels (did you mean '--version'?)`` for the first
        flag of the command line (:meth:`parse_args`) that this parser does not know."""
        from fedlabels.core.errors import did_you_mean

        known = [s for s in self._option_string_actions if s.startswith("--")]
        for token in getattr(self, "_argv", []):
            flag = token.split("=")[0]
            if flag.startswith("-") and flag not in self._option_string_actions \
                    and not self._negative_number_matcher.match(flag):  # a value: -1
                return f"; {flag} is no flag of {self.prog}{did_you_mean(flag, known)}"
        return ""

    def _hint(self, message: str) -> str:
        """A "did you mean" for an invalid choice; "" when there is nothing close (unknown
        flags get theirs in :meth:`parse_args`)."""
        import re

        from fedlabels.core.errors import did_you_mean

        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            return did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        return ""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse does, but a misspelt flag gets the closest one of its subcommand."""
        self._argv = list(sys.argv[1:] if args is None else args)  # for the errors' hints
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            # `deploy local` and `bound convergence`: the help to read is the leaf's
            leaf = getattr(parsed, "deploy_command", None) if command == "deploy" else \
                getattr(parsed, "bound", None) if command == "bound" else None
            hint = _command_hint(self, extras, command) or _option_hint(parsed, extras) \
                or _model_parameter_hint(parsed, extras) or _suggestion(self, extras, command)
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}"
                       f"{_flag_for_words(parsed, extras)}"
                       f"{getattr(parsed, 'unknown_hint', '')}",
                       " ".join(w for w in (self.prog, command, leaf) if w) if command
                       else None)
        return parsed


def _command_hint(parser: argparse.ArgumentParser, extras: list[str],
                  command: str | None) -> str:
    """`` (--plot is no flag of run: plot is a command of its own, `fedlabels plot -h`)`` for
    the first unknown flag that names another subcommand (a misspelt flag's nearest,
    '--report' for '--plot', would do something else); "" otherwise."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    names = set(subs[0].choices) if subs else set()
    for token in extras:
        name = token.split("=")[0].removeprefix("--")
        if token.startswith("--") and name in names and name != command:
            return (f" (--{name} is no flag of {command or parser.prog}: {name} is a command "
                    f"of its own, `fedlabels {name} -h`)")
    return ""


def _suggestion(parser: argparse.ArgumentParser, extras: list[str], command: str | None) -> str:
    """`` (did you mean '--clients'?)`` for the first unknown flag close to one of the
    subcommand's flags."""
    from fedlabels.core.errors import did_you_mean

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    chosen = subs[0].choices.get(command) if subs and command else None
    known = [s for p in _leaf_parsers(chosen or parser) for a in p._actions
             for s in a.option_strings if s.startswith("--") and a.help != argparse.SUPPRESS]
    hints = (did_you_mean(t.split("=")[0], known) for t in extras if t.startswith("-"))
    return next((h for h in hints if h), "")


def _flag_for_words(parsed: argparse.Namespace, extras: list[str]) -> str:
    """`` (a method and a dataset are flags: --method fedct --dataset wine)`` for the words
    of ``fedlabels run fedct wine`` that name a method or a dataset, where the subcommand
    takes those flags; "" otherwise."""
    if not hasattr(parsed, "method") or not hasattr(parsed, "dataset"):
        return ""
    from fedlabels.data.registry import REGISTRY
    from fedlabels.methods.registry import METHODS

    flags = [f"--method {w}" if w in METHODS else f"--dataset {w}"
             for w in extras if not w.startswith("-") and (
                 w in METHODS or w in REGISTRY or w.startswith(("csv:", "imagefolder:")))]
    if not flags:
        return ""
    return f" (a method and a dataset are given as flags: {' '.join(flags)})"


def _option_hint(parsed: argparse.Namespace, extras: list[str]) -> str:
    """`` (--top-k is an option of method 'x', not a flag: ...)`` for an unknown flag that
    names an option of the chosen method (a plug-in's options have no flags)."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.methods.registry import get_method

    method = getattr(parsed, "method", None)
    if not isinstance(method, str):
        return ""
    try:
        names = {info.name for info in get_method(method).options_class.declared()}
    except FedLabelsError:
        return ""
    for token in extras:
        flag = token.split("=")[0]
        key = flag[2:].replace("-", "_")
        if flag.startswith("--") and key in names:
            return (f" ({flag} is an option of method {method!r}, not a flag: give it as "
                    f"--opt {key}=VALUE)")
    return ""


def _model_parameter_hint(parsed: argparse.Namespace, extras: list[str]) -> str:
    """`` (--augment is a parameter of the model, not a flag: --model 'cnn(augment=true)')``
    for an unknown flag naming a torch network's parameter, where the subcommand takes
    ``--model``; "" otherwise."""
    if not hasattr(parsed, "model"):
        return ""
    from fedlabels.learners.net_specs import PARAMS

    names = {name for params in PARAMS.values() for name in params} | {"hidden"}
    for i, token in enumerate(extras):
        flag, _, value = token.partition("=")
        key = flag[2:].replace("-", "_")
        if flag.startswith("--") and key in names:
            following = extras[i + 1] if i + 1 < len(extras) else "-"
            given = value or (following if not following.startswith("-") else
                              "true" if key in ("augment", "warm_start") else "VALUE")
            model = str(parsed.model or ("cnn" if key in ("arch", "augment", "shape") else
                                         "resnet18" if key == "width" else "mlp"))
            spec = f"{model[:-1]},{key}={given})" if model.endswith(")") else \
                f"{model}({key}={given})"
            return f" ({flag} is a parameter of the model, not a flag: --model '{spec}')"
    return ""


class _Version(argparse._VersionAction):
    """``--version``: the installed version, read from the package metadata when asked."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from fedlabels.core.provenance import version

        self.version = f"fedlabels {version()}"
        super().__call__(parser, namespace, values, option_string)


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``fedlabels`` parser. With ``lazy``, a subcommand's arguments are added when it is
    chosen (:mod:`fedlabels.cli.lazy`): ``fedlabels plot`` then imports no method to
    generate ``run``'s method flags; without, every subcommand is complete."""
    from fedlabels.cli.audit import add_audit_parser
    from fedlabels.cli.bound import add_bound_parser
    from fedlabels.cli.deploy import add_deploy_parser
    from fedlabels.cli.info import add_info_parsers
    from fedlabels.cli.lazy import complete, defer
    from fedlabels.cli.misc import add_misc_parsers
    from fedlabels.cli.report import add_report_parsers
    from fedlabels.cli.run import add_run_parser

    parser = _Parser(
        prog="fedlabels",
        description="Federated learning that shares labels, not models.")
    parser.add_argument("--version", action=_Version)
    add_global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    add_audit_parser(sub)
    add_info_parsers(sub)
    add_misc_parsers(sub)
    add_report_parsers(sub)
    add_bound_parser(sub)
    add_deploy_parser(sub)
    for command in _leaf_parsers(parser):  # `fedlabels run -q` as well as `fedlabels -q run`
        defer(command, _subcommand_global_flags)
        if not lazy:
            complete(command)
    return parser


def _subcommand_global_flags(p: argparse.ArgumentParser) -> None:
    add_global_flags(p, top=False)


def add_global_flags(p: argparse.ArgumentParser, *, top: bool) -> None:
    """``--threads``, ``-q``, ``-v``: on the top parser with their defaults, on each
    subcommand without (``SUPPRESS``), so a flag after the subcommand overrides one before
    it and an absent one leaves it alone."""
    kw: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    g = p.add_argument_group("global options") if not top else p
    g.add_argument("--threads", type=int, metavar="N", **({"default": None} if top else kw),
                   help="torch threads per training process (default: $FEDLABELS_THREADS, "
                        "else 1, the fastest for these small models on a busy machine)")
    g.add_argument("-q", "--quiet", action="store_true", **kw,
                   help="print only errors and the final table (no progress)")
    g.add_argument("-v", "--verbose", action="store_true", **kw,
                   help="a progress line per round, even on a terminal")


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand's parser (``deploy local`` included), not the groups above them."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    out: list[argparse.ArgumentParser] = []
    for child in dict.fromkeys(subs[0].choices.values()):  # aliases share a parser
        out += _leaf_parsers(child)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run one command; a Ctrl-C is one line and exit status 130, also during start-up
    (importing the subcommands' modules takes a second: a Ctrl-C then was a traceback)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("fedlabels: interrupted", file=sys.stderr)
        if argv is None:
            sys.exit(130)
        return 130


def _main(argv: list[str] | None) -> int:
    from fedlabels.core.provenance import command_line

    parser = build_parser(lazy=True)
    args = parser.parse_args(argv)
    if args.quiet and args.verbose:
        parser.error("-q/--quiet and -v/--verbose contradict each other; give one")
    show_warnings_in_one_line()
    from fedlabels.core.threads import set_threads
    from fedlabels.core.verbosity import NORMAL, QUIET, VERBOSE, set_verbosity, verbosity

    before = verbosity()
    set_verbosity(QUIET if args.quiet else VERBOSE if args.verbose else NORMAL)
    try:
        if args.threads is not None:
            if not 1 <= args.threads <= 4096:  # torch takes a C int (10**30: a traceback)
                raise FedLabelsError(f"--threads must lie in [1, 4096], got {args.threads}.")
            set_threads(args.threads)
        # results record the command line they were made by (provenance)
        with command_line(["fedlabels", *(sys.argv[1:] if argv is None else argv)]):
            code = args.func(args)
    except FedLabelsError as exc:
        if getattr(exc, "internal", False):  # a client's failure in fedlabels' own code
            raise  # (ClientError): its traceback, to report
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
