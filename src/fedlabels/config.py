"""Run configuration: one validated object, from keyword arguments, a TOML file or the CLI."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fedlabels.errors import FedLabelsError


@dataclass
class RunConfig:
    """Settings of one ``fedlabels run``; TOML keys and CLI flags use the same names.

    Parameters
    ----------
    method : str, default="fedct"
        A registered method (``fedlabels methods`` lists them with their options).
    dataset : str, default="breast_cancer"
        A registered dataset (``fedlabels datasets``) or ``csv:PATH:TARGET``.
    clients : int, default=5
        Number of clients m.
    model : str, default="decision_tree"
        Model spec, one for all clients or one per client (``dt,rf,mlp``).
    rounds : int, default=20
        Communication rounds R.
    period : int, default=50
        Local steps per round b for iteratively trained (torch) models; total local steps
        T = R * b. Refit models (scikit-learn) are refit once per round and ignore it.
    unlabeled, private, private_per_client, test : int or None
        Sizes of U, of the private pool (total, or per client) and of the test set;
        ``None`` uses the dataset's defaults.
    partition : str, default="iid"
        ``iid``, ``dirichlet:A1,A2`` or ``shards:K``.
    seed : int, default=0
        Seeds data split, partition, model initialisation and minibatch order.
    eval_every : int, default=1
        Evaluate client test accuracy every this many rounds (and always at the end).
    output : str or None
        Path of the JSON result.
    options : dict
        The method's options (e.g. ``quorum`` for FedCT, ``epsilon`` for DP methods),
        validated against the method's declaration; CLI ``--opt KEY=VALUE`` and the
        generated flags (``--quorum``, ``--epsilon``, ...) fill it, TOML takes an
        ``[options]`` table.
    """

    method: str = "fedct"
    dataset: str = "breast_cancer"
    clients: int = 5
    model: str = "decision_tree"
    rounds: int = 20
    period: int = 50
    unlabeled: int | None = None
    private: int | None = None
    private_per_client: int | None = None
    test: int | None = None
    partition: str = "iid"
    seed: int = 0
    eval_every: int = 1
    output: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def _int(name: str, low: int, allow_none: bool = False) -> None:
            value = getattr(self, name)
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise FedLabelsError(f"{name} must be an int >= {low}, got {value!r}.")

        if isinstance(self.clients, int) and not isinstance(self.clients, bool) \
                and self.clients < 1:
            raise FedLabelsError(f"clients (m) must be at least 1, got {self.clients}.")
        _int("clients", 1)
        _int("rounds", 1)
        _int("period", 1)
        _int("eval_every", 1)
        _int("seed", 0)
        for name in ("unlabeled", "private", "private_per_client", "test"):
            _int(name, 1, allow_none=True)
        if self.private is not None and self.private_per_client is not None:
            raise FedLabelsError("set private or private_per_client, not both.")
        if not isinstance(self.options, dict):
            raise FedLabelsError(f"options must be a table of KEY = VALUE, got "
                                 f"{self.options!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **changes: Any) -> RunConfig:
        data = self.to_dict()
        data.update(changes)
        return RunConfig(**data)


def _normalise_keys(data: dict[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(RunConfig)}
    out = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in known:
            from fedlabels.protocols.options import OPTION_USERS

            hint = (f" {key!r} is a method option: put it in the [options] table."
                    if name in OPTION_USERS else "")
            raise FedLabelsError(f"unknown config key {key!r}; known keys: "
                                 f"{', '.join(sorted(known))}.{hint}")
        out[name] = value
    return out


def load_config(path: str | Path, **overrides: Any) -> RunConfig:
    """Read a TOML file (top level, or a ``[run]`` table) and apply ``overrides``."""
    path = Path(path)
    if not path.is_file():
        raise FedLabelsError(f"config file {path} does not exist.")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise FedLabelsError(f"config file {path} is not valid TOML: {exc}") from None
    if "run" in data and isinstance(data["run"], dict):
        data = {**data["run"], **({"options": data["options"]} if "options" in data else {})}
    merged = {**_normalise_keys(data),
              **{k: v for k, v in _normalise_keys(overrides).items() if v is not None}}
    if "options" in overrides and "options" in data:
        merged["options"] = {**data["options"], **overrides["options"]}
    try:
        return RunConfig(**merged)
    except TypeError as exc:
        raise FedLabelsError(f"invalid config: {exc}") from None
