"""One module per method; each defines a server role and a client role."""

from fedlabels.errors import FedLabelsError, did_you_mean
from fedlabels.protocols.base import ClientRole, Grid, Method, MethodContext, ServerRole, Settings
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


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise FedLabelsError(f"unknown method {name!r}{did_you_mean(str(name), METHODS)}; "
                             f"available: {', '.join(sorted(METHODS))}.") from None


__all__ = [
    "METHODS",
    "ClientRole",
    "Grid",
    "Method",
    "MethodContext",
    "MethodOptions",
    "Payload",
    "ServerRole",
    "Settings",
    "ThreatModel",
    "get_method",
    "option",
    "register_method",
]
