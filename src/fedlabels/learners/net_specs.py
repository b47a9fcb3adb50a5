"""Model specs of torch networks: ``cnn(arch=svhn)``, ``resnet18(width=16)`` and your own
module, ``module:pkg.mod:factory(lr=0.01)`` (any importable callable returning an
``nn.Module``; see :mod:`fedlabels.learners.torch_net`). Parameters are checked when the
spec is parsed, without importing torch."""

from __future__ import annotations

import importlib
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.model_spec import check_training_params

ARCHITECTURES = ("cifar10", "pneumonia", "mri", "svhn", "small")
_INTS = ("batch_size", "max_steps", "predict_batch_size", "width")
_COMMON = ("lr", "weight_decay", "warm_start", "augment", "shape", "batch_size", "max_steps",
           "predict_batch_size")
PARAMS = {"cnn": ("arch", *_COMMON), "resnet18": ("width", *_COMMON), "module": _COMMON}


def check_net(kind: str, params: dict[str, Any]) -> None:
    """A network spec's parameters (``kind``: cnn, resnet18 or module)."""
    unknown = sorted(set(params) - set(PARAMS[kind]) - ({"factory"} if kind == "module"
                                                          else set()))
    if unknown:
        raise FedLabelsError(f"unknown parameter(s) {', '.join(unknown)}; {kind} takes "
                             f"{', '.join(PARAMS[kind])}.")
    if kind == "cnn" and params.get("arch", "small") not in ARCHITECTURES:
        raise FedLabelsError(f"arch must be one of {', '.join(ARCHITECTURES)}, got "
                             f"{params['arch']!r}.")
    check_training_params(params, _INTS, ("warm_start", "augment"), show=lambda v: v)
    shape = params.get("shape")
    if shape is not None and not (isinstance(shape, tuple) and len(shape) == 3):
        raise FedLabelsError(f"shape must be C-H-W (three positive integers joined by '-'), "
                             f"got {shape!r}.")


def import_factory(path: str) -> Any:
    """The callable ``pkg.mod:name`` names (imported: a factory is code you chose to run)."""
    module, sep, name = str(path).partition(":")
    if not sep or not module or not name:
        raise FedLabelsError(f"model module:{path} must be module:PACKAGE.MODULE:FACTORY, "
                             "e.g. module:mynets:make_cnn.")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise FedLabelsError(f"cannot import {module!r} for model module:{path} ({exc}); "
                             "put it on PYTHONPATH or install it.") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise FedLabelsError(f"module {module!r} has no {name!r} (model module:{path}).")
        obj = getattr(obj, part)
    if not callable(obj):
        raise FedLabelsError(f"{path} is not callable; module: needs a factory returning a "
                             "torch.nn.Module.")
    return obj


def make_net(kind: str, n_classes: int, random_state: int, **params: Any) -> Any:
    """The learner of a ``cnn``, ``resnet18`` or ``module:`` spec."""
    from fedlabels.learners.torch_net import TorchNetClassifier

    check_net(kind, params)
    network: Any = params.pop("arch", "small") if kind == "cnn" else kind
    if kind == "module":
        network = import_factory(params.pop("factory"))
    rename = {"lr": "learning_rate", "shape": "input_shape"}
    kwargs = {rename.get(k, k): v for k, v in params.items()}
    return TorchNetClassifier(network=network, n_classes=n_classes,
                              random_state=random_state, **kwargs)
