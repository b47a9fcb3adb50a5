"""The registry of methods by name; a built-in method's module is imported on first use.

Importing this module (or :mod:`fedlabels.method`) loads no method: :data:`METHODS` lists
every built-in name at once and imports a method's module when it is looked up, so a run of
``fedct`` does not import the XCLP cryptography or the teacher-student accountants. Methods
of other installed packages join through the ``fedlabels.methods`` entry points
(:mod:`fedlabels.methods.discovery`) the first time an unknown name is looked up or the
methods are listed (:func:`available_methods`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

from fedlabels.core.errors import FedLabelsError, did_you_mean
from fedlabels.method import options as _options
from fedlabels.method.base import Method
from fedlabels.method.options import OPTION_USERS
from fedlabels.method.threat import ThreatModel

#: built-in method name -> (module, class), in the order ``fedlabels methods`` lists them
BUILTIN: dict[str, tuple[str, str]] = {
    "fedct": ("fedlabels.methods.fedct.fedct", "FedCT"),
    "fedavg": ("fedlabels.methods.fedavg.fedavg", "FedAvg"),
    "local": ("fedlabels.methods.local", "LocalOnly"),
    "centralized": ("fedlabels.methods.local", "Centralized"),
    "xclp": ("fedlabels.methods.xclp.methods", "XCLP"),
    "perclient-lp": ("fedlabels.methods.xclp.methods", "PerClientLP"),
    "fedavg-xclp": ("fedlabels.methods.xclp.methods", "FedAvgXCLP"),
    "dd": ("fedlabels.methods.distillation.dd", "DistributedDistillation"),
    "fedmd": ("fedlabels.methods.distillation.fedmd", "FedMD"),
    "pate": ("fedlabels.methods.teacher_student.pate", "PATE"),
    "dp-pate": ("fedlabels.methods.teacher_student.pate", "DPPATE"),
    "fredy": ("fedlabels.methods.teacher_student.fredy", "FREDY"),
    "dp-fedct": ("fedlabels.methods.fedct.dp_fedct", "DPFedCT"),
    "dp-fedavg": ("fedlabels.methods.fedavg.dp_fedavg", "DPFedAvg"),
    "ds-fl": ("fedlabels.methods.distillation.dsfl", "DSFL"),
    "feddf": ("fedlabels.methods.distillation.feddf", "FedDF"),
}


class MethodRegistry(MutableMapping[str, Method]):
    """Name -> :class:`Method`; built-in methods are imported when first looked up."""

    def __init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._removed: set[str] = set()

    def _load(self, name: str) -> None:
        module, cls = BUILTIN[name]
        register_method(getattr(importlib.import_module(module), cls)())

    def __getitem__(self, name: str) -> Method:
        if name not in self._methods and name in BUILTIN and name not in self._removed:
            self._load(name)
        return self._methods[name]

    def __setitem__(self, name: str, method: Method) -> None:
        self._removed.discard(name)
        self._methods[name] = method

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._methods.pop(name, None)
        self._removed.add(name)

    def __iter__(self) -> Iterator[str]:
        builtin = [n for n in BUILTIN if n not in self._removed]
        return iter([*builtin, *(n for n in self._methods if n not in BUILTIN)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return name in self._methods or (name in BUILTIN and name not in self._removed)

    def load_all(self) -> None:
        """Import every built-in method (to list who takes an option, say)."""
        for name in self:
            self[name]


METHODS = MethodRegistry()


def register_method(method: Method) -> Method:
    """Make a method available by name; its declarations are checked here.

    A method must have a name, a threat model and an options dataclass whose fields are all
    declared with :func:`~fedlabels.method.options.option`.
    """
    if not method.name:
        raise TypeError(f"{type(method).__name__} has no name")
    if not isinstance(getattr(method, "threat_model", None), ThreatModel):
        raise TypeError(f"method {method.name!r} declares no threat_model")
    for info in method.options_class.declared():
        users = OPTION_USERS.setdefault(info.name, [])
        if method.name not in users:
            users.append(method.name)
    METHODS[method.name] = method
    return method


#: plug-in methods registered: method name -> the package that declares it
PLUGINS: dict[str, str] = {}
#: plug-in methods left out: entry-point name -> the one-line reason (naming the package)
PLUGIN_ERRORS: dict[str, str] = {}
_LOADED: set[tuple[str, str]] = set()  # entry points already tried (name, object path)


def discover_methods() -> dict[str, str]:
    """Register the methods of installed packages (``fedlabels.methods`` entry points) not
    tried yet; returns :data:`PLUGIN_ERRORS`, the plug-ins left out and why."""
    from fedlabels.methods.discovery import discover

    def register(method: Method, package: str) -> None:
        register_method(method)
        PLUGINS[method.name] = package

    PLUGIN_ERRORS.update(discover(METHODS, _LOADED, register))
    return PLUGIN_ERRORS


def available_methods() -> dict[str, Method]:
    """Every registered method, plug-ins included, by name."""
    discover_methods()
    return {name: METHODS[name] for name in sorted(METHODS)}


def get_method(name: str) -> Method:
    """The method registered as ``name`` (built in or from an installed plug-in)."""
    if name not in METHODS:
        discover_methods()
    if name in METHODS:
        return METHODS[name]
    if name in PLUGIN_ERRORS:
        raise FedLabelsError(PLUGIN_ERRORS[name] + ".")
    raise FedLabelsError(f"unknown method {name!r}{did_you_mean(str(name), METHODS)}; "
                         f"available: {', '.join(sorted(METHODS))}.")


def _load_option_users() -> None:
    """Register every method, the installed plug-ins' too, so that OPTION_USERS is full (an
    error about a plug-in's option then says it is one)."""
    discover_methods()
    METHODS.load_all()


_options.load_option_users = _load_option_users
