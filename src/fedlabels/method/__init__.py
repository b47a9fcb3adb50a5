"""The method plug-in interface: roles, options, threat model, state and shared blocks.

A method (:class:`Method`) declares its options (:mod:`.options`) and threat model
(:mod:`.threat`) and builds a server role and client roles (:mod:`.base`); the built-in
methods live in :mod:`fedlabels.methods`.
"""

from fedlabels.method.base import (
    Capabilities,
    ClientRole,
    Grid,
    Method,
    MethodContext,
    ServerRole,
    Settings,
)
from fedlabels.method.options import MethodOptions, option
from fedlabels.method.threat import Payload, ThreatModel

__all__ = [
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
    "option",
]
