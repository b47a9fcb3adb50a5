"""Client ids as they travel in a message's config: one string, ``"0,2,3"``."""

from __future__ import annotations

from collections.abc import Iterable


def listed(text: object) -> list[int]:
    """``"2,0,3"`` -> [2, 0, 3]: the ids in the order written (an XCLP client pairs them
    with row ranges written in the same order)."""
    return [int(t) for t in str(text).split(",") if t != ""]


def members(text: object) -> list[int]:
    """``"0,2,3"`` -> [0, 2, 3]: a group, each id once, in order."""
    return sorted(set(listed(text)))


def members_text(group: Iterable[int]) -> str:
    """[3, 0, 2] -> ``"0,2,3"``."""
    return ",".join(str(int(c)) for c in sorted(group))
