"""Subcommand parsers completed on first use, so one command does not build them all.

The run options' flags (``run``, ``audit``, ``deploy local``/``prepare``) are generated from
every built-in method's declarations: building them imports all the methods. A parser can
therefore :func:`defer` its arguments; :class:`Subcommands` adds them when argparse chooses
that subcommand (``fedlabels plot ...`` never builds ``run``'s flags), and :func:`complete`
adds them at once for whoever inspects the whole parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

_DEFERRED = "_fedlabels_deferred"  # attribute of a parser: the fills still to run, in order


def defer(parser: argparse.ArgumentParser,
          fill: Callable[[argparse.ArgumentParser], None]) -> None:
    """Run ``fill(parser)`` when the parser is first used (after the fills deferred before)."""
    parser.__dict__.setdefault(_DEFERRED, []).append(fill)


def complete(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Run the parser's deferred fills (once); returns it."""
    fills = parser.__dict__.get(_DEFERRED, [])
    while fills:
        fills.pop(0)(parser)
    return parser


class Subcommands(argparse._SubParsersAction):
    """argparse's subcommands, completing the chosen subcommand's parser before it parses."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        chosen = self._name_parser_map.get(values[0]) if values else None
        if chosen is not None:
            complete(chosen)
        super().__call__(parser, namespace, values, option_string)
