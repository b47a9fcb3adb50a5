"""Model specs of torch networks: ``cnn(arch=svhn)``, ``resnet18(width=16)`` and your own
module, ``module:pkg.mod:factory(lr=0.01)`` (any importable callable returning an
``nn.Module``; see :mod:`fedlabels.learners.torch_net`). Parameters are checked when the
spec is parsed, without importing torch."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError, did_you_mean, raised_at, unknown_parameters
from fedlabels.learners.model_spec import (
    FACTORY_ARGS,
    SPEC_NAMES,
    ModelSpec,
    check_training_params,
    factory_parameters,
    missing_factory_arguments,
    quoted,
)

ARCHITECTURES = ("cifar10", "pneumonia", "mri", "svhn", "small")
_INTS = ("batch_size", "max_steps", "predict_batch_size", "width")
_COMMON = ("lr", "weight_decay", "warm_start", "augment", "shape", "batch_size", "max_steps",
           "predict_batch_size")
PARAMS = {"cnn": ("arch", *_COMMON), "resnet18": ("width", *_COMMON), "module": _COMMON}


def factory_arguments(factory: Any) -> tuple[tuple[str, ...], bool]:
    """The keyword parameters a factory takes besides those the learner passes, and whether
    it takes any keyword (``**kwargs``)."""
    parameters = factory_parameters(factory)
    named = tuple(n for n, p in parameters.items()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                  and n not in FACTORY_ARGS)
    return named, any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def split_factory_arguments(params: dict[str, Any], factory: Any,
                            path: str) -> dict[str, Any]:
    """The parameters of a ``module:`` spec that are its factory's own (``hidden=8`` for
    ``make(n_features, n_classes, hidden=64)``), taken out of ``params``; an unknown one is
    an error naming both lists."""
    named, takes_any = factory_arguments(factory)
    own = [k for k in params if k not in PARAMS["module"] and k != "factory"]
    reserved = sorted(set(own) & set(FACTORY_ARGS))
    unknown = reserved or sorted(k for k in own if k not in named and not takes_any)
    if unknown:
        passed = " (n_features, n_classes, input_shape: the learner passes them)" \
            if reserved else ""
        raise FedLabelsError(
            f"{unknown_parameters(unknown, [*PARAMS['module'], *named])} for "
            f"module:{path}; the learner "
            f"takes {', '.join(PARAMS['module'])}, the factory "
            f"{', '.join(named) if named else 'nothing more'}{passed}.")
    missing = missing_factory_arguments(factory, own)
    if missing:
        given = ModelSpec("module", {"factory": path, **params, **dict.fromkeys(missing, "...")})
        raise FedLabelsError(
            f"model factory module:{path} needs {', '.join(missing)}, which the learner does "
            f"not pass (it passes those of {', '.join(FACTORY_ARGS)} that the factory "
            f"names); give {'it' if len(missing) == 1 else 'them'} in the spec: {given}, or "
            "a default in the factory.")
    return {k: params.pop(k) for k in own}


def check_net(kind: str, params: dict[str, Any]) -> None:
    """A network spec's parameters (``kind``: cnn, resnet18 or module; a module's factory
    arguments are checked against its signature, :func:`split_factory_arguments`)."""
    unknown = [] if kind == "module" else sorted(set(params) - set(PARAMS[kind]))
    if unknown:
        raise FedLabelsError(f"{unknown_parameters(unknown, PARAMS[kind])}; {kind} takes "
                             f"{', '.join(PARAMS[kind])}.")
    if kind == "cnn" and params.get("arch", "small") not in ARCHITECTURES:
        raise FedLabelsError(f"arch must be one of {', '.join(ARCHITECTURES)}, got "
                             f"{quoted(params['arch'])}.")
    check_training_params(params, _INTS, ("warm_start", "augment"),
                          optional=("predict_batch_size",))
    shape = params.get("shape")
    if shape is not None and not (isinstance(shape, tuple) and len(shape) == 3):
        raise FedLabelsError(f"shape must be C-H-W (three positive integers joined by '-'), "
                             f"got {quoted(shape)}.")


def import_factory(path: str) -> Any:
    """The callable ``pkg.mod:name`` names (imported: a factory is code you chose to run)."""
    module, sep, name = str(path).partition(":")
    if not sep or not module or not name:
        raise FedLabelsError(f"model module:{path} must be module:PACKAGE.MODULE:FACTORY, "
                             "e.g. module:mynets:make_cnn.")
    try:
        obj: Any = importlib.import_module(module)
    except Exception as exc:  # the module's own code failed: say where, in one line
        raise FedLabelsError(_import_failure(module, path, exc)) from exc
    where = getattr(obj, "__file__", None)  # another file of that name may come first
    for part in name.split("."):
        if not hasattr(obj, part):
            close = did_you_mean(part, [n for n in dir(obj) if not n.startswith("_")])
            raise FedLabelsError(f"module {module!r} has no {name!r}{close} (model "
                                 f"module:{path}; imported from "
                                 f"{where or 'a namespace package'}).")
        obj = getattr(obj, part)
    if not callable(obj):
        raise FedLabelsError(f"{path} is not callable; module: needs a factory returning a "
                             "torch.nn.Module.")
    return obj


def _import_failure(module: str, path: str, exc: Exception) -> str:
    """Why ``module`` did not import: not found, a module it imports not installed, or an
    error in its code (with the file and line where it was raised)."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing is not None and (module == missing or module.startswith(missing + ".")):
        return (f"cannot import {module!r} for model module:{path} ({exc}); put it on "
                f"PYTHONPATH or install it{_in_working_directory(missing)}.")
    if missing is not None:
        return (f"importing {module!r} for model module:{path} failed: it imports "
                f"{missing!r}, which is not installed here; install it, or remove that import.")
    return (f"importing {module!r} for model module:{path} failed: {raised_at(exc)}; fix "
            f"the module (python -c 'import {module}' shows the whole traceback).")


