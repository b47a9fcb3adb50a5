"""A list's JSON text with each element encoded once, for what is written again and again.

A DP run checkpoints every round, and its round records and ledgers only grow: encoding
them whole at every checkpoint cost O(T) a round (O(T²) a run). :func:`json_list` keeps
each element's JSON in a cache the caller owns (a plain list, so its owner still pickles
and deep-copies) and encodes only the elements it has not seen at their place; finding
them compares the elements with the cached ones in C (``map(operator.is_, ...)``), not
element by element in Python (3 ms at 8,000 elements, for each ledger and the records).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any


def kept(items: Sequence[Any], done: list[Any]) -> int:
    """How many leading elements of ``items`` are the very objects ``done`` (a
    :func:`json_list` cache) encoded at their place."""
    if not done:
        return 0
    objects = done[0]
    n = min(len(objects), len(items))
    if all(map(operator.is_, objects[:n], items[:n])):
        return n
    return next(i for i in range(n) if objects[i] is not items[i])


def json_list(items: Sequence[Any], encode: Callable[[Any], str], done: list[Any]) -> str:
    """``items`` as a JSON list, each element's text from ``encode``; ``done`` holds the
    elements of the last call and their texts (``[elements, texts]``, or empty at first)
    and is updated: an element is re-encoded only where ``items`` no longer holds the very
    object encoded at that place (so the elements must not change once encoded: frozen, or
    never mutated again)."""
    keep = kept(items, done)
    if not done:
        done[:] = [[], []]
    objects, texts = done
    del objects[keep:], texts[keep:]
    new = items[keep:]
    objects.extend(new)
    texts.extend(encode(item) for item in new)
    return "[" + ", ".join(texts) + "]"


__all__ = ["json_list", "kept"]
