"""Keywords renamed in the public API: a former name is still read for one release, with a
warning the first time, and an unknown keyword is a one-line error naming the valid ones."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

from fedlabels.core.errors import FedLabelsError, FedLabelsWarning, did_you_mean

P = ParamSpec("P")
R = TypeVar("R")

_WARNED: set[tuple[str, str]] = set()  # (function, former keyword) already warned about


class RenamedKeywordWarning(FedLabelsWarning, FutureWarning):
    """A keyword was given under its former name; it goes away in the next release."""


def renamed_keywords(former: Mapping[str, str]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Let the decorated function read each ``former`` keyword as its new name
    (``{"n_clients": "clients"}``), warning once per process and name."""
    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        params = inspect.signature(fn).parameters
        valid = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        name = getattr(fn, "__name__", "function")

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            for key in [k for k in kwargs if k not in params]:
                new = former.get(key)
                if new is None:
                    hint = did_you_mean(key, [*valid, *former])
                    for old, current in former.items():  # close to a former name: its new one
                        hint = hint.replace(repr(old), repr(current))
                    raise FedLabelsError(f"{name}() has no keyword {key!r}{hint}; valid: "
                                         f"{', '.join(valid)}.")
                if new in kwargs:
                    raise FedLabelsError(f"give {new} or its former name {key}, not both.")
                kwargs[new] = kwargs.pop(key)
                _warn_once(name, key, new)
            return fn(*args, **kwargs)

        return call

    return wrap


def _warn_once(function: str, old: str, new: str) -> None:
    if (function, old) in _WARNED:
        return
    _WARNED.add((function, old))
    warnings.warn(f"{function}(): {old}= is now {new}= (the run parameter's name, as in "
                  f"`fedlabels run --{new.replace('_', '-')}`); {old} goes away in the next "
                  "release.", RenamedKeywordWarning,
                  stacklevel=3)  # the wrapper's caller: the call that used the old keyword
