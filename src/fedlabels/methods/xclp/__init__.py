"""XCLP (Cross-Client Label Propagation), its per-client baseline and FedAvg+XCLP.

* :mod:`.options` — the options of each method;
* :mod:`.client` / :mod:`.server` — the two sides of Algorithm 1, one handler / method per
  phase (SecureHamming's message sequence is :mod:`fedlabels.secure.hamming_protocol`);
* :mod:`.methods` — ``xclp``, ``perclient-lp`` and ``fedavg-xclp`` (Algorithm 2);
* :mod:`.threat` — what each method's clients send, declared.
"""

from fedlabels.methods.xclp.client import XCLPClientCore
from fedlabels.methods.xclp.methods import (
    XCLP,
    FedAvgXCLP,
    FedAvgXCLPClient,
    FedAvgXCLPServer,
    PerClientLP,
    PerClientLPClient,
    XCLPClient,
    XCLPServer,
    evaluation_slice,
    hidden_features,
    propagate_alone,
    raw_features,
    split_labels,
)
from fedlabels.methods.xclp.options import (
    FedAvgXCLPOptions,
    LPOptions,
    PerClientLPOptions,
    XCLPOptions,
    XCLPProtocolOptions,
)
from fedlabels.methods.xclp.server import PHASES, XCLPOutcome, XCLPServerCore

__all__ = [
    "PHASES",
    "XCLP",
    "FedAvgXCLP",
    "FedAvgXCLPClient",
    "FedAvgXCLPOptions",
    "FedAvgXCLPServer",
    "LPOptions",
    "PerClientLP",
    "PerClientLPClient",
    "PerClientLPOptions",
    "XCLPClient",
    "XCLPClientCore",
    "XCLPOptions",
    "XCLPOutcome",
    "XCLPProtocolOptions",
    "XCLPServer",
    "XCLPServerCore",
    "evaluation_slice",
    "hidden_features",
    "propagate_alone",
    "raw_features",
    "split_labels",
]
