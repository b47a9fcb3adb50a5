"""A server role's state as plain values (the server side of :mod:`fedlabels.method.state`).

Server roles hold richer attributes than clients: numpy Generators, privacy ledgers' event
lists, dataclasses of results. :func:`encode_attr` turns one attribute into flat state
entries whose key suffix says how it was encoded, and :func:`decode_attr` turns them back:

* arrays, scalars and ``None`` are kept as they are (``name``);
* a numpy Generator becomes its exact state as JSON (``name#generator``);
* anything else (lists, dicts, tuples, fedlabels dataclasses such as privacy events) is a
  tagged JSON tree (``name#json``); arrays inside it keep dtype and shape.

Never pickle: decoding builds only fedlabels dataclasses, named by module and class.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.json_list import JSONList
from fedlabels.method.state import (
    State,
    StateValue,
    check_state_value,
    generator_from_state,
    generator_state,
)

_PLAIN = (int, float, str, bool, np.ndarray, np.generic)


def encode_attr(name: str, value: Any) -> State:
    """The state entries of attribute ``name`` holding ``value``."""
    if value is None or isinstance(value, _PLAIN):
        return {name: check_state_value(name, value)}
    if isinstance(value, np.random.Generator):
        return {f"{name}#generator": generator_state(value)}
    return {f"{name}#json": json.dumps(_tree(value), sort_keys=True)}


def _frozen(value: Any) -> bool:
    params = getattr(type(value), "__dataclass_params__", None)
    return bool(params is not None and params.frozen)


def encode_attr_cached(name: str, value: Any, cache: dict[str, list[Any]],
                       view: bool = False) -> dict[str, StateValue | JSONList]:
    """:func:`encode_attr`, with a list of frozen dataclasses (a privacy ledger's events)
    encoded an element at a time, each element once: ``cache[name]`` keeps the elements and
    their JSON in order, reused where the list still holds the very object (checked frozen
    once). A DP run checkpoints every round, and encoding the whole ledger again cost O(T)
    a round. ``view``: such a list's text as its :class:`~fedlabels.core.json_list.JSONList`
    (not joined)."""
    from fedlabels.core.json_list import json_list_view, kept

    if not isinstance(value, list):
        return dict(encode_attr(name, value))
    done = cache.setdefault(name, [])  # (the elements kept were checked frozen before)
    if not all(_frozen(v) for v in value[kept(value, done):]):
        return dict(encode_attr(name, value))
    text = json_list_view(value, _element_json, done)
    return {f"{name}#json": text if view else text.text}


def _element_json(value: Any) -> str:
    """One element of a list as :func:`encode_attr` writes it."""
    return json.dumps(_tree(value), sort_keys=True)


def decode_attr(owner: Any, name: str, state: Mapping[str, StateValue]) -> None:
    """Set ``owner.name`` from the entries :func:`encode_attr` made."""
    if name in state:
        setattr(owner, name, state[name])
    elif f"{name}#generator" in state:
        setattr(owner, name, generator_from_state(state[f"{name}#generator"]))
    elif f"{name}#json" in state:
        text = state[f"{name}#json"]
        if not isinstance(text, str):
            raise FedLabelsError(f"state entry {name}#json is not a JSON string.")
        setattr(owner, name, _untree(json.loads(text)))
    else:
        raise FedLabelsError(f"{type(owner).__name__}: state has no entry {name!r}.")


def _tree(value: Any) -> Any:
    """A JSON-able tree; tuples, arrays, non-string keys and dataclasses tagged."""
    if value is None or isinstance(value, int | float | str | bool):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise FedLabelsError("server state holds an object array; plain arrays only.")
        return {"__ndarray__": value.ravel().tolist(), "dtype": value.dtype.str,
                "shape": list(value.shape)}
    if isinstance(value, list):
        return [_tree(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [_tree(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"__dict__": {k: _tree(v) for k, v in value.items()}}
        return {"__items__": [[_tree(k), _tree(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if not cls.__module__.startswith("fedlabels."):
            raise FedLabelsError(f"server state holds a {cls.__name__} from outside fedlabels.")
        fields = {f.name: _tree(getattr(value, f.name))
                  for f in dataclasses.fields(value) if f.init}
        return {"__dataclass__": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    raise FedLabelsError(f"server state holds a {type(value).__name__}; arrays, scalars, "
                         "lists, tuples, dicts and fedlabels dataclasses only.")


def _untree(node: Any) -> Any:
    if isinstance(node, list):
        return [_untree(v) for v in node]
    if not isinstance(node, dict):
        return node
    if "__ndarray__" in node:
        return np.asarray(node["__ndarray__"], dtype=np.dtype(node["dtype"])).reshape(
            node["shape"])
    if "__tuple__" in node:
        return tuple(_untree(v) for v in node["__tuple__"])
    if "__dict__" in node:
        return {k: _untree(v) for k, v in node["__dict__"].items()}
    if "__items__" in node:
        return {_untree(k): _untree(v) for k, v in node["__items__"]}
    if "__dataclass__" in node:
        module, _, qualname = str(node["__dataclass__"]).partition(":")
        if not module.startswith("fedlabels."):
            raise FedLabelsError(f"server state names a class outside fedlabels: {module}.")
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise FedLabelsError(f"server state names {qualname}, which is not a dataclass.")
        return cls(**{k: _untree(v) for k, v in node["fields"].items()})
    raise FedLabelsError(f"server state holds an untagged JSON object: {sorted(node)}.")
