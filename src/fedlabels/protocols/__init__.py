"""One module per method; each defines a server role and a client role."""

from fedlabels.errors import FedLabelsError
from fedlabels.protocols.base import ClientRole, Grid, Method, MethodContext, ServerRole, Settings
from fedlabels.protocols.fedavg import FedAvg
from fedlabels.protocols.fedct import FedCT
from fedlabels.protocols.local import Centralized, LocalOnly

METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Make a method available by name (later issues register more)."""
    METHODS[method.name] = method
    return method


for _m in (FedCT(), FedAvg(), LocalOnly(), Centralized()):
    register_method(_m)


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise FedLabelsError(f"unknown method {name!r}; available: "
                             f"{', '.join(sorted(METHODS))}.") from None


__all__ = [
    "METHODS",
    "ClientRole",
    "Grid",
    "Method",
    "MethodContext",
    "ServerRole",
    "Settings",
    "get_method",
    "register_method",
]
