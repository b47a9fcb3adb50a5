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
        if not self.params:
            return self.name
        inner = ",".join(f"{k}={_fmt(v)}" for k, v in self.params.items())
        return f"{self.name}({inner})"


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "-".join(str(v) for v in value)
    return str(value)
