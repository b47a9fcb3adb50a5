"""A model spec: a model name and its keyword parameters (``rf(n_estimators=50)``)."""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    """A model name and its keyword parameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        params = dict(self.params)
        # a user's torch network is written module:pkg.mod:factory(...), as it is typed
        name = f"module:{params.pop('factory')}" if self.name == "module" and \
            "factory" in params else self.name
        if not params:
            return name
        inner = ",".join(f"{k}={_fmt(v)}" for k, v in params.items())
        return f"{name}({inner})"


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "-".join(str(v) for v in value)
    return str(value)


def quoted(value: Any) -> str:
    """A spec's value as the spec writes it, quoted, for an error: ``got 'inf'``,
    ``got '1-2'`` (every spec parser's refusal shows the value so)."""
    return repr(_fmt(value))


#: a torch spec's names for its learner's parameters (``fl.TorchModel`` takes them too)
SPEC_NAMES = {"lr": "learning_rate", "shape": "input_shape"}
#: what the learner calls your own network's factory with (those it names), never a spec
FACTORY_ARGS = ("n_features", "n_classes", "input_shape")


def factory_parameters(factory: Any) -> Mapping[str, inspect.Parameter]:
    """A network factory's parameters (none where its signature cannot be read)."""
    try:
        return inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}


def missing_factory_arguments(factory: Any, given: Any = ()) -> list[str]:
    """The parameters a factory needs (no default) that neither the learner passes
    (:data:`FACTORY_ARGS`) nor ``given`` holds."""
    return [n for n, p in factory_parameters(factory).items()
            if p.default is p.empty and n not in FACTORY_ARGS and n not in given
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def is_integer(value: Any) -> bool:
    """An integer, Python's or numpy's (``np.int64(5)``), never a bool (``True`` is 1)."""
    return isinstance(value, numbers.Integral) and not _is_bool(value)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def check_training_params(params: Mapping[str, Any], ints: tuple[str, ...] = (),
                          flags: tuple[str, ...] = (), optional: tuple[str, ...] = (),
                          show: Callable[[Any], str] = quoted,
                          label: Mapping[str, str] | None = None) -> None:
    """The training parameters of the torch learners, one check for a spec when it is parsed
    (``mlp(lr=0.01)``) and a learner when it is fitted (``learning_rate``, given as ``lr``):
    ``lr`` a finite number > 0, ``weight_decay`` a finite number >= 0, each of ``ints`` an
    integer >= 1 (or ``None`` where named in ``optional``) and each of ``flags`` true or
    false; Python's and numpy's numbers alike, never a bool for a number (absent ones take
    their defaults). ``show`` formats a bad value for the one-line error (a spec's
    :func:`quoted`; a learner's ``repr``), ``label`` names a
    parameter in it (a learner's ``learning_rate (lr)``)."""
    from fedlabels.core.errors import FedLabelsError

    def name_of(name: str) -> str:
        return (label or {}).get(name, name)

    for name, strict in (("lr", True), ("weight_decay", False)):
        value = params.get(name, 1e-3 if strict else 0.0)
        x = float(value) if isinstance(value, numbers.Real) and not _is_bool(value) \
            else math.nan
        if not (math.isfinite(x) and (x > 0 if strict else x >= 0)):
            raise FedLabelsError(f"{name_of(name)} must be a finite number "
                                 f"{'>' if strict else '>='} 0, got {show(value)}.")
    for name in ints:
        value = params.get(name, 1)
        if value is None and name in optional:
            continue
        if not is_integer(value) or value < 1:
            raise FedLabelsError(f"{name_of(name)} must be an integer >= 1"
                                 f"{' or None' if name in optional else ''}, got "
                                 f"{show(value)}.")
    for name in flags:
        value = params.get(name, True)
        if not _is_bool(value):
            raise FedLabelsError(f"{name_of(name)} must be true or false, got "
                                 f"{show(value)}.")


RULEFIT_PARAMS = ("tree_size", "max_rules", "n_estimators", "linear", "memory_par")


def check_rulefit(params: dict[str, Any]) -> None:
    """The ``rulefit`` spec's parameters, checked when the spec is parsed (as every spec's:
    an unknown one named with those it takes, a bad value quoted as written)."""
    from fedlabels.core.errors import FedLabelsError, unknown_parameters

    unknown = sorted(set(params) - set(RULEFIT_PARAMS))
    if unknown:
        raise FedLabelsError(f"{unknown_parameters(unknown, RULEFIT_PARAMS)}; rulefit takes "
                             f"{', '.join(RULEFIT_PARAMS)}.")
    for name in ("tree_size", "max_rules", "n_estimators"):
        value = params.get(name, 1)
        if not is_integer(value) or value < 1:
            raise FedLabelsError(f"{name} must be an integer >= 1, got {quoted(value)}.")
    if not isinstance(params.get("linear", False), bool):
        raise FedLabelsError(f"linear must be true or false, got {quoted(params['linear'])}.")
    memory_par = params.get("memory_par", 0.01)
    if _is_bool(memory_par) or not isinstance(memory_par, numbers.Real) \
            or not 0 < float(memory_par) < math.inf:
        raise FedLabelsError(f"memory_par must be a finite number > 0, got "
                             f"{quoted(memory_par)}.")
