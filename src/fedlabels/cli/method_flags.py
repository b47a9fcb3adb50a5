"""Method options on the command line, generated from the methods' declarations.

Every option declared with ``flag=True`` by a registered method gets one
``--name-with-dashes`` flag (shared by all methods declaring that name); any option can be
given as ``--opt KEY=VALUE``. Both end up in ``RunConfig.options``; a flag the chosen method
does not declare is an error that names the flag and the methods that take it.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedlabels.core.errors import FedLabelsError

WIDTH = 100
_DEST = "method_option:"  # namespace prefix of the generated flags (never clashes)


class Choices(list[Any]):
    """The parsed values a flag takes (``in`` tests these), listed as users type them
    (``none`` for None) in ``--help`` and errors."""

    def __init__(self, values: Any) -> None:
        self.values = list(values)
        super().__init__("none" if v is None else str(v) for v in self.values)

    def __contains__(self, value: object) -> bool:
        return value in self.values


@dataclass(frozen=True)
class MethodFlag:
    """One generated flag: an option name and the (method, declaration) pairs behind it."""

    name: str
    users: tuple[tuple[str, Any], ...]  # (method name, OptionInfo)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse_type(self) -> Callable[[str], Any]:
        """``int``, ``float`` or ``str`` when every declaration agrees (auto-typed otherwise);
        ``none`` gives None where a declaration takes None, as with ``--opt``."""
        from fedlabels.method.options import parse_flag_value

        infos = [info for _, info in self.users]
        kinds = [set(info.kind) for info in infos]
        base: Callable[[str], Any] = parse_flag_value
        if all(k == {int} for k in kinds):
            base = int
        elif all(float in k and k <= {int, float} for k in kinds):
            base = float
        elif all(k == {str} for k in kinds):
            base = str
        takes_none = any(info.nullable or info.default is None for info in infos)
        if base is parse_flag_value or not takes_none:
            return base

        def parse(text: str) -> Any:
            return None if text.strip().lower() in ("none", "null") else base(text)

        parse.__name__ = base.__name__  # argparse: "invalid float value: 'x'"
        return parse

    def metavar(self) -> str | None:
        kinds = {k for _, info in self.users for k in info.kind}
        if self.choices():
            return None  # argparse shows {a,b,c}
        return "N" if kinds == {int} else "X" if kinds <= {int, float} else \
            "TEXT" if kinds == {str} else "VALUE"

    def choices(self) -> list[Any] | None:
        infos = [info for _, info in self.users]
        if any(info.choices is None or info.convert is not None for info in infos):
            return None
        nullable = [None] if any(info.nullable for info in infos) else []
        return Choices(dict.fromkeys([*(c for info in infos for c in info.choices), *nullable]))


    def help(self) -> str:
        """The declarations' help, grouped by the methods that share it."""
        groups: dict[tuple[str, str], list[str]] = {}
        for method, info in self.users:
            groups.setdefault((info.help, info.summary), []).append(method)
        text = "; ".join(f"{', '.join(methods)}: {help_} [{summary}]"
                         for (help_, summary), methods in groups.items())
        return text.replace("%", "%%")


def method_flags() -> dict[str, MethodFlag]:
    """Option name -> its generated flag, over fedlabels' own methods (sorted by name);
    plug-in methods' options are given with ``--opt``."""
    from fedlabels.methods import METHODS, PLUGINS

    users: dict[str, list[tuple[str, Any]]] = {}
    for name, method in sorted(METHODS.items()):
        if name in PLUGINS:
            continue
        for info in method.options_class.declared():
            if info.flag:
                users.setdefault(info.name, []).append((name, info))
    return {name: MethodFlag(name, tuple(pairs)) for name, pairs in sorted(users.items())}


def add_method_flags(p: argparse.ArgumentParser) -> None:
    """``--opt`` and one flag per declared ``flag=True`` option of any method."""
    g = p.add_argument_group(
        "method options", "each flag applies only to the methods named in its help;\n"
        "`fedlabels methods NAME` lists all options of a method")
    g.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="any option of the method (repeatable), e.g. --opt quorum=0.8")
    for spec in method_flags().values():
        try:
            g.add_argument(spec.flag, dest=_DEST + spec.name, type=spec.parse_type(),
                           choices=spec.choices(), default=argparse.SUPPRESS,
                           metavar=spec.metavar(), help=spec.help())
        except argparse.ArgumentError as exc:
            raise TypeError(f"method option {spec.name!r} (flag=True) clashes with a "
                            f"`fedlabels` option: {exc}; declare it without flag=True") from None


def methods_epilog() -> str:
    """The registered methods with their descriptions (pre-wrapped for the epilog)."""
    from fedlabels.methods import available_methods

    lines = ["methods (--method; `fedlabels methods NAME` lists a method's options):"]
    for name, method in available_methods().items():
        lines += textwrap.wrap(method.description or "-", WIDTH - 2,
                               initial_indent=f"  {name:<14} ", subsequent_indent=" " * 17,
                               break_on_hyphens=False)
    return "\n".join(lines)


def method_options(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options given as ``--opt KEY=VALUE`` and those given by generated flags."""
    from fedlabels.method.options import parse_flag_value

    opts: dict[str, Any] = {}
    for item in getattr(args, "opt", None) or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise FedLabelsError(f"--opt {item!r}: use KEY=VALUE.")
        name, parsed = key.strip().replace("-", "_"), parse_flag_value(value)
        if name in opts and opts[name] != parsed:
            raise FedLabelsError(f"--opt {name} is given twice ({opts[name]!r} and {parsed!r}); "
                                 "give it once.")
        opts[name] = parsed
    flagged = {k[len(_DEST):]: v for k, v in vars(args).items() if k.startswith(_DEST)}
    for name in opts.keys() & flagged.keys():
        if opts[name] != flagged[name]:
            raise FedLabelsError(f"{name} is given twice: --opt {name}={opts[name]!r} and "
                                 f"--{name.replace('_', '-')} {flagged[name]!r}; give it once.")
    return opts, flagged


def check_flags(method: Any, flagged: dict[str, Any]) -> None:
    """Reject generated flags that ``method`` does not declare, naming the flag."""
    from fedlabels.method.options import unknown_option_message

    declared = method.options_class.names()
    for key in flagged:
        if key not in declared:
            flag = "--" + key.replace("_", "-")
            raise FedLabelsError(unknown_option_message(method.name, key, declared, flag=flag))
