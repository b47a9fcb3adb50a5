"""A public unlabeled set U given in a file (``public``), instead of drawn from the labelled
rows: a CSV table of the training table's feature columns, or a folder of images.

A table is read with the run's separator; its columns must be the training table's (those
``features``/``drop`` leave out may stand in it and are left out alike); the target column
is refused (U is unlabelled). Images are read as the run's own (their size, their scale;
the declared channels, else U's own files decide them, :mod:`fedlabels.data.image_channels`),
through the same reader and cache (:mod:`fedlabels.data.images`). A
registered dataset of unnamed pixel rows (Fashion-MNIST) takes a folder of images of its
own size, or a CSV of its columns ``x0, x1, ...`` holding the values as it stores them
(0-255 integers); either is converted to the models' inputs as its own rows are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError


def public_path(public: Any) -> Path:
    """``public`` as a path (relative ones from the working directory, as a dataset's)."""
    import os

    if not isinstance(public, str | os.PathLike) or not str(public).strip():
        raise FedLabelsError(f"public must be the path of a CSV table or an image folder, "
                             f"got {public!r}.")
    return Path(public).expanduser()


def array_sha256(X: Any) -> str:
    """SHA-256 of U's model inputs as shipped (``np.ascontiguousarray(X).tobytes()``; text:
    each row's UTF-8 bytes, length-prefixed)."""
    a = np.asarray(X)
    h = hashlib.sha256()
    if a.dtype == object:
        for v in a.ravel():
            data = str(v).encode()
            h.update(len(data).to_bytes(8, "little") + data)
    else:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def read_public(info: Any, raw: Any, public: Any, *, sep: str | None = None,
                features: str | Sequence[str] | None = None,
                drop: str | Sequence[str] | None = None,
                partition_column: str | None = None, gaps: bool = False) -> Any:
    """U's raw features from ``public``, shaped as the training rows ``raw.X`` are: pixel
    rows (:class:`LazyRows`) for a run on image files, else a DataFrame (or a text Series)
    of the training table's feature columns; ``gaps`` (``missing="public-median"``): empty
    cells of its numeric columns stay, filled after the split with U's own medians."""
    from fedlabels.data.lazy_rows import LazyRows

    path = public_path(public)
    if raw.image_input is not None:  # undeclared channels (ImageRows): U's own files'
        from fedlabels.data.image_channels import ImageRows

        return _public_images(path, raw.image_input,
                              undeclared=isinstance(raw.X, ImageRows))
    if isinstance(raw.X, LazyRows):  # a registered dataset's pixel rows (Fashion-MNIST)
        return _public_rows(info, raw.X, raw.image_shape, path, sep)
    return _public_table(info, raw, path, sep, features, drop, partition_column, gaps)


def _public_images(folder: Path, spec: dict[str, Any], rows: Any = None,
                   reference: str = "the private images are {} and no --image-size "
                                    "(image_size) is declared to resize to: resize it, or "
                                    "declare one.", undeclared: bool = False) -> Any:
    """U's pixel rows from a folder of images read as ``spec`` says (:func:`image_input`);
    ``rows``: the dataset's own :class:`LazyRows`, whose conversion and names they take;
    ``undeclared``: no image_mode was declared, so U's files decide its channels (an
    :class:`~fedlabels.data.image_channels.ImageRows`)."""
    from fedlabels.data.images import (
        SUFFIXES,
        cached_images,
        folder_cache_key,
        image_files,
        pixel_names,
        recorded_peak,
        unit_float32,
        warn_left_out,
    )
    from fedlabels.data.lazy_rows import LazyRows

    if not folder.is_dir():
        what = "is a file" if folder.is_file() else "does not exist"
        raise FedLabelsError(f"public {folder} {what}; for a run on images give a folder of "
                             f"images ({', '.join(SUFFIXES)}; sub-folders too, no labels).")
    left_out: list[Path] = []
    files = image_files(folder, left_out)
    if not files:
        raise FedLabelsError(f"public folder {folder} holds no images ({', '.join(SUFFIXES)}); "
                             "add the unlabelled images (sub-folders too) or fix the path.")
    warn_left_out(folder, left_out)
    c, h, w = (int(s) for s in spec["shape"])
    mode = "L" if c == 1 else "RGB"
    peak = recorded_peak(spec)  # None: a deep image by its format's full scale
    resize = spec.get("size") is not None

    def read(forced: str | None) -> Any:
        how = f"{forced}|{peak}|{'resize' if resize else 'as-is'}"
        return cached_images(files, (h, w), folder_cache_key(folder, files, (h, w), how), forced,
                              peak=peak, resize=resize, reference=reference)

    if undeclared:
        from fedlabels.data.image_channels import ImageRows

        return ImageRows(read(None), read)
    images = read(mode)
    if rows is not None:
        return LazyRows(images.pixels, rows.convert, dtype=rows.dtype, names=rows.names)
    return LazyRows(images.pixels, unit_float32, names=pixel_names(images.shape))


def _public_rows(info: Any, rows: Any, shape: tuple[int, int, int] | None, path: Path,
                 sep: str | None) -> Any:
    """U for a registered dataset of unnamed pixel rows (:class:`LazyRows`, uint8): a folder
    of images of its size (its (C, H, W); colour converted to its channels, as the images
    of an ``imagefolder:`` run are), or a CSV of its columns ``x0, x1, ...`` (the names its
    features take in the federation) holding the values it stores; both are converted to
    the models' inputs by the dataset's own conversion."""
    d = rows.shape[1]
    names = list(rows.names) if rows.names is not None else [f"x{i}" for i in range(d)]
    if path.is_dir():
        if shape is None or rows.source.dtype != np.uint8:
            raise FedLabelsError(f"public {path} is a folder; dataset {info.name!r} takes a "
                                 f"CSV file of its {d} columns ({_show(names, 3)}).")
        c, h, w = (int(s) for s in shape)
        kind = "grey" if c == 1 else "RGB"
        return _public_images(path, {"shape": [c, h, w], "size": None, "peak": None}, rows,
                              reference=f"dataset {info.name!r} has {{}} {kind} images: "
                                        "resize it to that size.")
    import pandas as pd

    from fedlabels.data.columns import drop_index_columns
    from fedlabels.data.csv_table import read_csv_frame
    from fedlabels.data.lazy_rows import LazyRows

    frame = read_csv_frame(path, sep)
    _check_separator(frame, path, sep, d, info.name)
    if frame.empty:
        raise FedLabelsError(f"public CSV file {path} has a header but no rows of data.")
    frame.columns = [str(c) for c in frame.columns]
    frame = drop_index_columns(frame)
    if sorted(frame.columns) != sorted(names):
        missing = [c for c in names if c not in set(frame.columns)]
        extra = [c for c in frame.columns if c not in set(names)]
        wrong = "; ".join([*([f"lacks {_show(missing, 3)}"] if missing else []),
                           *([f"has {_show(extra, 3)}"] if extra else [])])
        raise FedLabelsError(f"public CSV file {path} has {len(frame.columns)} column(s) "
                             f"({wrong}); dataset {info.name!r} takes its {d} columns "
                             f"{names[0]} ... {names[-1]} (a header line naming them, no "
                             "label column)" + (", or a folder of its images." if shape
                                                is not None else "."))
    frame = frame[names]
    _no_empty_cells(frame, path, names)
    kind = rows.source.dtype
    limits = np.iinfo(kind) if kind.kind in "ui" else None
    scale = f"{limits.min}-{limits.max} integers" if limits is not None else f"{kind} values"
    text = [c for c in names if not pd.api.types.is_numeric_dtype(frame[c])]
    if text:
        raise FedLabelsError(f"public CSV file {path}: column(s) {_show(text)} hold text; "
                             f"dataset {info.name!r} stores {scale}.")
    values = frame.to_numpy(dtype=np.float64)
    stored = values.astype(kind) if limits is None else \
        np.clip(np.rint(values), limits.min, limits.max).astype(kind)
    off = stored.astype(np.float64) != values
    if off.any():
        i, j = (int(v[0]) for v in np.nonzero(off))
        raise FedLabelsError(f"public CSV file {path} holds {values[i, j]:g} (data row {i + 1}, "
                             f"column {names[j]!r}): dataset {info.name!r} stores {scale} "
                             "(its pixel values as stored, not scaled to [0, 1]); give those.")
    return LazyRows(stored, rows.convert, dtype=rows.dtype, names=rows.names)


def _check_separator(frame: Any, path: Path, sep: str | None, n_features: int,
                     dataset: str) -> None:
    """One line where a public CSV read as one column looks split by another separator
    (its header line ``a;b;c`` taken as one column's name)."""
    from fedlabels.data.csv_table import first_line, normalise_sep, other_separator, separator_name

    used = normalise_sep(sep) or ","
    found = other_separator(first_line(path), used) if len(frame.columns) == 1 \
        and n_features > 1 else ""
    if not found:
        return
    if dataset.startswith("csv:"):
        flag = "'\\t'" if found == "\t" else repr(found)
        fix = (f"give --sep {flag} (TOML: sep = {found!r}; it reads the table and U alike), "
               f"or re-save U {separator_name(used)}-separated")
    else:  # --sep is a csv: table's, refused beside a registered dataset's name
        fix = ("the public CSV of a registered dataset is comma-separated (--sep applies to "
               "csv:PATH:TARGET tables): re-save it with commas")
    raise FedLabelsError(f"public CSV file {path} has one column, not the {n_features} "
                         f"feature columns of {dataset!r}: it looks {separator_name(found)}-"
                         f"separated; {fix}.")


def _no_empty_cells(frame: Any, path: Path, needed: Sequence[str],
                    allowed: Sequence[str] = (), hint: str = "") -> None:
    """One line naming the data rows and columns of a public CSV's empty cells, but for
    those of the columns ``allowed`` (numeric ones, with ``missing="public-median"``);
    ``hint`` ends the error."""
    checked = [c for c in needed if c not in allowed]
    empty = frame[checked].isna().any(axis=1).to_numpy()
    if empty.any():
        rows = np.flatnonzero(empty)
        shown = ", ".join(str(r + 1) for r in rows[:5]) + (" ..." if len(rows) > 5 else "")
        columns = [c for c in checked if frame[c].isna().any()]
        raise FedLabelsError(f"public CSV file {path} has {len(rows)} row(s) with empty cells "
                             f"(data row(s) {shown}; column(s) {_show(columns)}); fill or drop "
                             f"them{hint}.")


def _public_table(info: Any, raw: Any, path: Path, sep: str | None,
                  features: str | Sequence[str] | None, drop: str | Sequence[str] | None,
                  partition_column: str | None, gaps: bool = False) -> Any:
    import pandas as pd

    from fedlabels.data.columns import drop_index_columns, parse_columns
    from fedlabels.data.csv_table import read_csv_frame

    if path.is_dir():
        raise FedLabelsError(f"public {path} is a folder; for a table dataset give a CSV file "
                             "of the training table's feature columns (no target column).")
    # texts as written ("NA" is a text), as the table's text column is read
    texts = isinstance(raw.X, pd.Series) or (isinstance(raw.X, np.ndarray) and raw.X.ndim == 1)
    frame = read_csv_frame(path, sep, texts=texts)
    if frame.empty:
        raise FedLabelsError(f"public CSV file {path} has a header but no rows of data.")
    frame.columns = [str(c) for c in frame.columns]
    target = info.target
    if target is None and isinstance(raw.y, pd.Series) and raw.y.name is not None:
        target = str(raw.y.name)
    if target is not None and target in frame.columns:
        raise FedLabelsError(f"public CSV file {path} has the target column {target!r}: U is "
                             "unlabelled; drop that column from it.")
    keep, remove = parse_columns(features, "--features"), parse_columns(drop, "--drop")
    frame = drop_index_columns(frame, keep=[*(keep or ()), *(remove or ())])
    X = raw.X
    if isinstance(X, pd.DataFrame):
        _check_separator(frame, path, sep, X.shape[1], info.name)
    if isinstance(X, pd.Series):  # text: the one text column
        name = str(X.name)
        if name not in frame.columns:
            from fedlabels.core.errors import missing_column

            raise FedLabelsError(f"public CSV file {path} {missing_column(name, frame.columns)}"
                                 f"; it needs the text column {name!r}.")
        return frame[name].astype(str).rename(name)
    if isinstance(X, np.ndarray) and X.ndim == 1:  # a registered text dataset: its texts
        return _public_texts(frame, path)
    if not isinstance(X, pd.DataFrame):
        raise FedLabelsError(f"dataset {info.name!r} has unnamed feature columns; a public "
                             "CSV file needs a table with named columns (a csv: dataset).")
    needed = [str(c) for c in X.columns if str(c) != partition_column]
    known = set(_training_columns(info, raw, sep, features, drop)) - {target}
    extra = [c for c in frame.columns if c not in known]
    missing = [c for c in needed if c not in frame.columns]
    if extra or missing:
        parts = []
        if missing:
            parts.append(f"lacks the feature column(s) {_show(missing)}")
        if extra:
            parts.append(f"has column(s) {_show(extra)} that the training table lacks")
        raise FedLabelsError(f"public CSV file {path} {' and '.join(parts)}; give it the "
                             f"training table's feature columns ({_show(needed)}).")
    frame = frame[needed]
    if gaps:  # numeric gaps stay, to be filled with U's medians after the split
        _no_empty_cells(frame, path, needed,
                        [c for c in needed if pd.api.types.is_numeric_dtype(X[c])])
    else:
        _no_empty_cells(frame, path, needed, hint=" (numeric gaps: or --missing public-median, "
                        "Python missing=\"public-median\", which fills them with U's medians "
                        "after the split)")
    numeric = [c for c in needed if pd.api.types.is_numeric_dtype(X[c])
               and not pd.api.types.is_numeric_dtype(frame[c])]
    if numeric:
        raise FedLabelsError(f"public CSV file {path}: column(s) {_show(numeric)} hold numbers "
                             "in the training table but text here; make them numeric.")
    return frame


def _public_texts(frame: Any, path: Path) -> np.ndarray:
    """U's texts for a registered text dataset: the CSV's one column, or its ``text``."""
    if len(frame.columns) == 1:
        column = frame.columns[0]
    elif "text" in frame.columns:
        column = "text"
    else:
        raise FedLabelsError(f"public CSV file {path} has columns {_show(list(frame.columns))}; "
                             "for a text dataset give one column of texts (or one named "
                             "'text').")
    texts = frame[column]
    if texts.isna().any():
        rows = np.flatnonzero(texts.isna().to_numpy())
        raise FedLabelsError(f"public CSV file {path} has {len(rows)} empty text(s) (data "
                             f"row(s) {', '.join(str(r + 1) for r in rows[:5])}"
                             f"{' ...' if len(rows) > 5 else ''}); fill or drop them.")
    return texts.astype(str).to_numpy(dtype=object)


def _training_columns(info: Any, raw: Any, sep: str | None, features: Any,
                      drop: Any) -> list[str]:
    """Every column of the training table but the target (before features/drop)."""
    if features is None and drop is None:
        return [str(c) for c in raw.X.columns]
    if info.target is not None and info.name.startswith("csv:"):
        import pandas as pd

        from fedlabels.core.files import csv_parts
        from fedlabels.data.csv_table import normalise_sep

        table = Path(csv_parts(info.name)[0]).expanduser()  # read once already: its header
        return [str(c) for c in pd.read_csv(table, sep=normalise_sep(sep) or ",",
                                            nrows=0).columns]
    return [str(c) for c in info.load().X.columns]


def _show(names: Sequence[str], shown: int = 8) -> str:
    listed = ", ".join(repr(c) for c in names[:shown])
    return listed + (f", ... ({len(names)} in all)" if len(names) > shown else "")


def copies_of_labelled(X_public: Any, labelled: Sequence[Any]) -> int:
    """How many rows of U equal a labelled row (any of ``labelled``: the clients' sets, the
    test set) exactly, as model inputs; rows are matched by a 64-bit digest, then compared."""
    U = np.asarray(X_public)
    if U.ndim == 1:  # text
        seen = {str(v) for a in labelled for v in np.asarray(a).ravel()}
        return sum(str(v) in seen for v in U)
    index: dict[int, list[tuple[int, int]]] = {}
    for k, a in enumerate(labelled):
        for i, h in enumerate(_row_digests(np.asarray(a))):
            index.setdefault(int(h), []).append((k, i))
    count = 0
    for i, h in enumerate(_row_digests(U)):
        for k, j in index.get(int(h), ()):
            if np.array_equal(np.asarray(labelled[k])[j], U[i]):
                count += 1
                break
    return count


def _row_digests(a: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each row's bytes (a fixed random linear map, wrapping)."""
    flat = np.ascontiguousarray(a).reshape(len(a), -1)
    words = flat.view(np.uint8).reshape(len(a), -1)
    weights = np.random.default_rng(0x5eed).integers(1, 2**63, size=words.shape[1],
                                                     dtype=np.uint64) | np.uint64(1)
    out = np.empty(len(a), dtype=np.uint64)
    step = max(1, (1 << 20) // max(1, words.shape[1]))
    with np.errstate(over="ignore"):
        for s in range(0, len(a), step):
            block = words[s:s + step].astype(np.uint64)
            out[s:s + step] = (block * weights).sum(axis=1, dtype=np.uint64)
    return out
