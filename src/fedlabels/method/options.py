"""Declared, typed method options, validated once before any data is loaded.

Each :class:`~fedlabels.method.base.Method` names a frozen dataclass of options
(``options_class``), in the spirit of scikit-learn's ``_parameter_constraints``: every field
is declared with :func:`option` (a type, a range or a set of choices, a default and one line
of help). :meth:`MethodOptions.from_mapping` is the only way user input becomes options:

* an unknown key is an error that names the method, suggests the closest valid key and
  lists them all, and says which other methods take the key if any do;
* a value of the wrong type or out of range is an error that states what is allowed;
* :meth:`MethodOptions.check` then rejects combinations (e.g. "exactly one of ...").

``fedlabels methods`` and ``fedlabels run --help`` are generated from these declarations.
Values the engine sets (number of clients, features, rounds) are not options; they live in
:class:`~fedlabels.method.base.Settings` and cannot be overridden by a user.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from fedlabels.core.declared import field_infos
from fedlabels.core.errors import FedLabelsError, did_you_mean
from fedlabels.core.limits import MAX_ROUNDS, MAX_STEPS, number_text

T = TypeVar("T", bound="MethodOptions")


@dataclass(frozen=True)
class Interval:
    """A numeric range from ``low`` to ``high`` (None: unbounded on that side); ``closed``
    says which ends belong to it."""

    low: float | None = None
    high: float | None = None
    closed: str = "both"  # "both", "left", "right" or "neither"

    def __contains__(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (
                value == self.low and self.closed not in ("both", "left"))):
            return False
        return not (self.high is not None and (value > self.high or (
            value == self.high and self.closed not in ("both", "right"))))

    def __str__(self) -> str:
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        low = "-inf" if self.low is None else number_text(self.low)
        high = "inf" if self.high is None else number_text(self.high)
        return f"{left}{low}, {high}{right}"


#: shared ranges: a finite number > 0, and a probability strictly inside (0, 1)
POSITIVE = Interval(0.0, math.inf, "neither")
PROBABILITY = Interval(0.0, 1.0, "neither")
#: rounds of a run or of a phase of it; local steps, at least one or possibly none
#: (the bounds: :mod:`fedlabels.core.limits`)
ROUNDS = Interval(1, MAX_ROUNDS)
STEPS = Interval(1, MAX_STEPS)
STEPS_OR_NONE = Interval(0, MAX_STEPS)
#: an ε or a noise scale: > 0 and at most 1e6. Beyond it the accountants overflow float64
#: (σ², a NaN in calibration), and the value protects nothing (ε = 1e6 allows e^1e6)
DP_SCALE = Interval(0.0, 1e6, "right")


@dataclass(frozen=True)
class OptionInfo:
    """The declaration of one option (what :func:`option` stores in the field metadata)."""

    name: str
    kind: tuple[type, ...]
    default: Any
    help: str
    interval: Interval | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    flag: bool = False
    convert: Callable[[Any], Any] | None = None

    @property
    def type_name(self) -> str:
        names = {int: "int", float: "float", str: "str", bool: "bool"}
        text = " | ".join(names.get(k, k.__name__) for k in self.kind)
        return text + (" | None" if self.nullable else "")

    @property
    def in_words(self) -> str:
        """What to give, in the words of every refusal: ``an integer``, ``a number or
        none``, ``true or false`` (``type_name`` is the help table's ``int | None``)."""
        words = {int: "an integer", float: "a number", str: "text", bool: "true or false"}
        kinds = [k for k in self.kind if not (k is int and float in self.kind)]
        text = " or ".join(words.get(k, f"a {k.__name__}") for k in kinds)
        return text + (" or none" if self.nullable else "")

    @property
    def summary(self) -> str:
        """Type, constraint and default, e.g. ``float | None; in (0, 1]; default none``."""
        parts = [self.type_name]
        if self.choices is not None:
            parts.append("one of " + ", ".join(map(str, self.choices)))
        if self.interval is not None:
            parts.append(f"in {self.interval}")
        default = "none" if self.default is None else repr(self.default)
        return f"{'; '.join(parts)}; default {default}"

    def describe(self) -> str:
        """One line: type, constraint, default and help."""
        return f"{self.name} ({self.summary}): {self.help}"

    def validate(self, value: Any, method: str) -> Any:
        """The value, converted and checked, or a one-line error."""
        where = f"{method} option {self.name}"
        if value is None:
            if self.choices is not None and "none" in self.choices:  # --opt key=none
                return "none"
            if self.nullable or self.default is None:
                return None
            raise FedLabelsError(f"{where} cannot be empty; {self.describe()}.")
        if self.convert is not None:
            value = self.convert(value)
        if float in self.kind and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in self.kind:
            raise FedLabelsError(f"{where} must be {self.in_words}, got {value!r}.")
        if not isinstance(value, self.kind):
            spell = ("; give true or false (yes or no on the command line)"
                     if bool in self.kind else "")
            raise FedLabelsError(f"{where} must be {self.in_words}, got {value!r} "
                                 f"({type(value).__name__}){spell}.")
        if self.choices is not None and value not in self.choices:
            close = did_you_mean(str(value), map(str, self.choices))
            raise FedLabelsError(f"{where} must be one of "
                                 f"{', '.join(map(str, self.choices))}; got {value!r}{close}.")
        if self.interval is not None and isinstance(value, int | float) \
                and not isinstance(value, bool):
            if not math.isfinite(value) and self.interval.high is not None:
                raise FedLabelsError(f"{where} must be finite, in {self.interval}; "
                                     f"got {value!r}.")
            if math.isnan(value) or value not in self.interval:
                raise FedLabelsError(f"{where} must lie in {self.interval}, got {value!r}.")
        return value


def option(default: Any, help: str, *, kind: type | tuple[type, ...],
           interval: Interval | None = None, choices: Iterable[Any] | None = None,
           nullable: bool = False, flag: bool = False,
           convert: Callable[[Any], Any] | None = None) -> Any:
    """Declare one option field of a :class:`MethodOptions` dataclass.

    ``default`` is its value when not given, ``help`` the one line ``fedlabels methods`` and
    ``--help`` show; ``interval`` (an :class:`Interval`) or ``choices`` bound the values it
    takes, and ``nullable=True`` takes None too. ``kind`` is the accepted type(s) (an int
    is accepted for a float); ``flag=True`` gives it a ``--name-with-dashes`` flag on
    ``fedlabels run`` besides ``--opt name=value``; ``convert`` normalises input (e.g.
    lower-case a keyword) before the checks.
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    meta = {"fedlabels_option": OptionInfo(
        name="", kind=kinds, default=default, help=help, interval=interval,
        choices=tuple(choices) if choices is not None else None, nullable=nullable,
        flag=flag, convert=convert)}
    return dataclasses.field(default=default, metadata=meta)


def delta_option(help: str = "δ of the reported (ε, δ) guarantee") -> Any:
    """The δ of a DP method's (ε, δ): a probability, default 1e-5, with a ``--delta`` flag."""
    return option(1e-5, help, kind=float, interval=PROBABILITY, flag=True)


@dataclass(frozen=True)
class MethodOptions:
    """Base class of every method's options (a frozen dataclass of :func:`option` fields)."""

    method_name: ClassVar[str] = ""

    @classmethod
    def declared(cls) -> tuple[OptionInfo, ...]:
        """The declarations of this class's options, in field order."""
        return field_infos(cls, "fedlabels_option", "option()")

    @classmethod
    def names(cls) -> list[str]:
        return [info.name for info in cls.declared()]

    @classmethod
    def from_mapping(cls: type[T], data: Mapping[str, Any] | None, method: str) -> T:
        """Validated options from user input (``--opt``, flags, TOML, API ``options=``)."""
        instance = cls(**cls.check_each(data, method))
        instance.check()
        return instance

    @classmethod
    def check_each(cls, data: Mapping[str, Any] | None, method: str) -> dict[str, Any]:
        """Each option of ``data`` converted and checked on its own (an unknown key, a wrong
        type or range: a one-line error), not their combinations (:meth:`check`)."""
        declared = {info.name: info for info in cls.declared()}
        values = {}
        for raw_key, value in dict(data or {}).items():
            key = str(raw_key).replace("-", "_")
            if key not in declared:
                raise FedLabelsError(unknown_option_message(method, key, list(declared)))
            values[key] = declared[key].validate(value, method)
        return values

    def check(self) -> None:
        """Reject combinations of values (override; single values are already checked)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def given(self) -> dict[str, Any]:
        """Options that differ from their defaults (what a result records as chosen)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default}


