"""Run parameters, each declared once with :func:`param`.

A run parameter is a field of :class:`~fedlabels.runs.config.RunConfig` declared with
:func:`param` (type, range or choices, default, help), the way a method's options are
declared with ``option()``. Its one name is the TOML key and the Python keyword of
``fl.run`` (and of ``fl.load_federation`` for the parameters that build the federation);
the CLI flag is the same name with dashes (``private_per_client`` ↔
``--private-per-client``). The flags of ``fedlabels run``, ``audit`` and ``deploy``, the
checks of TOML and keyword input and the table in ``docs/usage.md`` are generated from the
declarations (:func:`add_run_flags`, :func:`check_keys`, :func:`docs_table`).

Adding a run parameter is one declaration in ``RunConfig``; a parameter that builds the
federation (``federation=True``) is also a keyword of
:func:`fedlabels.data.loading.load_federation` (``tests/test_run_spec.py`` checks both).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fedlabels.core.declared import field_infos
from fedlabels.core.errors import FedLabelsError, closest, did_you_mean
from fedlabels.core.limits import number_text

_META = "fedlabels_run_param"

#: the groups of ``fedlabels run -h`` and of the docs' table, in this order
GROUPS = {
    "run": "the run",
    "data": "data and federation",
    "table": "tables (csv:)",
    "simulator": "simulator only: partial participation and poisoning",
}


@dataclass(frozen=True)
class ParamInfo:
    """The declaration of one run parameter (what :func:`param` stores in the field)."""

    name: str
    kind: tuple[type, ...]
    default: Any
    help: str
    group: str = "run"
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    default_text: str | None = None  # how the docs say a default of None behaves
    federation: bool = False  # also a keyword of load_federation (builds the federation)
    simulator_only: bool = False  # taken by `run` (and fl.run), refused by audit and deploy
    cli: bool = True  # has a generated flag (``options`` comes from --opt and method flags)
    python: bool = True  # a keyword of fl.run
    python_note: str = ""  # where a parameter that is not a keyword of fl.run goes instead
    cli_type: Callable[[str], Any] | None = None
    renamed_from: tuple[str, ...] = ()  # former names, still read from TOML and Python
    hashed_as: str | None = None  # the name a run's file-name hash uses, if not ``name``
    hashed_at_default: bool = True  # False: left out of the hash at its default (added later)
    short: str | None = None  # a one-letter CLI flag beside ``flag`` (``-o``)

    @property
    def flags(self) -> tuple[str, ...]:
        """Every CLI flag of the parameter: the short one first, if it has one."""
        return (self.short, self.flag) if self.short else (self.flag,)

    @property
    def flag(self) -> str:
        """The CLI flag: the name with dashes."""
        return "--" + self.name.replace("_", "-")

    @property
    def toml_key(self) -> str:
        return self.name

    @property
    def keyword(self) -> str:
        return self.name

    @property
    def base_type(self) -> str:
        names = {int: "int", float: "float", str: "str", bool: "bool", list: "list of str"}
        return " | ".join(names.get(k, k.__name__) for k in self.kind)

    @property
    def type_name(self) -> str:
        return self.base_type + (" | None" if self.default is None else "")

    def constraint(self) -> str:
        """``>= 1``, ``in [0, 1]``, ``one of a, b`` or ``''``."""
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if self.minimum is not None and self.maximum is not None:
            return f"in [{number_text(self.minimum)}, {number_text(self.maximum)}]"
        if self.minimum is not None:
            return f">= {number_text(self.minimum)}"
        return ""

    def default_str(self) -> str:
        if self.default is None:
            return self.default_text or "none"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return str(self.default) if self.default != {} else "{}"

    def validate(self, value: Any) -> Any:
        """The value if its type and range are right, else a one-line error naming both."""
        if value is None and self.default is None:
            return None
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            # numpy's integers and floats (np.int64(3) from an array), as plain Python ones
            if int in self.kind and isinstance(value, numbers.Integral):
                value = int(value)
            elif float in self.kind and isinstance(value, numbers.Real):
                value = float(value)
        allowed = self.kind + ((int,) if float in self.kind else ())
        wrong = (not isinstance(value, allowed)
                 or (isinstance(value, bool) and bool not in self.kind))
        if not wrong and isinstance(value, list):
            wrong = not all(isinstance(v, str) for v in value)
        limit = self.constraint()
        if not wrong and isinstance(value, int | float) and not isinstance(value, bool):
            low_ok = self.minimum is None or value >= self.minimum
            high_ok = self.maximum is None or value <= self.maximum
            wrong = math.isnan(value) or not (low_ok and high_ok)
        if not wrong and self.choices is not None:
            wrong = value not in self.choices
        if wrong:
            kind = "true or false" if self.kind == (bool,) else "" if self.choices else \
                _IN_WORDS.get(self.base_type,
                              f"{'an' if self.base_type[0] == 'i' else 'a'} {self.base_type}")
            raise FedLabelsError(f"{self.name} must be {' '.join(filter(None, (kind, limit)))}"
                                 f", got {value!r}.")
        return value


#: a type as an error message says it ("participation must be a float | int" read as code):
#: what to give, in the words of every parser's refusal ("an integer", as a model spec's)
_IN_WORDS = {"int": "an integer", "float": "a number", "float | int": "a number",
             "str | list of str": "a name or a list of names"}


def param(default: Any, help: str, *, kind: type | tuple[type, ...], group: str = "run",
          minimum: float | None = None, maximum: float | None = None,
          choices: Iterable[str] | None = None, metavar: str | None = None,
          default_text: str | None = None, federation: bool = False,
          simulator_only: bool = False, cli: bool = True, python: bool = True,
          python_note: str = "", cli_type: Callable[[str], Any] | None = None,
          renamed_from: tuple[str, ...] = (), hashed_as: str | None = None,
          hashed_at_default: bool = True, short: str | None = None) -> Any:
    """Declare one run parameter: a field of :class:`~fedlabels.runs.config.RunConfig`.

    ``kind`` is the accepted type(s) (an int is accepted for a float); ``minimum`` and
    ``maximum`` bound numbers (inclusive); ``federation=True`` marks a parameter that builds
    the federation; ``python=False`` (with ``python_note`` saying where it goes instead)
    keeps it out of ``fl.run``'s keywords; ``renamed_from`` lists former names still read
    from TOML files, saved checkpoints and Python keywords; ``hashed_as`` is the former name
    a renamed parameter is hashed under, so a configuration keeps its file name;
    ``hashed_at_default=False`` (for a parameter added later) leaves it out of the hash
    while it has its default, so the runs made before it keep their file names; ``short``
    is a one-letter CLI flag beside the long one (``-o``).
    """
    if group not in GROUPS:
        raise TypeError(f"unknown run parameter group {group!r}; one of {', '.join(GROUPS)}")
    info = ParamInfo(
        name="", kind=kind if isinstance(kind, tuple) else (kind,), default=default,
        help=help, group=group, minimum=minimum, maximum=maximum,
        choices=tuple(choices) if choices is not None else None, metavar=metavar,
        default_text=default_text, federation=federation, simulator_only=simulator_only,
        cli=cli, python=python, python_note=python_note, cli_type=cli_type,
        renamed_from=renamed_from, hashed_as=hashed_as, hashed_at_default=hashed_at_default,
        short=short)
    if isinstance(default, dict):
        return dataclasses.field(default_factory=dict, metadata={_META: info})
    return dataclasses.field(default=default, metadata={_META: info})


def declared(cls: type) -> tuple[ParamInfo, ...]:
    """Every run parameter of the config class ``cls``, in declaration order."""
    return field_infos(cls, _META, "param()")


def by_name(cls: type) -> dict[str, ParamInfo]:
    return {info.name: info for info in declared(cls)}


def former_names(cls: type) -> dict[str, str]:
    """Former name -> current name."""
    return {old: info.name for info in declared(cls) for old in info.renamed_from}


def unknown_key_message(key: str, valid: Iterable[str], what: str) -> str:
    """``unknown WHAT 'x' (did you mean 'y'?); valid: a, b, ...`` in one line."""
    valid = sorted(valid)
    text = f"unknown {what} {key!r}"
    return text + did_you_mean(key, valid) + f"; valid: {', '.join(valid)}."


def check_keys(cls: type, data: Mapping[str, Any], what: str, *, python: bool = False,
               dashes: bool = False, keywords: bool = False) -> dict[str, Any]:
    """``data`` with former names replaced by current ones; an unknown key is a one-line
    error with a suggestion (``python``: only fl.run's keywords; ``keywords``: Python
    keywords, all of them valid, a method option advised as ``options={...}``; ``dashes``:
    TOML keys may be written ``eval-every``)."""
    params = by_name(cls)
    valid = [n for n, info in params.items() if info.python or not python]
    renamed = former_names(cls)
    out: dict[str, Any] = {}
    for raw, value in data.items():
        key = raw.replace("-", "_") if dashes else raw
        key = renamed.get(key, key)
        if key not in valid:
            raise FedLabelsError(_unknown(raw, key, valid, params, what, python or keywords))
        if key in out:
            raise FedLabelsError(f"{what} {key!r} given twice (also as {raw!r}); keep one.")
        out[key] = value
    return out


#: flags of the commands that are not run parameters (so not TOML keys): how a command
#: runs, prints or writes; key -> the flag
COMMAND_FLAGS = {"metric": "--metric", "threads": "--threads", "quiet": "-q/--quiet",
                 "verbose": "-v/--verbose", "overwrite": "--overwrite",
                 "no_progress": "--no-progress", "progress": "--no-progress",
                 "no_checkpoint": "--no-checkpoint", "config": "--config"}


def _unknown(raw: str, key: str, valid: list[str], params: Mapping[str, ParamInfo],
             what: str, python: bool) -> str:
    """Why ``raw`` is refused, with the closest run parameter or method option."""
    import fedlabels.methods  # noqa: F401  (registers the methods: their options are known)
    from fedlabels.method.options import option_users

    def where(name: str) -> str:
        return f"options={{{name!r}: ...}}" if python else "the [options] table"

    if key in params:  # declared, but not a keyword of fl.run (method, dataset, output)
        how = {"method": "pass the method as run()'s first argument, "
                         "fl.run('fedct', ...)",
               "dataset": "pass the dataset as run()'s second argument, a name or a "
                          "Federation: fl.run('fedct', 'digits', ...)",
               }.get(key, "save the result with result.save(PATH), or set output in a "
                          "RunConfig for fl.run_config")
        return f"{raw!r} is not a keyword of run(): {how}."
    if key in COMMAND_FLAGS:  # how a command runs or prints, not what the run is
        flag = COMMAND_FLAGS[key]
        return (f"unknown {what} {raw!r}: {flag} is a flag of the command, not a run "
                f"parameter: give it on the command line (fedlabels run ... {flag} ...).")
    if option_users(key):
        return f"unknown {what} {raw!r}: {raw!r} is a method option: put it in {where(key)}."
    text = unknown_key_message(raw, valid, what)
    if "did you mean" not in text:
        from fedlabels.method.options import OPTION_USERS

        close = closest(key, OPTION_USERS)
        if close is not None:
            return text + f" Did you mean the method option {close!r} (in {where(close)})?"
    return text


def hashed_settings(cls: type, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as a run's file-name hash is computed: a renamed parameter under its
    ``hashed_as`` name, one added later left out at its default (so existing results keep
    their names)."""
    params = {info.name: info for info in declared(cls)}
    return {(params[k].hashed_as or k) if k in params else k: v
            for k, v in settings.items()
            if k not in params or params[k].hashed_at_default or v != params[k].default}


