"""User-facing errors.

Every error a user can trigger with bad input is a :class:`FedLabelsError` whose message
says what is wrong and how to fix it; the CLI prints it without a traceback.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any


class FedLabelsError(ValueError):
    """Invalid input or configuration, with a message meant for the user."""


class RefusedError(FedLabelsError):
    """A client refused a message that would break its own privacy plan.

    ``category`` is all the server learns (:func:`error_category`); the text stays at the
    site."""

    category = "refused: message"


class BudgetRefusal(RefusedError):
    """More releases, queries or steps than the client's own plan."""

    category = "refused: budget"


class ParameterRefusal(RefusedError):
    """Less noise (or another mechanism) than the client's own options. ``named``: the
    option and the client's own value (``the site's retries is 0``), which the server
    learns with the category (:func:`error_category`); give it only for a value of the
    client's options, never one computed from its data."""

    category = "refused: parameters"

    def __init__(self, message: str, named: str | None = None) -> None:
        super().__init__(message)
        self.named = named


def refuse_other_value(cid: int, key: str, asked: Any, mine: Any,
                       read: Callable[[Any], Any] = float, then: str = "refusing",
                       rel_tol: float = 0.0) -> None:
    """The client's own option decides, never the server's message: a
    :class:`ParameterRefusal` naming both where the server's ``key`` (``asked``, compared as
    ``read(asked)``; ``None``: the message lacks it) is not the client's ``mine``, which
    must be a value of its options: the server learns the option and ``mine``. ``rel_tol``:
    a computed value (a σ each party calibrates from the same options) may differ by that
    relative amount, another machine's floating point."""
    try:  # NaN, None or 'x' from a deviating server: another value, not an internal error
        value = None if asked is None or isinstance(asked, bool) else read(asked)
        other = value is None or (value != mine if not rel_tol else
                                  not math.isclose(value, mine, rel_tol=rel_tol))
    except (TypeError, ValueError, OverflowError):
        other = True
    if other:
        raise ParameterRefusal(f"client {cid}: the server asked for {key} = {asked!r} but "
                               f"this client's options say {mine!r}; {then}.",
                               named=f"the site's {key} is {mine!r}")


class LearnerOutputError(ValueError):
    """What a learner produced cannot be sent (labels outside the classes): a fault of the
    learner (the user's), not of fedlabels, when a client's handler raises it."""


class ClientError(FedLabelsError):
    """A client's handler raised while answering a message of the run (which client, round,
    message kind and learner: :func:`fedlabels.engines.client_failure.client_failure`);
    ``__cause__`` is the original exception. ``internal``: the failure lies in fedlabels'
    own code, not in the user's learner or data (the CLI shows its traceback)."""

    def __init__(self, message: str, internal: bool = False, original: Any = None) -> None:
        super().__init__(message)
        self.internal = internal
        self.original = original
        self.__cause__ = original

    def __reduce__(self) -> Any:  # from a worker process: the cause comes along
        return (type(self), (str(self), self.internal, self.original))


def raised_at(exc: BaseException) -> str:
    """``TypeName: first line (FILE, line N)``: an exception of a user's code in one line,
    with where it was raised (a ``SyntaxError``: where the bad line is)."""
    import traceback

    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}{where}"


def out_of_memory(exc: BaseException) -> str | None:
    """What ran out, if ``exc`` is an allocation failure (Python's ``MemoryError``, torch's
    ``OutOfMemoryError`` on a GPU, its CPU allocator's ``RuntimeError``), as a short
    phrase (``tried to allocate 30.5 GiB``); else None."""
    import re

    text = str(exc)
    if not (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or (isinstance(exc, RuntimeError)
                and ("can't allocate memory" in text or "out of memory" in text.lower()))):
        return None
    size = re.search(r"tried to allocate (\d+) bytes", text)
    if size:
        n = int(size.group(1))
        return "tried to allocate " + (f"{n / 2**40:.1f} TiB" if n >= 2**40 else
                                        f"{n / 2**30:.1f} GiB")
    size = re.search(r"[Tt]ried to allocate ([\d.]+ [KMGT]i?B)", text)  # torch's CUDA text
    return f"tried to allocate {size.group(1)}" if size else "out of memory"


def error_category(exc: BaseException) -> str:
    """What a site tells the server about an error: a category, never the text (which may
    describe its private data, e.g. the classes present); a :class:`ParameterRefusal` adds
    the option that differs and the site's own value where it names them (``refused:
    parameters (the site's retries is 0)``)."""
    if isinstance(exc, ParameterRefusal) and exc.named:
        return f"{exc.category} ({exc.named})"
    if isinstance(exc, RefusedError):
        return exc.category
    if isinstance(exc, FedLabelsError):
        return getattr(exc, "category", "error: data")
    return "error: internal"


class DatasetNotFetchedError(FedLabelsError):
    """A registered dataset exists but its files are not in the local cache yet."""


class FedLabelsWarning(UserWarning):
    """Something was changed or ignored on the user's behalf (e.g. a dropped index column)."""


