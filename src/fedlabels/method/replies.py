"""Checks of what a client sends back, before the server uses it.

A server role's :meth:`~fedlabels.method.base.ServerRole.check_reply` raises
:class:`MalformedReply` for a reply it cannot use as its protocol says: missing arrays,
wrong sizes, labels outside the classes, NaN or inf, soft labels that are not probabilities,
an aggregation weight that is not a positive number, an evaluation score outside its range.
The engines call it on every reply, and treat a refused one alike: the client is lost
with the reason (``malformed reply to fedct.train: ...``) and the run goes on where the
method can, as for a Flower site that does not answer, else stops with one line naming the
round, the client and the reason (:mod:`fedlabels.runs.lost`). Without these checks one
client's reply crashed the whole run or, worse, moved a vote, an average or the consensus
of every client beyond what one honest-looking client can (``docs/robustness.md``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.comm.labels import packed_size, unpack_labels
from fedlabels.core.errors import FedLabelsError


class MalformedReply(FedLabelsError):
    """A reply the server cannot use as its protocol says (the message says why)."""


def require_arrays(reply: Message, *names: str) -> None:
    """The reply holds every array of ``names``."""
    missing = [n for n in names if n not in reply.arrays]
    if missing:
        raise MalformedReply(f"its {reply.kind} reply has no {', '.join(missing)}")


def check_finite(reply: Message) -> None:
    """No NaN or inf in any floating-point array of the reply."""
    for name, arr in reply.arrays.items():
        a = np.asarray(arr)
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            raise MalformedReply(f"its {reply.kind} reply holds NaN or inf in {name}")


def checked_labels(reply: Message, key: str, n_labels: int, n_classes: int,
                   rows: int | None = 1) -> np.ndarray:
    """The reply's packed hard labels: exactly ``rows`` packed rows (any number >= 1 with
    None) of ``n_labels`` labels, each in ``[0, n_classes)``; an (rows, n) int array.
    (A label of ``n_classes`` or more moved a vote to the next example, or crashed the
    vote's reshape.)"""
    require_arrays(reply, key)
    packed = np.atleast_2d(np.asarray(reply.arrays[key]))
    if packed.dtype != np.uint8:
        raise MalformedReply(f"its {key} are not packed bytes (dtype {packed.dtype})")
    width = packed_size(n_labels, n_classes)
    expected = packed.shape[0] if rows is None else rows
    if packed.ndim != 2 or packed.shape != (expected, width) or not expected:
        raise MalformedReply(f"its {key} hold {packed.shape[0]} row(s) of "
                             f"{packed.shape[-1]} bytes; expected {expected or 'some'} of "
                             f"{width} ({n_labels} labels)")
    labels = np.stack([unpack_labels(row, n_labels, n_classes) for row in packed])
    if labels.size and labels.max() >= n_classes:
        raise MalformedReply(f"its {key} hold label {int(labels.max())}, outside the "
                             f"{n_classes} classes")
    return labels


def check_probabilities(reply: Message, key: str, n_rows: int | None, n_classes: int) -> None:
    """The reply's ``key`` is an (n_rows, n_classes) matrix of probability rows (each
    entry in [0, 1], each row summing to 1 within float16 rounding): one client can then move
    the average of m clients by at most 1/m."""
    require_arrays(reply, key)
    probs = np.asarray(reply.arrays[key], dtype=np.float64)
    if probs.ndim != 2 or probs.shape[1] != n_classes or (
            n_rows is not None and probs.shape[0] != n_rows):
        raise MalformedReply(f"its {key} have shape {probs.shape}; expected "
                             f"({'rows' if n_rows is None else n_rows}, {n_classes})")
    if not np.isfinite(probs).all() or probs.min() < -1e-3 or probs.max() > 1 + 1e-3 \
            or np.abs(probs.sum(axis=1) - 1.0).max() > 1e-2:
        raise MalformedReply(f"its {key} are not probability rows (entries in [0, 1], rows "
                             "summing to 1)")


def check_subset_soft(request: Message, reply: Message, train_kind: str, key: str,
                      n_classes: int) -> None:
    """A training reply's soft labels on the round's subset of U (``subset_size`` rows of
    the request) are probability rows (FedMD's and DS-FL's replies)."""
    if request.kind == train_kind:
        check_probabilities(reply, key, int(request.config["subset_size"]), n_classes)


def received_probabilities(message: Message, key: str, n_rows: int | None, n_classes: int,
                           cid: int) -> np.ndarray:
    """A client's check of the soft targets the server sent (NaN targets left a NaN model,
    negative ones a broken one): probability rows, as float32; else a refusal."""
    from fedlabels.core.errors import RefusedError

    try:
        check_probabilities(message, key, n_rows, n_classes)
    except MalformedReply as exc:
        raise RefusedError(f"client {cid}: refusing the {message.kind} message: {exc}.") \
            from None
    return np.asarray(message.arrays[key], dtype=np.float32)


def check_vector(reply: Message, key: str, size: int) -> None:
    """The reply's ``key`` is a finite vector of ``size`` numbers (model weights)."""
    require_arrays(reply, key)
    values = np.asarray(reply.arrays[key])
    if values.dtype.kind not in "fiu" or values.size != size:
        raise MalformedReply(f"its {key} hold {values.size} values of {values.dtype}; "
                             f"expected {size} numbers")
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise MalformedReply(f"its {key} hold NaN or inf")


def check_positive(reply: Message, key: str) -> None:
    """The reply's config ``key`` is a finite number > 0 (an aggregation weight)."""
    value = reply.config.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise MalformedReply(f"its {reply.kind} reply gives {key} = {value!r}; expected a "
                             "number > 0")


#: evaluation scores and their ranges
_SCORE_RANGES = {"accuracy": (0.0, 1.0), "rmse": (0.0, math.inf), "r2": (-math.inf, 1.0)}


def check_evaluation(reply: Message, task: str) -> None:
    """An evaluation reply holds its task's scores, finite and in range, or declines to
    report (``{"declined": True}`` and nothing else)."""
    from fedlabels.core.metrics import DECLINED, REPLY_KEYS, declined

    if declined(reply):
        if set(reply.config) != {DECLINED} or reply.arrays:
            raise MalformedReply("its evaluation reply declines to report and also carries "
                                 f"{sorted(set(reply.config) - {DECLINED}) or 'arrays'}")
        return

    for key in REPLY_KEYS["regression" if task == "regression" else "classification"]:
        value = reply.config.get(key)
        low, high = _SCORE_RANGES[key]
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or not low <= value <= high:
            raise MalformedReply(f"its evaluation reply gives {key} = {value!r}; expected a "
                                 f"number in [{low:g}, {high:g}]")


def lost_reason(request: Message, problem: MalformedReply | Any) -> str:
    """Why a client whose reply the server refused is lost, on every engine:
    ``malformed reply to fedct.train: its labels ...``."""
    return f"malformed reply to {request.kind}: {problem}"


def declined_evaluation() -> Any:
    """A site's answer to an evaluation request it declines (no score leaves it)."""
    from fedlabels.comm import Message
    from fedlabels.core.metrics import DECLINED

    return Message("evaluate.declined", config={DECLINED: True}, category="evaluation")
