"""A list's JSON text with each element encoded once, for what is written again and again.

A DP run checkpoints every round, and its round records and ledgers only grow: encoding
them whole at every checkpoint cost O(T) a round (O(T²) a run). :func:`json_list` keeps
each element's JSON in a cache the caller owns (a plain list, so its owner still pickles
and deep-copies) and encodes only the elements it has not seen at their place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def json_list(items: Sequence[Any], encode: Callable[[Any], str],
              done: list[tuple[Any, str]]) -> str:
    """``items`` as a JSON list, each element's text from ``encode``; ``done`` holds
    (element, its text) of the last call, in order, and is updated: an element is
    re-encoded only where ``items`` no longer holds the very object encoded at that place
    (so the elements must not change once encoded: frozen, or never mutated again)."""
    keep = 0
    while keep < min(len(done), len(items)) and done[keep][0] is items[keep]:
        keep += 1
    del done[keep:]
    done.extend((item, encode(item)) for item in items[keep:])
    return "[" + ", ".join(text for _, text in done) + "]"


__all__ = ["json_list"]
