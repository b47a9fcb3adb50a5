"""The values a client reads from a server's message config, checked where they are read.

A deviating server can put anything in a config (NaN, None, ``'x'``, ``True``, 2⁶²); a bare
``int(...)`` made that an ``error: internal``. These readers refuse a value that is not of
the field's kind and range (:class:`~fedlabels.core.errors.ParameterRefusal`, whose category
names the field and the range the client takes, nothing of its data)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedlabels.core.errors import ParameterRefusal, shown

#: the largest seed a message may carry (numpy's legacy generators take 32 bits)
SEED_MAX = 2**32 - 1


def _refuse(cid: int, key: str, value: Any, wanted: str) -> ParameterRefusal:
    return ParameterRefusal(f"client {cid}: the server's {key} = {shown(value)} is not {wanted}; "
                            "refusing.", named=f"{key} must be {wanted}")


def whole(config: Mapping[str, Any], key: str, cid: int, low: int = 0,
          high: int | None = None, default: int | None = None) -> int:
    """``config[key]`` as an integer in [``low``, ``high``] (an int, not a bool, a float
    or a text; ``default`` where the config lacks it, if given), else a refusal naming
    ``key``."""
    if default is not None and key not in config:
        return default
    value = config.get(key)
    wanted = (f"an integer from {low} to {high}" if high is not None
              else f"an integer of at least {low}")
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) or (
            value < low or (high is not None and value > high)):
        raise _refuse(cid, key, value, wanted)
    return int(value)


def planned_round(config: Mapping[str, Any], cid: int, rounds: int) -> int:
    """``config["round"]``, a round of the client's own plan (0-based, below ``rounds``, its
    plan's number of rounds), else a refusal naming ``round``: a round beyond the plan
    (2⁶²) would set a round-keyed state (a secure round key, a schedule) past every round."""
    return whole(config, "round", cid, 0, rounds - 1)


def real(config: Mapping[str, Any], key: str, cid: int) -> float:
    """``config[key]`` as a finite number (an int or a float, not a bool or a text), else a
    refusal naming ``key``."""
    value = config.get(key)
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number) \
            or not math.isfinite(float(value)):
        raise _refuse(cid, key, value, "a finite number")
    return float(value)


def id_text(config: Mapping[str, Any], key: str, cid: int, default: str | None = None) -> str:
    """``config[key]`` as client ids written ``"0,2,3"`` (:mod:`fedlabels.comm.id_lists`;
    ``default`` where the config lacks it, if given), else a refusal naming ``key``."""
    value = config.get(key, default)
    if not isinstance(value, str) or not all(t.isdigit() for t in value.split(",") if t):
        raise _refuse(cid, key, value, "client ids written as '0,2,3'")
    return value


def own_count(config: Mapping[str, Any], key: str, cid: int, own: int) -> int:
    """``own``, a count of the client's own plan (its steps a round, its teachers' steps),
    where ``config[key]`` says the same, else a refusal naming ``key`` and ``own``: the
    server's count is never trained (2⁶² kept a site training for good)."""
    value = config.get(key)
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) \
            or value != own:
        raise ParameterRefusal(f"client {cid}: the server asked for {key} = {shown(value)} "
                               f"but this client's plan takes {own}; refusing to train.",
                               named=f"the site's {key} is {own}")
    return int(own)


def own_value(config: Mapping[str, Any], key: str, cid: int, own: int | str) -> int | str:
    """``own``, an integer or a text of the client's own options, where ``config[key]`` is
    the same (of its kind: ``True`` is not 1, ``"3"`` not 3), else a refusal naming ``key``
    only (the value may be a model spec of the site's own): a server that asked for another
    would get an answer to another question than it asked, without knowing it."""
    value = config.get(key)
    kind = isinstance(value, str) if isinstance(own, str) else (
        isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_))
    if not kind or value != own:
        raise ParameterRefusal(f"client {cid}: the server asked for {key} = {shown(value)} "
                               f"but this client's options say {shown(own)}; refusing.",
                               named=f"{key} is not the site's own")
    return own