@dataclass(frozen=True)
class NoOptions(MethodOptions):
    """A method without options."""


#: filled by :func:`fedlabels.methods.register_method`: option name -> methods taking it
OPTION_USERS: dict[str, list[str]] = {}
#: set by the method registry: registers every built-in method, so that OPTION_USERS is full
load_option_users: Callable[[], None] | None = None


def option_users(key: str) -> list[str]:
    """The registered methods that take option ``key``."""
    if load_option_users is not None:
        load_option_users()
    return list(OPTION_USERS.get(key, []))


def unknown_option_message(method: str, key: str, valid: list[str], *,
                           flag: str | None = None) -> str:
    """Why ``key`` is rejected for ``method``; ``flag`` names the CLI flag that gave it."""
    listed = ", ".join(valid) if valid else "none"
    users = sorted(m for m in option_users(key) if m != method)
    if flag is not None:
        text = f"{flag} does not apply to method {method!r} (its options: {listed})"
        return text + (f"; it applies to {', '.join(users)}." if users else ".")
    text = f"method {method!r} has no option {key!r}"
    text += did_you_mean(key, valid) + f"; its options: {listed}."
    if users:
        text += f" {key!r} applies to {', '.join(users)}."
    return text


def parse_flag_value(text: str) -> Any:
    """A ``--opt KEY=VALUE`` value: int, float, bool, none, or the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes"):
        return True
    if lowered in ("false", "no"):
        return False
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()
