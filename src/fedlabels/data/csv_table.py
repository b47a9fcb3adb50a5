"""Reading a user's CSV table (``csv:PATH:TARGET``), with one-line errors for bad files."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError, missing_column

#: separators a one-column table is checked for (to suggest ``--sep``)
_OTHER_SEPARATORS = (";", "\t", "|", ",")


def normalise_sep(sep: str | None) -> str | None:
    """``--sep`` as typed: ``\\t`` (a backslash and t, as a shell passes it) or ``tab`` is
    the tab character; anything else must be one character."""
    if sep is None:
        return None
    sep = {"\\t": "\t", "tab": "\t"}.get(sep, sep)
    if len(sep) != 1:
        raise FedLabelsError(f"sep must be one character (e.g. ';', or '\\t' for a tab), "
                             f"got {sep!r}.")
    return sep


def separator_name(sep: str) -> str:
    """``sep`` as an error shows it (the tab named)."""
    return {"\t": "'\\t' (tab)"}.get(sep, repr(sep))


def other_separator(header: str, sep: str) -> str:
    """The separator a header line looks split by, where it is not ``sep`` (else "")."""
    try:
        found = csv.Sniffer().sniff(header, delimiters="".join(_OTHER_SEPARATORS)).delimiter
    except csv.Error:
        found = next((s for s in _OTHER_SEPARATORS if s in header), "")
    return "" if found == sep else found


def _separator_hint(path: Path, header: str, sep: str) -> str:
    """`` it looks ';'-separated: give --sep ';'`` when the header splits on another one."""
    found = other_separator(header, sep)
    if not found:
        return ""
    flag = "--sep '\\t'" if found == "\t" else f"--sep '{found}'"
    return (f" It looks {separator_name(found)}-separated, not "
            f"{separator_name(sep)}-separated: give {flag} (TOML: sep = {found!r}).")


def read_csv_table(path: Path, target: str, sep: str | None = None,
                   text_column: str | None = None) -> tuple[Any, Any]:
    """Features (a DataFrame) and the target column of ``path``; every problem one line.
    ``text_column`` (``--text-column``): that column read as written ("NA", "None" and
    "null" are texts; :data:`TEXTS_AS_WRITTEN`), the others as pandas reads them, from one
    read of the file."""
    sep = normalise_sep(sep) or ","
    data = None if text_column is None else _file_bytes(path)
    frame = read_csv_frame(path, sep, f" (one of them {target!r})", data=data)
    if text_column is not None and text_column in frame.columns and text_column != target:
        written = read_csv_frame(path, sep, texts=True, usecols=[text_column], data=data)
        frame[text_column] = written[text_column].to_numpy()
    columns = [str(c) for c in frame.columns]
    if target not in columns:
        hint = _separator_hint(path, first_line(path), sep) if len(columns) == 1 else ""
        raise FedLabelsError(f"CSV file {path} {missing_column(target, columns)}.{hint}")
    if frame.empty:
        raise FedLabelsError(f"CSV file {path} has a header but no rows of data.")
    if len(columns) == 1:
        raise FedLabelsError(f"CSV file {path} has only the target column {target!r}, no "
                             "features." + _separator_hint(path, first_line(path), sep))
    missing = np.flatnonzero(frame[target].isna().to_numpy())
    if len(missing):
        rows = ", ".join(str(r + 1) for r in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise FedLabelsError(f"CSV file {path} has {len(missing)} row(s) without a label in "
                             f"column {target!r} (data row(s) {rows}); drop or label them.")
    return frame.drop(columns=[target]), frame[target]


#: how a column of texts is read: only an empty cell is missing ("NA", "None" and "null"
#: are texts, which pandas' default would read as missing)
TEXTS_AS_WRITTEN = {"keep_default_na": False, "na_values": [""]}


def _file_bytes(path: Path) -> bytes:
    """The bytes of the CSV file ``path`` (one line if it is not a readable file)."""
    _check_is_file(path)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FedLabelsError(f"cannot read CSV file {path}: {exc.strerror or exc}.") from None


def _check_is_file(path: Path) -> None:
    if not path.is_file():
        from fedlabels.core.files import not_a_file

        raise FedLabelsError(f"CSV file {path} {not_a_file(path)}.")


def read_csv_frame(path: Path, sep: str | None = None, columns_hint: str = "", *,
                   texts: bool = False, usecols: list[str] | None = None,
                   data: bytes | None = None) -> Any:
    """The table in ``path`` as a DataFrame (separator ``sep``, default ``,``); a missing,
    empty, non-UTF-8 or unparsable file is one line naming it. ``texts``: cells read as
    written, only empty ones missing (:data:`TEXTS_AS_WRITTEN`); ``usecols``: those
    columns only; ``data``: the file's bytes, read already (the file is not read again)."""
    import io

    import pandas as pd  # lazily: importing fedlabels must not load pandas

    sep = normalise_sep(sep) or ","
    if data is None:
        _check_is_file(path)
    try:
        frame = pd.read_csv(path if data is None else io.BytesIO(data), sep=sep,
                            usecols=usecols, **(TEXTS_AS_WRITTEN if texts else {}))
        if usecols is None:
            refuse_repeated_columns(frame, path, sep, data)
        return frame
    except pd.errors.EmptyDataError:
        raise FedLabelsError(f"CSV file {path} is empty: it needs a header line naming the "
                             f"columns{columns_hint} and at least one row.") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise FedLabelsError(f"CSV file {path} is not UTF-8 text (byte 0x{byte:02x} at offset "
                             f"{exc.start}); re-save it as UTF-8.") from None
    except pd.errors.ParserError as exc:
        reason = " ".join(str(exc).split())
        raise FedLabelsError(f"CSV file {path} cannot be parsed: {reason}."
                             + _separator_hint(path, first_line(path), sep)) from None
    except OSError as exc:
        raise FedLabelsError(f"cannot read CSV file {path}: {exc.strerror or exc}.") from None


#: how pandas renames the second of two columns with one name ("a" -> "a.1")
_MANGLED = re.compile(r".*\.[0-9]+")


def refuse_repeated_columns(frame: Any, path: Path, sep: str,
                            data: bytes | None = None) -> None:
    """A one-line error if the header line of ``path`` (or of ``data``, its bytes), which
    ``frame`` was read from, names a column more than once (pandas renames the second
    ``a`` to ``a.1``); the header is read again only when a column name looks renamed."""
    if any(_MANGLED.fullmatch(str(c)) for c in frame.columns):
        _check_unique_header(path, sep, data)


def _check_unique_header(path: Path, sep: str, data: bytes | None) -> None:
    """A one-line error naming the header's duplicated column names, if it has any."""
    import io

    import pandas as pd

    source = path if data is None else io.BytesIO(data)
    header = [str(h) for h in pd.read_csv(source, sep=sep, header=None, nrows=1, dtype=str,
                                          keep_default_na=False).iloc[0]]
    twice = [h for h in dict.fromkeys(header) if h and header.count(h) > 1]
    if twice:
        raise FedLabelsError(f"CSV file {path} names column(s) {', '.join(map(repr, twice))} "
                             "more than once in its header; give each column its own name.")


def first_line(path: Path) -> str:
    """The file's header line, at most 64 KiB of it, as text."""
    with path.open("rb") as fh:
        return fh.readline(65536).decode("utf-8", errors="replace").strip()