def user_stacklevel() -> int:
    """The ``stacklevel`` at which a warning raised by the caller of this function points
    at the first frame outside fedlabels, :mod:`threading` and :mod:`concurrent.futures`:
    the user's call, however many of fedlabels' own functions (``fl.run``,
    ``load_federation``, keyword wrappers) lie between (a fixed level points at one of them
    for some entry points). Code that may run in a worker thread of fedlabels' own warns
    with :func:`fedlabels.core.user_frames.warn_user`, which names the call that started
    the work there (a level can only name a frame of the warning thread)."""
    import sys

    from fedlabels.core.user_frames import first_user_frame

    return first_user_frame(sys._getframe(1))[1]


class RunCaveatWarning(FedLabelsWarning):
    """What a reader must know before trusting a run's figure (near chance, interrupted),
    as ``fl.run`` says it; the CLI prints the same sentences itself."""


def show_warnings_in_one_line() -> None:
    """Print :class:`FedLabelsWarning` as ``fedlabels: warning: ...`` (the CLI's format), and
    a library's warning (scikit-learn's ConvergenceWarning for every client and round,
    Pillow's DecompressionBombWarning, xgboost's unused parameters) as one such line naming
    the library, once: not Python's two lines with a source line. Deprecation warnings keep
    Python's own handling."""
    import re
    import sys
    import warnings

    default = warnings.showwarning
    if getattr(default, "fedlabels", False):  # installed already
        return
    seen: set[tuple[str, str]] = set()

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: str | None = None) -> None:
        if issubclass(category, FedLabelsWarning):
            print(f"fedlabels: warning: {message}", file=sys.stderr)
        elif issubclass(category, DeprecationWarning | PendingDeprecationWarning
                        | FutureWarning):
            default(message, category, filename, lineno, file, line)  # type: ignore[arg-type]
        else:
            text = " ".join(str(message).split())
            key = (category.__name__, re.sub(r"\d+", "N", text))
            if key in seen:
                return
            seen.add(key)
            found = re.search(r"(?:site|dist)-packages[/\\]([^/\\]+)", filename)
            library = found.group(1) if found else "python"
            print(f"fedlabels: warning: {library} {category.__name__}: {text} (repeats not "
                  "shown)", file=sys.stderr)

    show.fedlabels = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def shown(value: Any) -> str:
    """``value`` as an error shows it, at most 40 characters (a value from a deviating
    server or from a file may be huge): its repr, an array's as the tuple of its values."""
    np = sys.modules.get("numpy")  # no array without numpy: `fedlabels --help` imports none
    if np is not None and isinstance(value, np.ndarray):
        value = tuple(value.reshape(-1)[:40].tolist())  # 40 values are past 40 characters
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice :func:`closest` to ``name``, or ``""`` when
    none is close."""
    close = closest(name, choices)
    return "" if close is None else f" (did you mean {close!r}?)"


#: the least difflib ratio at which a name is taken for a misspelt choice (its default,
#: 0.6, took 'width' for 'depth': 3 of their 5 letters in common)
CLOSE_RATIO = 0.7


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice ``name`` most likely misspells, comparing names in lower case without
    ``-``, ``_`` and spaces: the same name; else the choice it begins (3 letters or more;
    the closest of several); else the closest by difflib's ratio where that is at least
    :data:`CLOSE_RATIO` or the two are one edit apart (a letter left out, added or changed,
    or two swapped; names of 3 letters or more); else None."""
    import difflib

    def key(text: str) -> str:
        return "".join(ch for ch in str(text).lower() if ch not in "-_ ")

    options = {key(c): str(c) for c in choices}
    typed = key(name)
    if typed in options:
        return options[typed]
    ratio = {k: difflib.SequenceMatcher(None, typed, k).ratio() for k in options}
    begun = [k for k in options if len(typed) >= 3 and k.startswith(typed)]
    near = begun or [k for k in options if ratio[k] >= CLOSE_RATIO or (
        min(len(typed), len(k)) >= 3 and _one_edit(typed, k))]
    return options[max(near, key=ratio.__getitem__)] if near else None


def _one_edit(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter left out, added or changed, or two
    neighbours swapped."""
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = sorted((a, b), key=len)
    return len(long) == len(short) + 1 and any(long[:i] + long[i + 1:] == short
                                               for i in range(len(long)))


def unknown_parameters(unknown: Sequence[str], choices: Iterable[str]) -> str:
    """``unknown parameter(s) a, b (did you mean 'x'?)``: a model spec's unknown parameters,
    with the choice closest to the first."""
    return f"unknown parameter(s) {', '.join(unknown)}{did_you_mean(unknown[0], choices)}"


def missing_column(name: str, columns: Iterable[object], shown: int = 20) -> str:
    """``has no column 'x' (did you mean 'y'?); its columns are 'a', 'b', ...`` (the first
    ``shown`` columns, and how many there are when they are more)."""
    names = [str(c) for c in columns]
    listed = ", ".join(repr(c) for c in names[:shown])
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return (f"has no column {name!r}{did_you_mean(name, names)}; its columns are "
            f"{listed}{more}")
