"""One module per method; each defines a server role and a client role.

Methods of other installed packages join the registry through the ``fedlabels.methods``
entry points (:mod:`fedlabels.protocols.discovery`) the first time a method is looked up.
"""

from fedlabels.errors import FedLabelsError
from fedlabels.protocols.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.protocols.dd import DistributedDistillation
from fedlabels.protocols.dp_fedavg import DPFedAvg
from fedlabels.protocols.dp_fedct import DPFedCT
from fedlabels.protocols.dsfl import DSFL
from fedlabels.protocols.fedavg import FedAvg
from fedlabels.protocols.fedct import FedCT
from fedlabels.protocols.feddf import FedDF
from fedlabels.protocols.fedmd import FedMD
from fedlabels.protocols.fredy import FREDY
from fedlabels.protocols.local import Centralized, LocalOnly
from fedlabels.protocols.options import OPTION_USERS, MethodOptions, option
from fedlabels.protocols.pate import DPPATE, PATE
from fedlabels.protocols.threat import Payload, ThreatModel
from fedlabels.protocols.xclp import XCLP, FedAvgXCLP, PerClientLP

METHODS: dict[str, Method] = {}
#: plug-in methods registered: method name -> the package that declares it
PLUGINS: dict[str, str] = {}
#: plug-in methods left out: entry-point name -> the one-line reason (naming the package)
PLUGIN_ERRORS: dict[str, str] = {}
_LOADED: set[tuple[str, str]] = set()  # entry points already tried (name, object path)


def register_method(method: Method) -> Method:
    """Make a method available by name; its declarations are checked here.

    A method must have a name, a threat model and an options dataclass whose fields are all
    declared with :func:`~fedlabels.protocols.options.option`.
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


_BUILTIN_METHODS: tuple[Method, ...] = (
    FedCT(), FedAvg(), LocalOnly(), Centralized(),
    # XCLP (issue 8): cross-client label propagation, its per-client baseline, FedAvg+XCLP
    XCLP(), PerClientLP(), FedAvgXCLP(),
    # label-sharing baselines (issue 4): DD, FedMD, PATE, DP-PATE, FREDY
    DistributedDistillation(), FedMD(), PATE(), DPPATE(), FREDY(),
    # differential privacy (issue 5): DP-FedCT (XOR mechanism / k-ary RR), DP-FedAvg
    DPFedCT(), DPFedAvg(),
    # the label-sharing baselines the field expects (issue 19): DS-FL (ERA), FedDF
    DSFL(), FedDF(),
)
for _method in _BUILTIN_METHODS:
    register_method(_method)


def discover_methods() -> dict[str, str]:
    """Register the methods of installed packages (``fedlabels.methods`` entry points) not
    tried yet; returns :data:`PLUGIN_ERRORS`, the plug-ins left out and why."""
    from fedlabels.protocols.discovery import discover

    def register(method: Method, package: str) -> None:
        register_method(method)
        PLUGINS[method.name] = package

    PLUGIN_ERRORS.update(discover(METHODS, _LOADED, register))
    return PLUGIN_ERRORS


def available_methods() -> dict[str, Method]:
    """Every registered method, plug-ins included, by name."""
    discover_methods()
    return dict(sorted(METHODS.items()))


def get_method(name: str) -> Method:
    """The method registered as ``name`` (built in or from an installed plug-in)."""
    if name not in METHODS:
        discover_methods()
    if name in METHODS:
        return METHODS[name]
    if name in PLUGIN_ERRORS:
        raise FedLabelsError(PLUGIN_ERRORS[name] + ".")
    raise FedLabelsError(f"unknown method {name!r}; available: "
                         f"{', '.join(sorted(METHODS))}.")


__all__ = [
    "METHODS",
    "PLUGINS",
    "PLUGIN_ERRORS",
    "Capabilities",
    "ClientRole",
    "Grid",
    "Method",
    "MethodContext",
    "MethodOptions",
    "Payload",
    "ServerRole",
    "Settings",
    "ThreatModel",
    "available_methods",
    "discover_methods",
    "get_method",
    "option",
    "register_method",
]