def _cli_type(info: ParamInfo) -> Callable[[str], Any]:
    if info.cli_type is not None:
        return info.cli_type
    kinds = set(info.kind) - {list}
    return int if kinds == {int} else float if kinds <= {int, float} else str


class _SimulatorOnly(argparse.Action):
    """A simulator-only flag on ``audit`` or ``deploy``: an error that says so."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string}: a simulator setting that only `fedlabels run` "
                     "takes; remove it.")


def add_run_flags(p: argparse.ArgumentParser, cls: type, *, simulator: bool) -> None:
    """One flag per declared parameter (``simulator``: with the simulator-only ones)."""
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()
              if simulator or key != "simulator"}
    for info in declared(cls):
        if not info.cli:
            continue
        if info.simulator_only and not simulator:  # refused by name, not "did you mean"
            p.add_argument(*info.flags, action=_SimulatorOnly, help=argparse.SUPPRESS,
                           nargs=0 if info.kind == (bool,) else None,
                           default=argparse.SUPPRESS)
            continue
        text = f"{info.help} (default: {info.default_str()})".replace("%", "%%")
        g = groups[info.group]
        if info.kind == (bool,):
            g.add_argument(*info.flags, dest=info.name, action="store_true", default=None,
                           help=text)
        else:
            # choices are checked by the declaration, as from TOML and Python (one line)
            metavar = info.metavar or ("|".join(info.choices) if info.choices else
                                       "N" if info.kind == (int,) else None)
            g.add_argument(*info.flags, dest=info.name, type=_cli_type(info), metavar=metavar,
                           help=text)


def docs_table(cls: type) -> str:
    """The Markdown table of every run parameter (``docs/usage.md`` holds a copy)."""
    lines = ["| CLI flag | TOML key / Python keyword | type | default | what |",
             "|---|---|---|---|---|"]
    for info in declared(cls):
        flag = ", ".join(f"`{f}`" for f in info.flags) if info.cli else \
            "`--opt`, method flags"
        keyword = f"`{info.name}`" + ("" if info.python else f" ({info.python_note})")
        kind = info.type_name + (f", {info.constraint()}" if info.constraint() else "")
        notes = [info.help.replace("|", "\\|")]
        if info.federation:
            notes.append("builds the federation (`load_federation`)")
        if info.simulator_only:
            notes.append("simulator only (not `audit`, `deploy`)")
        if info.renamed_from:
            notes.append(f"former name `{'`, `'.join(info.renamed_from)}` still read")
        lines.append(f"| {flag} | {keyword} | {kind.replace('|', 'or')} | "
                     f"{info.default_str().replace('|', 'or')} | {'; '.join(notes)} |")
    return "\n".join(lines)


__all__ = ["GROUPS", "ParamInfo", "add_run_flags", "by_name", "check_keys", "declared",
           "docs_table", "former_names", "hashed_settings", "param", "unknown_key_message"]
