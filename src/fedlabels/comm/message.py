"""The unit of communication between a server role and a client role.

A :class:`Message` mirrors Flower's ``Message``/``RecordDict`` split: named numpy arrays
(Flower's ``ArrayRecord``) plus a flat dict of scalars (``ConfigRecord``). Protocol code only
ever builds and reads these, so the same code can run in-process or on Flower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Scalar = int | float | str | bool
Category = Literal["protocol", "evaluation", "control"]
CATEGORIES: tuple[Category, ...] = ("protocol", "evaluation", "control")


def as_category(value: object) -> Category:
    """``value`` as a message category, or a ``ValueError`` naming the valid ones."""
    for category in CATEGORIES:
        if value == category:
            return category
    raise ValueError(f"message category {value!r} is not one of {', '.join(CATEGORIES)}")


@dataclass(frozen=True)
class Message:
    """A message of one protocol phase.

    Parameters
    ----------
    kind : str
        The phase, e.g. ``"fedct.train"`` or ``"evaluate"``; the client dispatches on it.
    arrays : dict of str to ndarray
        Payload arrays (labels, bit-packed labels, model weights, ...).
    config : dict of str to scalar
        Small scalar settings (round number, number of local steps, ...).
    category : {"protocol", "evaluation", "control"}
        ``"protocol"`` messages are what the method needs and are counted as its
        communication; ``"evaluation"`` messages exist only to measure test accuracy and are
        counted separately; "control" messages only drive the simulator (local-only,
        centralized) and are reported apart from protocol communication.
    """

    kind: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    config: dict[str, Scalar] = field(default_factory=dict)
    category: Category = "protocol"
