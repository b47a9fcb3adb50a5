"""Client state as plain values: numpy arrays and scalars, never pickled objects.

A client role's :meth:`~fedlabels.method.base.ClientRole.state_dict` maps flat string
keys to :data:`StateValue` (an ``np.ndarray``, ``int``, ``float``, ``str``, ``bool`` or
``None``). A deployment stores it between messages (Flower's ``context.state``) and a
restored role continues bit-identically. Bytes (key material) travel as ``uint8`` arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.own_arrays import is_made_for_caller

StateValue: TypeAlias = np.ndarray | int | float | str | bool | None
State: TypeAlias = dict[str, StateValue]

_SCALARS = (int, float, str, bool)


def check_state_value(key: str, value: Any) -> StateValue:
    """``value`` if it is a plain state value, else a clear error naming ``key``."""
    if value is None or isinstance(value, _SCALARS):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise FedLabelsError(f"state entry {key!r} is an object array; state holds plain "
                                 "numeric arrays only.")
        return value
    raise FedLabelsError(f"state entry {key!r} is a {type(value).__name__}; state holds numpy "
                         "arrays and int/float/str/bool/None only.")


def bytes_to_state(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).copy()


def state_to_bytes(value: StateValue) -> bytes:
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8:
        raise FedLabelsError("expected a uint8 array holding bytes in the client state.")
    return value.tobytes()


def copied(state: Mapping[str, StateValue]) -> State:
    """``state`` with its arrays copied (a role's arrays may be its live ones)."""
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in state.items()}


def own_copies(state: Mapping[str, StateValue]) -> State:
    """``state`` with arrays that nothing else holds: its arrays copied, but for those a
    learner's ``state_dict`` made for its caller alone (its weights, copied from its tensors
    already: :func:`~fedlabels.core.own_arrays.made_for_caller`), which are kept as they
    are. Unlike :func:`copied`, the result may share those arrays with ``state``."""
    return {k: v.copy() if isinstance(v, np.ndarray) and not is_made_for_caller(v) else v
            for k, v in state.items()}


def prefixed(prefix: str, state: Mapping[str, StateValue]) -> State:
    """``state`` with every key under ``prefix.``."""
    return {f"{prefix}.{k}": v for k, v in state.items()}


def unprefixed(prefix: str, state: Mapping[str, StateValue]) -> State:
    """The entries of ``state`` under ``prefix.``, without the prefix."""
    head = prefix + "."
    return {k[len(head):]: v for k, v in state.items() if k.startswith(head)}


def generator_state(rng: np.random.Generator) -> str:
    """A numpy Generator's exact state as a JSON string (128-bit ints do not fit arrays)."""
    import json

    return json.dumps(rng.bit_generator.state, sort_keys=True)


def generator_from_state(text: StateValue) -> np.random.Generator:
    """The Generator :func:`generator_state` described, continuing where it stopped."""
    import json

    if not isinstance(text, str):
        raise FedLabelsError("expected a generator state string in the client state.")
    state = json.loads(text)
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)
