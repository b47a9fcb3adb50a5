"""State of a :class:`~fedlabels.learners.torch_mlp.TorchMLPClassifier` as plain values.

:func:`mlp_state_dict` captures the whole mutable state of a built (or unbuilt) MLP — weights,
Adam moments, the minibatch RNG and cursors, counters — as numpy arrays and scalars, and
:func:`load_mlp_state_dict` restores it into a learner built with the same parameters, which
then behaves bit-identically. Nothing is pickled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedlabels.core.errors import FedLabelsError, shown
from fedlabels.core.own_arrays import made_for_caller

_STATE_FORMAT = "fedlabels.torch_mlp/1"
#: an optimiser's per-parameter slot (Adam's ``opt.0.exp_avg``), not a hyper-parameter
_SLOT = re.compile(r"opt\.\d+\.")


class BatchCursor:
    """Cyclic minibatches over a seeded permutation, reshuffled every epoch."""

    def __init__(self, n: int, batch_size: int, rng: np.random.Generator) -> None:
        self.n, self.batch_size, self.rng = n, batch_size, rng
        self.order = rng.permutation(n)
        self.pos = 0

    def next(self) -> np.ndarray:
        if self.n <= self.batch_size:
            return self.order
        if self.pos + self.batch_size > self.n:
            self.order = self.rng.permutation(self.n)
            self.pos = 0
        idx = self.order[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        return idx


def mlp_state_dict(mlp: Any, *, optimizer_slots: bool = True) -> dict[str, Any]:
    """The learner's whole mutable state as flat keys → ndarrays / scalars (no pickle).

    A learner built with the same constructor parameters that then calls
    :meth:`load_state_dict` with it behaves bit-identically in all later calls. Keys:
    ``format``, ``built``, ``arch.hidden_layer_sizes`` always; when built also
    ``n_features_in``, ``n_classes``, ``steps``, ``model.training``, ``model.<name>``
    (parameters), ``opt.group.<hyper-parameter>[.<i>]``, ``opt.<param index>.<slot>``
    (Adam's ``step``, ``exp_avg``, ``exp_avg_sq``), ``rng.<path>`` (the numpy bit
    generator's state, 128-bit ints as decimal strings) and ``cursor.<id>.<field>``. The
    weights' and the optimiser's arrays are copies made for the caller alone
    (:func:`~fedlabels.core.own_arrays.made_for_caller`: a checkpoint does not copy them
    again). ``optimizer_slots=False`` leaves out ``opt.<param index>.<slot>`` (twice the
    weights; a models file's state, for prediction, keeps none) without copying them.
    """
    state: dict[str, Any] = {"format": _STATE_FORMAT, "built": hasattr(mlp, "model_"),
                             **architecture(mlp)}
    if not state["built"]:
        return state
    state.update({"n_features_in": int(mlp.n_features_in_),
                  "n_classes": int(mlp.n_outputs_), "steps": int(mlp.steps_),
                  "model.training": bool(mlp.model_.training)})
    for name, tensor in mlp.model_.state_dict().items():
        state[f"model.{name}"] = made_for_caller(own_array(tensor))
    opt_state = mlp.optimizer_.state_dict()
    (group,) = opt_state["param_groups"]
    for key, value in group.items():
        if key == "params" or value is None:  # None (torch's "auto") is the default
            continue
        if isinstance(value, tuple):
            state.update({f"opt.group.{key}.{i}": _plain_scalar(v)
                          for i, v in enumerate(value)})
        else:
            state[f"opt.group.{key}"] = _plain_scalar(value)
    for index, slots in opt_state["state"].items() if optimizer_slots else ():
        for slot, value in slots.items():
            state[f"opt.{int(index)}.{slot}"] = (
                made_for_caller(own_array(value)) if torch.is_tensor(value)
                else _plain_scalar(value))
    _flatten_rng(mlp.rng_.bit_generator.state, "rng.", state)
    for key, cursor in sorted(mlp._cursors.items()):
        state.update({f"cursor.{key}.n": int(cursor.n), f"cursor.{key}.pos": int(cursor.pos),
                      f"cursor.{key}.batch_size": int(cursor.batch_size),
                      f"cursor.{key}.order": np.asarray(cursor.order, dtype=np.int64)})
    return state


def own_array(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` as a numpy array of its own, copied once: a CPU tensor's ``numpy()`` shares
    its memory (so it is copied), a device tensor's ``cpu()`` is already a copy."""
    tensor = tensor.detach()
    if tensor.device.type == "cpu":
        return tensor.numpy().copy()
    return tensor.cpu().numpy()


def load_mlp_state_dict(mlp: Any, state: Mapping[str, Any], *,
                        optimizer: bool = True) -> None:
    """Restore a state from :meth:`state_dict` of a learner with the same parameters.

    ``optimizer=True`` (resuming a run, a role's restore) needs the optimiser's entries
    (``opt.*``), which every state a learner takes has: a built state without them is
    refused, where it restarted Adam unseen. ``optimizer=False`` (a models file's state,
    written for prediction: Adam's moments, and your own network's optimiser, left out)
    loads what optimiser entries it has and starts the rest fresh.

    Raises :class:`~fedlabels.core.errors.FedLabelsError` if the state is malformed or was
    taken from a different architecture.
    """
    state = dict(state)
    if state.get("format") != _STATE_FORMAT:
        raise FedLabelsError(f"not a TorchMLPClassifier state (format "
                             f"{state.get('format')!r}, expected {_STATE_FORMAT!r}).")
    for arch_key, mine in architecture(mlp).items():
        theirs = _need(state, arch_key)
        same = (np.array_equal(np.asarray(theirs), mine) if isinstance(mine, np.ndarray)
                else str(theirs) == str(mine))
        if not same:
            raise FedLabelsError(f"torch learner state is for {arch_key[len('arch.'):]}="
                                 f"{shown(theirs)}, this learner has {shown(mine)}.")
    if not bool(_need(state, "built")):
        for attr in ("model_", "optimizer_", "rng_", "classes_", "n_outputs_",
                     "n_features_in_", "steps_", "_cursors"):
            mlp.__dict__.pop(attr, None)
        return
    has_optimizer = any(k.startswith("opt.") for k in state)
    if optimizer and not has_optimizer:
        raise FedLabelsError("TorchMLPClassifier state lacks its optimiser's entries "
                             "(opt.*), which every state a run checkpoints has: it cannot "
                             "train on as it was (a damaged or hand-made state).")
    n_classes = int(_need(state, "n_classes"))
    if mlp.n_classes is not None and int(mlp.n_classes) != n_classes:
        raise FedLabelsError(f"TorchMLPClassifier state has {n_classes} classes, this "
                             f"learner was configured with n_classes={mlp.n_classes}.")
    n_features = int(_need(state, "n_features_in"))
    if _reusable(mlp, state, n_features, n_classes):  # every entry below is overwritten
        mlp._cursors = {}
    else:
        mlp._initialise(n_features, n_classes)
    params = {}
    for name, tensor in mlp.model_.state_dict().items():
        array = np.asarray(_need(state, f"model.{name}"))
        if array.shape != tuple(tensor.shape):
            raise FedLabelsError(f"TorchMLPClassifier state: model.{name} has shape "
                                 f"{array.shape}, the network expects {tuple(tensor.shape)}.")
        params[name] = torch.from_numpy(np.array(array)).to(tensor.dtype)
    mlp.model_.load_state_dict(params)
    mlp.model_.train(bool(_need(state, "model.training")))
    if optimizer and int(_need(state, "steps")) > 0 \
            and isinstance(mlp.optimizer_, torch.optim.Adam) \
            and not any(_SLOT.match(k) for k in state):
        raise FedLabelsError("TorchMLPClassifier state lacks Adam's moments (opt.<i>.step, "
                             "exp_avg, exp_avg_sq) after its training steps, which every "
                             "state a run checkpoints has: it cannot train on as it was (a "
                             "damaged or hand-made state).")
    if has_optimizer:  # else (optimizer=False only) a state for prediction: fresh Adam
        _load_optimizer(mlp, state)
    mlp.rng_ = _restore_rng(state, "rng.")
    mlp.steps_ = int(_need(state, "steps"))
    ids = sorted({int(k.split(".")[1]) for k in state if k.startswith("cursor.")})
    for key in ids:
        cursor = BatchCursor.__new__(BatchCursor)
        cursor.n = int(_need(state, f"cursor.{key}.n"))
        cursor.batch_size = int(_need(state, f"cursor.{key}.batch_size"))
        cursor.pos = int(_need(state, f"cursor.{key}.pos"))
        cursor.order = np.array(_need(state, f"cursor.{key}.order"), dtype=np.int64)
        cursor.rng = mlp.rng_  # all cursors share the learner's generator
        mlp._cursors[key] = cursor


def _load_optimizer(mlp: Any, state: Mapping[str, Any]) -> None:
    """The optimiser's hyper-parameters and per-parameter slots from ``state``."""
    opt_state = mlp.optimizer_.state_dict()
    (group,) = opt_state["param_groups"]
    for key, value in list(group.items()):
        if key == "params":
            continue
        if isinstance(value, tuple):
            group[key] = tuple(_need(state, f"opt.group.{key}.{i}")
                               for i in range(len(value)))
        elif f"opt.group.{key}" in state:
            group[key] = state[f"opt.group.{key}"]
    shapes = [tuple(p.shape) for p in mlp.model_.parameters()]
    slots: dict[int, dict[str, Any]] = {}
    for key, value in state.items():
        if key.startswith("opt.") and not key.startswith("opt.group."):
            _, index, slot = key.split(".", 2)
            if not 0 <= int(index) < len(shapes):
                raise FedLabelsError(f"TorchMLPClassifier state: {key} names no parameter.")
            if isinstance(value, np.ndarray):  # "step" is 0-d, moments match the param
                shape = () if slot == "step" else shapes[int(index)]
                if value.size != int(np.prod(shape)):
                    raise FedLabelsError(f"TorchMLPClassifier state: {key} has shape "
                                         f"{value.shape}, expected {shape}.")
                value = torch.from_numpy(np.array(value).reshape(shape))
            slots.setdefault(int(index), {})[slot] = value
    opt_state["state"] = slots
    try:
        mlp.optimizer_.load_state_dict(opt_state)
    except (ValueError, KeyError) as exc:
        raise FedLabelsError(f"TorchMLPClassifier state: bad optimizer state ({exc}).") \
            from None


def _reusable(mlp: Any, state: Mapping[str, Any], n_features: int, n_classes: int) -> bool:
    """Whether the learner's built network and optimizer can take ``state`` as they are
    (same input width, classes, entries and shapes, resident on its device), so loading it
    need not build and initialise a network first (a few ms for the paper's MLP, per client
    and per checkpoint of a run with workers)."""
    model = getattr(mlp, "model_", None)
    if model is None or getattr(mlp, "_home", None) is not None or \
            getattr(mlp, "optimizer_", None) is None:
        return False
    if getattr(mlp, "n_features_in_", None) != n_features or \
            getattr(mlp, "n_outputs_", None) != n_classes:
        return False
    own = model.state_dict()
    stored = {k[len("model."):] for k in state if k.startswith("model.") and k != "model.training"}
    return stored == set(own) and all(
        np.shape(state[f"model.{name}"]) == tuple(t.shape) for name, t in own.items())


def architecture(mlp: Any) -> dict[str, Any]:
    """The ``arch.*`` entries that a state must match: the MLP's hidden layer sizes, or
    what a subclass's ``architecture_state()`` names (a CNN's architecture and shape)."""
    own = getattr(mlp, "architecture_state", None)
    if callable(own):
        return {f"arch.{k}": v for k, v in own().items()}
    own_sizes = getattr(mlp, "hidden_sizes", None)  # the MLPs' (an int is one layer)
    sizes = own_sizes() if callable(own_sizes) else mlp.hidden_layer_sizes
    return {"arch.hidden_layer_sizes": np.asarray([int(h) for h in sizes], dtype=np.int64)}


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


def _need(state: Mapping[str, Any], key: str) -> Any:
    if key not in state:
        raise FedLabelsError(f"TorchMLPClassifier state lacks the entry {key!r}.")
    return state[key]


def _plain_scalar(value: Any) -> int | float | str | bool | None:
    """A Python scalar (0-d tensors and numpy scalars unwrapped)."""
    if torch.is_tensor(value) or isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise FedLabelsError(f"cannot store a value of type {type(value).__name__} in a state.")


def _flatten_rng(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Flatten a numpy ``bit_generator.state``; ints become decimal strings (128-bit)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten_rng(sub, f"{prefix}{key}.", out)
        return
    key = prefix[:-1]
    if isinstance(value, np.ndarray):
        out[key] = value.copy()
    elif isinstance(value, str):
        out[key] = value
    else:
        out[key] = str(int(value))


def _restore_rng(state: Mapping[str, Any], prefix: str) -> np.random.Generator:
    """Inverse of :func:`_flatten_rng`: a Generator in exactly the stored state."""
    name = _need(state, f"{prefix}bit_generator")
    if name not in _BIT_GENERATORS:
        raise FedLabelsError(f"TorchMLPClassifier state: unknown bit generator {name!r}.")
    nested: dict[str, Any] = {}
    for key, value in state.items():
        if not key.startswith(prefix) or key == f"{prefix}bit_generator":
            continue
        *path, leaf = key[len(prefix):].split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = np.array(value) if isinstance(value, np.ndarray) else int(value)
    bit_generator = getattr(np.random, name)()
    bit_generator.state = {"bit_generator": name, **nested}
    return np.random.Generator(bit_generator)
