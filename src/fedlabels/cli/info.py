"""``fedlabels datasets``, ``models`` and ``methods``: what can be chosen, and its options."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from fedlabels.cli.method_flags import WIDTH


def cmd_datasets(args: argparse.Namespace) -> int:
    from fedlabels.data.registry import REGISTRY

    print(f"{'name':<15} {'status':<12} {'default |U| / private / test':<30} description")
    for name, info in sorted(REGISTRY.items()):
        status = "bundled" if not info.needs_fetch else (
            "fetched" if info.is_available() else "NOT FETCHED")
        d = info.defaults
        sizes = " / ".join("rest" if d.get(k) is None and k != "n_test" else
                           ("official" if d.get(k) is None else str(d.get(k)))
                           for k in ("n_unlabeled", "n_private", "n_test"))
        print(f"{name:<15} {status:<12} {sizes:<30} {info.description} [{info.source}]")
    print("\nalso: csv:PATH:TARGET for any table (--text-column NAME: a column of texts, "
          "docs/text.md;\n--image-column NAME: a column of image paths), imagefolder:PATH"
          "\nfor images in one sub-folder per class (docs/neural.md). Fetch with `fedlabels "
          "fetch NAME`.")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from fedlabels.learners import MODELS

    for name, entry in sorted(MODELS.items()):
        aliases = f" ({', '.join(entry.aliases)})" if entry.aliases else ""
        print(f"{name + aliases:<36} {entry.description}")
    return 0


def _wrap(text: str, first: str, indent: int) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=" " * indent,
                         break_on_hyphens=False) or [first.rstrip()]


def capability_summary(caps: Any) -> str:
    """The capabilities that differ from the defaults: ``name`` for a true flag, else
    ``name=value``."""
    from dataclasses import fields

    parts = []
    for f in fields(caps):
        value = getattr(caps, f.name)
        if value != f.default:
            parts.append(f.name if value is True else f"{f.name}={value}")
    return ", ".join(parts)


def format_method(method: Any) -> str:
    """A method's description and its declared options (name, flag, type, default, help)."""
    lines = _wrap(method.description or "-", f"{method.name:<14} ", 15)
    threat = method.threat_model
    model = method.model_default() if method.capabilities.trains_models else \
        "none (it trains no model)"
    lines.append(f"    default model: {model}")
    against = f" against {threat.against}" if threat.guarantee != "none" and threat.against \
        else ""
    lines += _wrap(f"{threat.view}, guarantee {threat.guarantee}{against}",
                   "    threat model: ", 8)
    if threat.guarantee != "none":  # whom the ε protects, and what a conditional one needs
        declared = threat.privacy()
        lines += _wrap(declared["neighbouring"], "    neighbouring: ", 8)
        if "conditional_on" in declared:
            lines += _wrap(declared["conditional_on"], "    conditional on: ", 8)
    declared_caps = capability_summary(method.capabilities)
    if declared_caps:
        lines += _wrap(declared_caps, "    capabilities: ", 8)
    declared = method.options_class.declared()
    if not declared:
        lines.append("    no options")
    for info in declared:
        name = info.name + (f" (--{info.name.replace('_', '-')})" if info.flag else "")
        lines += _wrap(info.summary, f"    {name}: ", 8)
        lines += _wrap(info.help, " " * 8, 8)
    return "\n".join(lines)


def cmd_methods(args: argparse.Namespace) -> int:
    from fedlabels.methods import available_methods, discover_methods, get_method

    methods = [get_method(n) for n in args.names] if args.names else \
        list(available_methods().values())
    print("\n\n".join(format_method(m) for m in methods))
    if not args.names:  # plug-ins that failed: one line each, the rest still listed
        for reason in discover_methods().values():
            print(f"fedlabels: {reason}", file=sys.stderr)
    print("\nset options with --opt KEY=VALUE, the flag shown, or [options] in a --config TOML.")
    return 0


def add_info_parsers(sub: Any) -> None:
    p = sub.add_parser("datasets", help="list datasets and whether they are fetched")
    p.set_defaults(func=cmd_datasets)
    p = sub.add_parser("models", help="list model names usable in --model")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("methods", help="list the federated methods usable in --method, with "
                                       "their options")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these methods")
    p.set_defaults(func=cmd_methods)