def _in_working_directory(missing: str) -> str:
    """`` (x.py is in the current directory, ...)`` where the module not found is there: the
    ``fedlabels`` command, unlike ``python -m``, does not look in the current directory."""
    top = missing.split(".")[0]
    here = Path.cwd()
    found = next((f for f in (f"{top}.py", f"{top}/") if (here / f).exists()), None)
    if found is None:
        return ""
    return (f" ({found} is in the current directory, which the fedlabels command does not "
            "search: run PYTHONPATH=. fedlabels ..., or python -m fedlabels ...)")


def make_net(kind: str, n_classes: int, random_state: int, **params: Any) -> Any:
    """The learner of a ``cnn``, ``resnet18`` or ``module:`` spec."""
    from fedlabels.learners.torch_net import TorchNetClassifier

    check_net(kind, params)
    network: Any = params.pop("arch", "small") if kind == "cnn" else kind
    if kind == "module":
        path = params.pop("factory")
        network = import_factory(path)
        own = split_factory_arguments(params, network, path)
        if own:
            network = BoundFactory(network, own)
    kwargs = {SPEC_NAMES.get(k, k): v for k, v in params.items()}
    return TorchNetClassifier(network=network, n_classes=n_classes,
                              random_state=random_state, **kwargs)


class BoundFactory:
    """A factory with some of its keyword arguments given by the spec
    (``module:mynets:make(hidden=8)``); named ``mynets:make(hidden=8)`` in results and
    checkpoints, and called like the factory with the rest."""

    def __init__(self, factory: Any, arguments: dict[str, Any]) -> None:
        self.factory = factory
        self.arguments = dict(arguments)
        self.__module__ = getattr(factory, "__module__", "?")
        shown = ",".join(f"{k}={v}" for k, v in self.arguments.items())
        self.__qualname__ = f"{getattr(factory, '__qualname__', '?')}({shown})"
        self.__signature__ = inspect.signature(factory)

    def __call__(self, **kwargs: Any) -> Any:
        return self.factory(**kwargs, **self.arguments)

    def __repr__(self) -> str:  # each client's copy shows (and compares) alike
        return f"{self.__module__}:{self.__qualname__}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoundFactory) and other.factory is self.factory \
            and other.arguments == self.arguments

    def __hash__(self) -> int:
        return hash((id(self.factory), tuple(sorted(map(repr, self.arguments.items())))))
