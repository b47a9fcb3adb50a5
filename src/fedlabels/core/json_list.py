"""A list's JSON text with each element encoded once, for what is written again and again.

A DP run checkpoints every round, and its round records and ledgers only grow: encoding
them whole at every checkpoint cost O(T) a round (O(T²) a run). :func:`json_list` keeps
each element's JSON in a cache the caller owns (a plain list, so its owner still pickles
and deep-copies) and encodes only the elements it has not seen at their place; finding
them compares the elements with the cached ones in C (``map(operator.is_, ...)``), not
element by element in Python (3 ms at 8,000 elements, for each ledger and the records).

The text itself is a :class:`JSONList`: the elements' texts, joined only where the whole
text is asked for. A checkpoint's journal takes from it what a list added since the
version it appended last (:meth:`JSONList.extension`), without joining or comparing the
T elements before (:mod:`fedlabels.runs.journal`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any


class JSONList:
    """A JSON list's text, ``"[" + ", ".join(texts[:n]) + "]"``, held as its elements'
    texts: built on :attr:`text`, its length known without building it. Immutable: an
    :class:`ElementTexts` only appends to the list ``texts`` it shares with the views it
    handed out (any other change builds a new list), so the first ``n`` never change."""

    __slots__ = ("_chars", "_n", "_texts")

    def __init__(self, texts: list[str], n: int, chars: int) -> None:
        self._texts, self._n, self._chars = texts, n, chars

    @property
    def text(self) -> str:
        # sliced, never joined in place: the list may grow meanwhile (a checkpoint written
        # in a background thread while the run's thread encodes the next rounds)
        return "[" + ", ".join(self._texts[:self._n]) + "]"

    def __len__(self) -> int:
        """The text's length in characters."""
        return self._chars

    def extension(self, before: JSONList) -> str | None:
        """``text[len(before) - 1:]`` where this list holds ``before``'s elements and maybe
        more after them (what it adds to ``before``'s text with its closing bracket off; ""
        where the texts are equal), known from the shared element texts without reading
        them; ``None`` where that is not known (compare the texts)."""
        if before._texts is not self._texts or before._n > self._n:
            return None
        if before._n == self._n:
            return ""
        new = self._texts[before._n:self._n]
        return (", " if before._n else "") + ", ".join(new) + "]"

    def __deepcopy__(self, memo: dict[int, Any]) -> JSONList:
        return self  # immutable (see the class)

    def __repr__(self) -> str:
        return f"JSONList({self._n} elements, {self._chars} characters)"


def text_of(value: Any) -> Any:
    """A :class:`JSONList`'s text; any other value as it is."""
    return value.text if isinstance(value, JSONList) else value


class ElementTexts:
    """The texts of a JSON list's elements, in order, and their total length: elements are
    appended in place, any other change (:meth:`cut`, :meth:`put`) builds a new list, so a
    :meth:`view` handed out never changes."""

    __slots__ = ("chars", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.chars = 0  # the elements' texts' characters, together

    def __len__(self) -> int:
        return len(self.texts)

    def cut(self, keep: int) -> None:
        """Keep the first ``keep`` elements."""
        if keep < len(self.texts):
            self.texts = self.texts[:keep]
            self.chars = sum(map(len, self.texts))

    def extend(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.texts.append(text)
            self.chars += len(text)

    def put(self, at: int, text: str, replace: bool) -> None:
        """``text`` at ``at``: in place of the element there (``replace``) or inserted."""
        if not replace and at == len(self.texts):
            self.extend([text])
            return
        texts = self.texts = list(self.texts)
        if replace:
            self.chars -= len(texts[at])
            texts[at] = text
        else:
            texts.insert(at, text)
        self.chars += len(text)

    def view(self) -> JSONList:
        """The JSON list of the elements as they are now."""
        n = len(self.texts)
        return JSONList(self.texts, n, 2 + self.chars + 2 * max(n - 1, 0))


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


def json_list_view(items: Sequence[Any], encode: Callable[[Any], str],
                   done: list[Any]) -> JSONList:
    """``items`` as a JSON list, each element's text from ``encode``; ``done`` holds the
    elements of the last call and their texts (``[elements, ElementTexts]``, or empty at
    first) and is updated: an element is re-encoded only where ``items`` no longer holds the
    very object encoded at that place (so the elements must not change once encoded: frozen,
    or never mutated again)."""
    keep = kept(items, done)
    if not done:
        done[:] = [[], ElementTexts()]
    objects, texts = done
    del objects[keep:]
    texts.cut(keep)
    new = items[keep:]
    objects.extend(new)
    texts.extend(encode(item) for item in new)
    return texts.view()


def json_list(items: Sequence[Any], encode: Callable[[Any], str], done: list[Any]) -> str:
    """:func:`json_list_view`'s text."""
    return json_list_view(items, encode, done).text


__all__ = ["ElementTexts", "JSONList", "json_list", "json_list_view", "kept", "text_of"]
