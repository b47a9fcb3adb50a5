"""The built-in methods, grouped by family, and the registry that finds a method by name.

Each method module defines a server role, a client role and a :class:`~fedlabels.method.Method`
built on :mod:`fedlabels.method`; :data:`METHODS` imports it when its name is first used.
"""

from fedlabels.methods.registry import (
    METHODS,
    PLUGIN_ERRORS,
    PLUGINS,
    available_methods,
    discover_methods,
    get_method,
    register_method,
)

__all__ = ["METHODS", "PLUGINS", "PLUGIN_ERRORS", "available_methods", "discover_methods",
           "get_method", "register_method"]
