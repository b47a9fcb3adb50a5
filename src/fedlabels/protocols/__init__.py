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

# XCLP (issue 8): cross-client label propagation, its per-client baseline, FedAvg+XCLP
from fedlabels.protocols.fedavg_xclp import FedAvgXCLP  # noqa: E402
from fedlabels.protocols.xclp import XCLP, PerClientLP  # noqa: E402

for _m in (XCLP(), PerClientLP(), FedAvgXCLP()):
    register_method(_m)

# label-sharing baselines (issue 4): DD, FedMD, PATE, DP-PATE, FREDY
from fedlabels.protocols.dd import DistributedDistillation  # noqa: E402
from fedlabels.protocols.fedmd import FedMD  # noqa: E402
from fedlabels.protocols.fredy import FREDY  # noqa: E402
from fedlabels.protocols.pate import DPPATE, PATE  # noqa: E402

for _m in (DistributedDistillation(), FedMD(), PATE(), DPPATE(), FREDY()):
    register_method(_m)

# differential privacy (issue 5): DP-FedCT (XOR mechanism / k-ary RR), DP-FedAvg
from fedlabels.protocols.dp_fedavg import DPFedAvg  # noqa: E402
from fedlabels.protocols.dp_fedct import DPFedCT  # noqa: E402

for _m in (DPFedCT(), DPFedAvg()):
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
