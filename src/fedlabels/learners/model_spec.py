"""A model spec: a model name and its keyword parameters (``rf(n_estimators=50)``)."""

from __future__ import annotations

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
