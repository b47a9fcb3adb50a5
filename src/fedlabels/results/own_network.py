"""Your own torch network in a models file: its factory by name, rebuilt only when trusted.

A network of ``--model module:MODULE:FACTORY(...)`` or ``fl.TorchModel(factory)`` is stored
as its ``state_dict`` (plain arrays, as the built-in networks are) and a record naming the
factory: ``{"module", "name", "kwargs"}`` (a spec's or ``functools.partial``'s keywords,
plain values). Rebuilding it imports ``module`` and calls the factory, which runs that
module's code, so :func:`rebuild_factory` does it only for a module the reader trusts
(``--trust-module MODULE``, ``trust_modules=[...]``), never otherwise. A factory without an
importable name (a lambda, a local function, one defined in ``__main__``) is recorded as
such: its weights are kept, but it cannot be rebuilt.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from fedlabels.core.errors import FedLabelsError

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def trusted_modules(names: Iterable[str] | None) -> frozenset[str]:
    """The checked module names of ``--trust-module`` / ``trust_modules=``."""
    if names is None:
        return frozenset()
    if isinstance(names, str):
        raise FedLabelsError(f"trust_modules must be a list of module names, e.g. "
                             f"[{names!r}], not a string.")
    out = [str(n) for n in names]
    bad = [n for n in out if not _DOTTED.fullmatch(n)]
    if bad:
        raise FedLabelsError(f"trusted module {bad[0]!r} is not a module name (PACKAGE.MODULE, "
                             "as in module:PACKAGE.MODULE:FACTORY).")
    return frozenset(out)


def factory_record(network: Any) -> dict[str, Any]:
    """How a models file names ``network`` (a factory): ``module``, ``name`` and ``kwargs``,
    or ``unrebuildable`` (its name) with ``why``."""
    import inspect

    from fedlabels.learners.net_specs import BoundFactory

    kwargs: dict[str, Any] = {}
    factory = network
    if isinstance(factory, BoundFactory):
        kwargs, factory = dict(factory.arguments), factory.factory
    while isinstance(factory, functools.partial):
        if factory.args:
            return _unrebuildable(factory.func, "a functools.partial with positional "
                                                "arguments")
        kwargs, factory = {**factory.keywords, **kwargs}, factory.func
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or "<" in name \
            or not (inspect.isfunction(factory) or inspect.isclass(factory)):
        return _unrebuildable(factory, "a lambda or a function defined inside another one "
                                       "has no importable module:name")
    if module == "__main__":
        return _unrebuildable(factory, "it is defined in the script run as __main__, which "
                                       "another process cannot import by that name")
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is not factory:
        return _unrebuildable(factory, f"{module}:{name} does not name it")
    return {"module": module, "name": name, "kwargs": kwargs}


def _unrebuildable(factory: Any, why: str) -> dict[str, Any]:
    from fedlabels.learners.torch_net import factory_name

    return {"unrebuildable": factory_name(factory), "why": why}


def unrebuildable_note(record: dict[str, Any]) -> str:
    """One line: why the network of ``record`` cannot be rebuilt, and what to do."""
    return (f"network {record.get('unrebuildable')} cannot be rebuilt from the models file "
            f"({record.get('why')}); define the factory at the top level of an importable "
            "module and pass it by that name (fl.TorchModel(mynets.make_net), --model "
            "module:mynets:make_net), then run again")


def trusted_factory(record: Any, trusted: frozenset[str], decode: Callable[[Any], Any]
                    ) -> tuple[str, str, dict[str, Any]]:
    """The module, name and keyword arguments of the factory ``record`` names, if it can be
    rebuilt and its module is in ``trusted`` (or a package of it is); else a one-line error.
    Nothing is imported: ``fl.load_run`` checks this before it builds any model."""
    if not isinstance(record, dict):
        raise FedLabelsError("a models file entry names no network factory.")
    if "unrebuildable" in record:
        raise FedLabelsError(f"cannot load: {unrebuildable_note(record)}.")
    module, name = record.get("module"), record.get("name")
    if not isinstance(module, str) or not isinstance(name, str) \
            or not _DOTTED.fullmatch(module) or not _DOTTED.fullmatch(name):
        raise FedLabelsError("a models file entry names a network factory that is not "
                             "module:name; load only models files fedlabels wrote.")
    kwargs = decode(record.get("kwargs", {"$t": "dict", "k": [], "v": []}))  # plain values
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise FedLabelsError(f"a models file entry gives module:{module}:{name} keyword "
                             "arguments that are not name=value pairs.")
    shown = ",".join(f"{k}={v}" for k, v in kwargs.items())
    spec = f"module:{module}:{name}" + (f"({shown})" if shown else "")
    if not any(module == t or module.startswith(t + ".") for t in trusted):
        raise FedLabelsError(
            f"the models file's network is your own code ({spec}); rebuilding it imports and "
            f"runs module {module!r}, so it is done only if you trust that code: pass "
            f"--trust-module {module} (Python: fl.load_run(path, trust_modules=[{module!r}])).")
    return module, name, kwargs


def rebuild_factory(record: Any, trusted: frozenset[str],
                    decode: Callable[[Any], Any]) -> Any:
    """The factory ``record`` names, imported only if its module is in ``trusted`` (or a
    package of it is); ``decode`` reads its keyword arguments."""
    from fedlabels.learners.net_specs import BoundFactory, import_factory

    module, name, kwargs = trusted_factory(record, trusted, decode)
    factory = import_factory(f"{module}:{name}")
    if not _defined_in(factory, module, name):  # not what a run records: refuse to call it
        raise FedLabelsError(f"the models file names {module}:{name}, which is not a function "
                             f"or class that module {module!r} defines; load only models "
                             "files fedlabels wrote.")
    return BoundFactory(factory, kwargs) if kwargs else factory


def _defined_in(factory: Any, module: str, name: str) -> bool:
    """Whether ``factory`` is a function or class of ``module`` named ``name`` (what
    :func:`factory_record` writes), not something it imported (``torch.load``)."""
    import inspect

    return (inspect.isfunction(factory) or inspect.isclass(factory)) and \
        factory.__module__ == module and factory.__qualname__ == name
