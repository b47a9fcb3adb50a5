"""A model spec: a model name and its keyword parameters (``rf(n_estimators=50)``)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
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


def check_training_params(params: dict[str, Any], ints: tuple[str, ...],
                          flags: tuple[str, ...], show: Any = _fmt,
                          label: dict[str, str] | None = None) -> None:
    """The training parameters torch learner specs share: ``lr`` > 0, ``weight_decay``
    >= 0, each of ``ints`` an integer >= 1 and each of ``flags`` true or false (absent
    ones take their defaults); ``show`` formats a bad value for the message, ``label``
    names a parameter in it (a learner's ``learning_rate (lr)``)."""
    from fedlabels.core.errors import FedLabelsError

    for name in ("lr", "weight_decay"):
        value = params.get(name, 1e-3 if name == "lr" else 0.0)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not (value > 0 if name == "lr" else value >= 0):
            raise FedLabelsError(f"{(label or {}).get(name, name)} must be a number "
                                 f"{'>' if name == 'lr' else '>='} 0, got {show(value)!r}.")
    for name in ints:
        value = params.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FedLabelsError(f"{name} must be an integer >= 1, got {show(value)!r}.")
    for name in flags:
        if not isinstance(params.get(name, True), bool):
            raise FedLabelsError(f"{name} must be true or false, got {show(params[name])!r}.")
