"""A federation: a test set, a public unlabeled set U, and m private client sets."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.renamed import renamed_keywords
from fedlabels.data.lazy_rows import LazyRows
from fedlabels.data.partition import PartitionSpec, every_class_in_test, parse_partition
from fedlabels.data.partition import partition as partition_pool
from fedlabels.data.targets import TargetRangeLike

if TYPE_CHECKING:
    from fedlabels.data.preprocessing import Preprocessing
    from fedlabels.data.public_pca import PublicPCA


@dataclass(frozen=True)
class ClientData:
    """One client's private labelled data: features ``X`` and class codes ``y``."""

    X: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    def __repr__(self) -> str:
        """Sizes only (``ClientData(76 rows, 30 features)``): no arrays, as a
        :class:`Federation`'s."""
        width = 1 if self.X.ndim == 1 else int(self.X.shape[1])
        return f"ClientData({_count(len(self), 'row')}, {_count(width, 'feature')})"


@dataclass(frozen=True)
class Federation:
    """Everything a federated run needs, already split and encoded.

    Labels are integers in ``[0, n_classes)``; ``class_names[k]`` is the original label of
    class ``k``. ``y_public`` are the true labels of U: clients and server never see them,
    the simulator uses them only to report how accurate the consensus is (a diagnostic).

    ``name`` is the dataset's; ``clients`` holds each client's :class:`ClientData`;
    ``X_public`` is U's features; ``X_test`` and ``y_test`` the test set; ``task`` is
    ``"classification"`` or ``"regression"`` (targets mapped to [0, 1] by the public
    ``target_range``, ``n_classes`` 0); ``feature_names`` name the columns; ``info``
    records how the federation was built (partition, shift, public set, ...); and
    ``preprocessing`` maps raw rows to the features (what ``RunResult.predict`` uses).
    Build one with :func:`make_federation` or :func:`~fedlabels.data.load_federation`.
    """

    name: str
    clients: list[ClientData]
    X_public: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    y_public: np.ndarray | None = None
    class_names: list[str] = field(default_factory=list)
    # "regression": y holds targets mapped to [0, 1] by the public ``target_range``
    # (fedlabels.data.targets) and n_classes is 0
    task: str = "classification"
    target_range: tuple[float, float] | None = None
    feature_names: Sequence[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    # raw features -> model inputs, to reuse the models (fedlabels.results.predict)
    preprocessing: Preprocessing | None = field(default=None, repr=False, compare=False)

    @property
    def n_clients(self) -> int:
        """The number of clients m."""
        return len(self.clients)

    def __repr__(self) -> str:
        """Sizes only: no arrays (and never U's hidden labels)."""
        sizes = [len(c) for c in self.clients]
        what = "regression" if self.task == "regression" else f"{self.n_classes} classes"
        return (f"Federation({self.name!r}, {_count(self.n_clients, 'client')} of {sizes}, "
                f"|U| = {len(self.X_public)}, test {len(self.y_test)}, {self.n_features} "
                f"features, {what}, partition {self.info.get('partition', 'iid')!r})")

    @property
    def n_features(self) -> int:
        """Feature columns; 1 for text (a 1-D array of ``str``)."""
        return 1 if self.X_public.ndim == 1 else int(self.X_public.shape[1])

    @property
    def public_scaling(self) -> tuple[np.ndarray, np.ndarray] | None:
        """U's public (mean, std) that z-scored every set; None: features as loaded, or
        projected onto U's principal components (``public_pca``: no z-scoring to undo)."""
        pre = self.preprocessing
        mean, std = getattr(pre, "mean", None), getattr(pre, "std", None)
        if mean is None or std is None or getattr(pre, "pca", None) is not None:
            return None
        return mean, std

    def pooled(self) -> ClientData:
        """All private data in one set (what a centralized learner would see)."""
        return ClientData(np.concatenate([c.X for c in self.clients]),
                          np.concatenate([c.y for c in self.clients]))

    def fingerprint(self) -> str:
        """A digest of every array of the federation (the clients' data, U, the test set),
        so that a resumed run can tell it is on the data it started with (a summary of sizes
        and counts cannot)."""
        import hashlib

        h = hashlib.blake2b(digest_size=16)
        arrays = [self.X_public, self.X_test, self.y_test,
                  *(a for c in self.clients for a in (c.X, c.y))]
        for arr in arrays:
            _hash_array(h, arr)
        return h.hexdigest()

    def summary(self) -> dict[str, Any]:
        """Sizes and class counts, JSON-friendly."""
        return {
            "name": self.name,
            "n_clients": self.n_clients,
            "n_classes": self.n_classes,
            "n_features": self.n_features,
            "n_public": len(self.X_public),
            "n_test": len(self.y_test),
            "client_sizes": [len(c) for c in self.clients],
            "client_class_counts": [] if self.task == "regression" else
            [np.bincount(c.y, minlength=self.n_classes).tolist() for c in self.clients],
            "class_names": list(self.class_names),
            **self.info,
        }


# --------------------------------------------------------------------------- validation

# float dtypes a feature matrix keeps as given: float32 data (e.g. images) is not widened to
# float64, which would double the memory of the whole dataset before it is split
_KEPT_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_CHUNK_ELEMENTS = 1 << 18  # values per block when checking / scaling large matrices


def _count(n: int, noun: str) -> str:
    """``1 client``, ``3 clients``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _block_rows(arr: np.ndarray | LazyRows) -> int:
    return max(1, _CHUNK_ELEMENTS // max(1, int(np.prod(arr.shape[1:], dtype=np.int64))))


def _all_finite(arr: np.ndarray | LazyRows) -> bool:
    """``np.isfinite(arr).all()`` without a boolean temporary of the whole matrix."""
    step = _block_rows(arr)
    return all(bool(np.isfinite(arr[i : i + step]).all()) for i in range(0, len(arr), step))


def _hash_array(h: Any, arr: Any) -> None:
    """Feed an array's shape, type and values to ``h`` (text row by row; rows read lazily
    block by block)."""
    if isinstance(arr, LazyRows):
        h.update(repr(arr.shape).encode())
        for start in range(0, len(arr), 4096):
            _hash_array(h, np.asarray(arr[start:start + 4096]))
        return
    a = np.asarray(arr)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    _hash_values(h, a)


def _hash_values(h: Any, a: np.ndarray) -> None:
    """Feed an array's values to ``h``: its bytes, or (text) each value's UTF-8 bytes,
    length-prefixed."""
    if a.dtype == object:
        for v in a.ravel():
            data = str(v).encode()
            h.update(len(data).to_bytes(8, "little") + data)
    else:
        h.update(np.ascontiguousarray(a).data)


def data_sha256(arrays: dict[str, Any], names: dict[str, Any]) -> str:
    """SHA-256 of the data a federation is built from, before the split: each array's name,
    dtype, shape and bytes (a :class:`LazyRows` its stored source's; text each row's UTF-8
    bytes, length-prefixed) and the feature, class and site ``names`` (JSON). Equal data
    give equal digests whatever the seed, partition or sizes; the digest holds no data."""
    import hashlib
    import json

    from fedlabels.data.pixel_names import PixelNames, json_names

    features = names.get("features")
    if isinstance(features, PixelNames):  # their JSON in pieces, not 27 million strings
        mark = "\0features\0"
        head, tail = json.dumps({**names, "features": mark}, sort_keys=True,
                                default=str).split(json.dumps(mark))
        h = hashlib.sha256(head.encode())
        for piece in json_names(features):
            h.update(piece.encode())
        h.update(tail.encode())
    else:
        h = hashlib.sha256(json.dumps(names, sort_keys=True, default=str).encode())
    for key, arr in arrays.items():
        a = arr.source if isinstance(arr, LazyRows) else np.asarray(arr)
        h.update(f"\0{key}\0{a.dtype.str}{a.shape}".encode())
        _hash_values(h, a)
    return h.hexdigest()


def as_feature_matrix(X: Any, what: str = "X", gaps: bool = False
                      ) -> tuple[np.ndarray | LazyRows, Sequence[str]]:
    """Convert an array or DataFrame to a finite float matrix; one-hot encodes categoricals.
    With ``gaps`` a numeric NaN stays (to be filled after the split); inf is still an error.

    float32 and float64 input keeps its dtype (float32 data is not widened); anything else
    becomes float64. Array input that already has such a dtype is returned without a copy,
    and :class:`LazyRows` as it is (its rows are checked block by block).
    """
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    names: list[str]
    from fedlabels.learners.text_input import as_text_array, is_text

    if is_text(X):  # text: one str per row, kept as a 1-D object array
        values = X.tolist() if hasattr(X, "tolist") else list(X)
        bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
        if bad is not None:  # is_text looks at the first row only; None would be 'None'
            raise FedLabelsError(f"{what}[{bad}] is {values[bad]!r}, not a str: text data "
                                 "needs one str per row; drop or fill the missing texts.")
        return as_text_array(X), [str(getattr(X, "name", None) or "text")]
    if isinstance(X, LazyRows):
        if not _all_finite(X):
            raise FedLabelsError(f"{what} contains non-finite values; "
                                 f"{_gaps_hint(what, is_frame=False, median=False)}")
        from fedlabels.data.pixel_names import names_copy

        return X, names_copy(X.names) if X.names is not None else \
            [f"x{i}" for i in range(X.shape[1])]
    if isinstance(X, pd.DataFrame):
        from fedlabels.data.columns import check_feature_columns
        from fedlabels.data.gaps import check_frame_gaps
        from fedlabels.data.preprocessing import categorical_columns

        check_feature_columns(X)  # no ID, date or stray-token column is one-hot encoded
        categorical = categorical_columns(X)
        check_frame_gaps(X, categorical, gaps, what)  # get_dummies: a gap as no category
        if categorical:
            X = pd.get_dummies(X, columns=categorical, dummy_na=False, dtype=float)
        names = [str(c) for c in X.columns]
        names_given = True
        all_f32 = len(X.columns) > 0 and all(dt == np.float32 for dt in X.dtypes)
        arr = X.to_numpy(dtype=np.float32 if all_f32 else float, na_value=np.nan)
    else:
        if isinstance(X, Federation):
            raise FedLabelsError(f"{what} is already a Federation ({X!r}): run it with "
                                 "fl.run(method, federation); make_federation takes the "
                                 "features and labels, make_federation(X, y, ...).")
        if type(X).__module__.startswith("scipy.sparse"):
            raise FedLabelsError(f"{what} is a scipy sparse matrix; the models take dense "
                                 f"rows: pass {what}.toarray() (for text, pass the texts "
                                 "and use --model tfidf).")
        if np.iscomplexobj(X):
            raise FedLabelsError(f"{what} is complex; the models take real numbers: pass e.g. "
                                 "its real and imaginary parts as columns "
                                 "(np.c_[X.real, X.imag]).")
        try:
            arr = np.asarray(X)
            if arr.dtype not in _KEPT_FLOATS:
                arr = np.asarray(X, dtype=float)
        except (TypeError, ValueError) as exc:
            raise FedLabelsError(f"{what} must be numeric; could not convert it to floats "
                                 f"({exc}). Encode categorical features first, or pass a "
                                 "pandas DataFrame (categoricals are one-hot encoded).") from None
        if arr.ndim == 1:
            raise FedLabelsError(f"{what} must be 2-D (n_samples, n_features); got a 1-D "
                                 "array. Use X.reshape(-1, 1) for a single feature.")
        if arr.ndim > 2:
            arr = arr.reshape(len(arr), -1)
        names = [f"x{i}" for i in range(arr.shape[1])]
        names_given = False
    if not _all_finite(arr) and not (gaps and not np.isinf(arr).any()):
        bad = ~np.isfinite(arr)
        cols = np.flatnonzero(bad.any(axis=0))
        shown = ", ".join(names[c] for c in cols[:5]) + (" ..." if len(cols) > 5 else "")
        kinds = []
        if np.isnan(arr).any():
            kinds.append(f"{int(np.isnan(arr).sum())} NaN")
        if np.isinf(arr).any():
            kinds.append(f"{int(np.isinf(arr).sum())} inf")
        hint = _gaps_hint(what, is_frame=names_given) if np.isnan(arr).any() else \
            "replace or drop them before federating."
        raise FedLabelsError(f"{what} contains non-finite values ({', '.join(kinds)}) in "
                             f"column(s) {shown}; {hint}")
    return arr, names


def _gaps_hint(what: str, is_frame: bool, median: bool = True) -> str:
    """How to drop or fill missing features without leaking: a median or mean of the
    whole table carries the test rows' (and the other clients') values into training;
    ``median``: U's medians after the split (``missing="public-median"``) apply too."""
    fill = (f"pd.concat([{what}.fillna(0), {what}.isna().astype(float).add_suffix('_missing')]"
            ", axis=1)" if is_frame else
            f"np.c_[np.where(np.isnan({what}), 0.0, {what}), np.isnan({what})]")
    after = ("fill each gap after the split with the median of U's values of its column, "
             "fitted on U only (--missing public-median; Python: missing=\"public-median\"),"
             " or " if median else "")
    flag = ("; add the 0/1 columns before a median fill too if a gap may mean something"
            if median else "")
    return (f"drop those rows, {after}fill each gap with a constant and add a 0/1 column "
            f"that flags it, which uses no other row's values (in Python: {fill}){flag}; a "
            "median or mean of the whole table would carry the test rows' and the other "
            "clients' values into training.")


def encode_labels(y: Any, what: str = "y") -> tuple[np.ndarray, list[str]]:
    """Map labels to ``0..C-1`` in sorted order, as scikit-learn's ``LabelEncoder`` does.

    Integer labels in any set (``{1, 2}``, ``{-1, 1}``) map in numeric order, strings,
    booleans and categoricals in sorted order; ``class_names[k]`` is the label of class
    ``k``. Non-integral floats and missing labels are errors.
    """
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    shape = np.shape(y)
    if len(shape) > 2 or (len(shape) == 2 and shape[1] != 1):
        raise FedLabelsError(f"{what} must hold one label per row (1-D); got shape {shape}. "
                             "Pass a single column, e.g. y[:, 0] or df['label'].")
    series = pd.Series(np.asarray(y).ravel() if not isinstance(y, pd.Series) else y)
    if series.isna().any():
        raise FedLabelsError(f"{what} has {int(series.isna().sum())} missing labels; drop "
                             "those rows first.")
    values = series.to_numpy()
    if values.dtype.kind == "f":
        if not np.all(np.mod(values, 1) == 0):
            raise FedLabelsError(f"{what} must be integer or string class labels; got "
                                 "non-integral floats; for a regression target use --task "
                                 "regression (Python: task=\"regression\").")
        values = values.astype(np.int64)
    if values.dtype.kind in "iu":
        classes, codes = np.unique(values, return_inverse=True)
        _warn_numeric_classes(len(classes), len(values), what)
        return codes.astype(np.int64), [str(c) for c in classes]
    if values.dtype.kind in "bOUS" or isinstance(series.dtype, pd.CategoricalDtype):
        if values.dtype.kind == "O":
            _check_one_label_type(values, what)
        as_str = series.astype(str).to_numpy()
        classes, codes = np.unique(as_str, return_inverse=True)
        _warn_near_duplicate_classes([str(c) for c in classes], what)
        return codes.astype(np.int64), [str(c) for c in classes]
    raise FedLabelsError(f"{what} has unsupported dtype {values.dtype}; use integer or string "
                         "class labels.")


def _label_kind(value: Any) -> str:
    if isinstance(value, str | bytes):
        return "text"
    if isinstance(value, bool | np.bool_):
        return "boolean"
    if isinstance(value, numbers.Number):
        return "number"
    return type(value).__name__


def _check_one_label_type(values: np.ndarray, what: str) -> None:
    """Labels of one kind: ``1`` and ``"a"`` together came back from predict as ``"1"``,
    and comparing them with ``y`` then failed silently."""
    first: dict[str, Any] = {}
    for v in values:
        first.setdefault(_label_kind(v), v)
        if len(first) > 1:
            shown = " and ".join(f"{k} ({v!r})" for k, v in first.items())
            raise FedLabelsError(f"{what} mixes label types: {shown}; give every label the "
                                 "same type (e.g. y.astype(str)).")


def _warn_numeric_classes(n_classes: int, n_rows: int, what: str) -> None:
    """Warn when integer labels look like a numeric quantity (a count, a price): more than
    20 classes and on average fewer than two rows per class."""
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    if n_classes > 20 and 2 * n_classes > n_rows:
        warnings.warn(FedLabelsWarning(
            f"{what} has {n_classes} integer classes for {n_rows} rows (under two rows a "
            "class): if it is a numeric quantity, use --task regression (Python: "
            "task=\"regression\")."),
            stacklevel=user_stacklevel())


def _warn_near_duplicate_classes(classes: list[str], what: str) -> None:
    """Warn where classes differ only in case or surrounding spaces ('yes', 'YES', 'yes ')."""
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    groups: dict[str, list[str]] = {}
    for c in classes:
        groups.setdefault(c.strip().casefold(), []).append(c)
    clashes = [g for g in groups.values() if len(g) > 1]
    if clashes:
        shown = "; ".join(", ".join(repr(c) for c in g) for g in clashes[:3])
        warnings.warn(FedLabelsWarning(
            f"{what} has classes that differ only in case or spaces ({shown}): each is a class "
            "of its own; clean them first if they are one (e.g. y.str.strip().str.lower())."),
            stacklevel=user_stacklevel())


def _check_size(name: str, value: int | None, available: int, flag: str) -> None:
    if value is not None and not 1 <= value <= available:
        raise FedLabelsError(f"{name} = {value} is not possible: only {available} examples are "
                             f"available for it (set {flag} between 1 and {available}; Python: "
                             f"{flag.lstrip('-')}=...).")


# --------------------------------------------------------------------------- construction

#: a count or seed as Python or numpy gives it (``5`` or ``np.int64(5)``, e.g. from ``np.arange``)
IntLike = int | np.integer[Any]
#: a share or shift as Python or numpy gives it (``0.2``, ``np.float32(0.2)``)
FloatLike = float | np.floating[Any] | np.integer[Any]

FORMER_SIZES = {"n_clients": "clients", "n_unlabeled": "unlabeled", "n_private": "private",
                "n_test": "test"}  # the keywords' names before they were the run parameters'


@renamed_keywords(FORMER_SIZES)
def make_federation(
    X: Any,
    y: Any = None,
    *,
    clients: IntLike = 5,
    unlabeled: IntLike | None = None,
    private: IntLike | None = None,
    test: IntLike | None = None,
    test_fraction: FloatLike | None = None,
    X_test: Any = None,
    y_test: Any = None,
    partition: str | PartitionSpec = "iid",
    scale: str = "public",
    seed: IntLike = 0,
    name: str = "custom",
    task: str = "classification",
    target_range: TargetRangeLike = None,
    unlabeled_shift: FloatLike = 0.0,
    public_pca: IntLike | None = None,
    X_public: Any = None,
    missing: str = "refuse",
    classes: str | Sequence[Any] | None = None,
) -> Federation:
    """Split labelled data into a test set, a public unlabeled set U and m client sets.

    Parameters
    ----------
    X, y : array-like or DataFrame / Series
        Features and labels. Labels may be integers ``0..C-1`` or strings (mapped). A
        DataFrame's text columns are one-hot encoded with U's categories (fitted after the
        split on U's rows; a pandas ``Categorical`` keeps all its declared categories): a
        category no row of U holds is no column, and rows holding it encode it as none.
    clients : int, default=5
        Number of clients m (>= 1), as ``fedlabels run``'s default.
    unlabeled : int, optional
        Size of the public unlabeled set U (its labels are hidden from every party);
        default half of the rows left after the test split, as for a ``csv:`` table.
    private : int, optional
        Total number of private labelled examples over all clients; default: all that remain.
    test : int, optional
        Test-set size, when no explicit ``X_test`` is given; default ``test_fraction * n``.
    test_fraction : float, optional
        The share of the rows held out to test, 0.2 unless given; give ``test`` or this.
    X_test, y_test : optional
        An explicit test set (e.g. a dataset's official split); then nothing of X is held out.
        Beside a DataFrame X, a DataFrame X_test is read as ``RunResult.predict`` reads new
        rows: X's columns by name (in any order; the ``column:NAME`` column may stand in it),
        one-hot encoded with X's categories (a category X lacks encodes as none, with a
        warning); a column X lacks is an error.
    partition : str
        ``iid``, ``dirichlet:A1,A2``, ``shards:K``, ``quantity:A[,MIN]``,
        ``powerlaw:A[,MIN]`` or ``column:NAME`` (:mod:`fedlabels.data.partition`; with
        ``column:NAME`` X is a DataFrame, the column is dropped from the features and each
        of its m distinct values is one client).
    scale : {"public", "none"}
        ``"public"`` z-scores every set with the mean and std of U. U is public, so this
        leaks nothing private and gives all clients the same preprocessing.
    seed : int
        Seeds the split and the partition.
    name : str, default="custom"
        The federation's name, which a result records as its ``dataset``.
    task : {"classification", "regression"}
        With ``"regression"`` y is a numeric target, mapped to ``[0, 1]`` by
        ``target_range``, and only label-free partitions are allowed
        (:mod:`fedlabels.data.targets`).
    target_range : (lo, hi) or "LO,HI", optional
        A regression's public target range; default the range of all of y and y_test.
    unlabeled_shift : float
        S in [0, 1]: U drawn with class proportions ``(1 - S) p + S u_H``
        (:mod:`fedlabels.data.shift`); 0 (the default) leaves U as it always was. The shift
        is measured either way and recorded in ``info["unlabeled_shift"]``.
    public_pca : int, optional
        K: after the z-scoring, project every set onto U's top-K principal components,
        whitened (:mod:`fedlabels.data.public_pca`; fitted on U's features only, so it costs
        no privacy). The features become ``pc1..pcK`` and ``info["public_pca"]`` records K
        and the fraction of U's variance kept. None (the default): features as they were.
    X_public : array-like or DataFrame, optional
        A public unlabeled set U of your own (the features of X, no labels): then no U is
        drawn from X, every row not held out to test goes to the clients, ``unlabeled`` and
        ``unlabeled_shift`` are refused, and ``y_public`` is None. A DataFrame is one-hot
        encoded with its own categories (its columns must be X's). The one-hot columns,
        the scaling and ``public_pca`` are fitted on it; ``info["public"]`` records its size
        and SHA-256.
    missing : {"refuse", "public-median"}
        Feature gaps (NaN) are an error (``"refuse"``), or each is filled after the split
        with the median of U's observed values of its column (0 where U has none), fitted
        on U only, like the scaling (:mod:`fedlabels.data.gaps`); ``info["missing"]``
        names the columns that had gaps (none: nothing is filled), and ``predict`` fills a
        new row's gaps in any column alike. Flag the gaps with 0/1 columns first if they
        may mean something. Text and image features are refused (they have no numeric
        columns).

    classes : str or sequence, optional
        The declared class list (``"a,b,c"`` or the labels), which every party receives:
        a label it lacks is an error, a class no row holds is a class all the same. Not
        given: a pandas ``Categorical`` y's categories, else the classes the clients' rows
        hold (a class that only the test set or U holds is an error naming it; it was a
        class of its own until 2026-11-29). Sorted as ``encode_labels`` sorts
        (:mod:`fedlabels.data.classes`).

    The sizes are named as the run parameters (``fedlabels run --clients``); their former
    names ``n_clients``, ``n_unlabeled``, ``n_private`` and ``n_test`` are read for one more
    release, with a warning.
    """
    if isinstance(X, str):
        raise FedLabelsError(f"make_federation splits your own X and y; for the dataset "
                             f"{X!r} use fl.load_federation({X!r}, clients=...).")
    if y is None:
        raise FedLabelsError("make_federation needs the labels y beside X: "
                             "fl.make_federation(X, y, clients=...).")
    if isinstance(y, str):  # a column's name, as a CSV spec names its target
        named = f"X.drop(columns={y!r}), X[{y!r}]" if y in getattr(X, "columns", ()) else \
            "X, labels"
        raise FedLabelsError(f"y is the text {y!r}, not the labels; pass the label column "
                             f"itself: fl.make_federation({named}, ...).")
    _check_aligned(X, y, "X", "y")
    _check_aligned(X_test, y_test, "X_test", "y_test")
    _check_label_not_a_feature(X, y)
    n_clients, n_unlabeled, n_private, n_test = clients, unlabeled, private, test
    if not isinstance(n_clients, int | np.integer) or n_clients < 1:
        raise FedLabelsError(f"clients must be an integer >= 1, got {n_clients!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise FedLabelsError(f"seed must be an integer >= 0, got {seed!r}.")
    for what, size in (("unlabeled", n_unlabeled), ("private", n_private), ("test", n_test)):
        if size is not None and (isinstance(size, bool) or not isinstance(size, int | np.integer)):
            share = (f"; for a share of the rows give test_fraction={size!r}"
                     if what == "test" and isinstance(size, float) and 0 < size < 1 else "")
            raise FedLabelsError(f"{what} must be an integer >= 1 or None, got {size!r}"
                                 f"{share}.")
    n_clients, seed = int(n_clients), int(seed)  # numpy integers as Python's
    n_unlabeled, n_private, n_test = (None if size is None else int(size)
                                      for size in (n_unlabeled, n_private, n_test))
    if (n_test is not None or test_fraction is not None) and X_test is not None:
        raise FedLabelsError("give test or test_fraction (what to split off) or X_test and "
                             "y_test (a test set of your own), not both.")
    if n_test is not None and test_fraction is not None:
        raise FedLabelsError("give test (a size) or test_fraction (a share), not both.")
    if scale not in ("public", "none"):
        raise FedLabelsError(f"scale must be 'public' or 'none', got {scale!r}.")
    from fedlabels.data.classes import as_declared, check_clients_hold, declared_classes
    from fedlabels.data.gaps import check_missing

    declared = None
    gaps = check_missing(missing) == "public-median"
    spec = parse_partition(partition)
    from fedlabels.data.partition import split_column
    from fedlabels.data.preprocessing import Preprocessing, label_dtype
    from fedlabels.data.public_set import array_sha256, copies_of_labelled
    from fedlabels.data.shift import check_shift, measure_shift, shifted_public
    from fedlabels.data.targets import check_partition_for_task, check_task, unit_targets

    check_partition_for_task(spec.kind, check_task(task))
    regression = task == "regression"
    shift = check_shift(unlabeled_shift)
    if shift and regression:
        raise FedLabelsError("unlabeled_shift shifts U's class proportions and a regression "
                             "task has no classes; leave it at 0.")
    given = X_public is not None  # U of the user's own: none drawn from X
    if given:
        refuse_drawn_u(n_unlabeled, shift)
    sites = site_names = None
    if spec.kind == "column":  # the sites: one client per value, the column no feature
        X, sites, site_names = split_column(X, spec.column, n_clients)
    if given:
        X, Xp = _with_public(X, X_public)
    if gaps:
        _check_numeric(X)
    Xa, feature_names = as_feature_matrix(X, "X", gaps)  # an ndarray, or LazyRows by rows
    if given:
        Xa, Xp = _split_public(Xa, Xp, gaps)
    bounds: tuple[float, float] | None = None  # the range used (a regression's)
    if regression:
        ya, yt_unit, bounds, range_source = unit_targets(y, y_test, target_range)
        class_names: list[str] = []
    elif target_range is not None:
        raise FedLabelsError("a target range applies to a regression task only.")
    else:
        ya, class_names = encode_labels(y, "y")
        declared = declared_classes(y, classes)
        if declared is not None:
            ya, class_names = as_declared(ya, class_names, declared), declared
    if classes is not None and regression:
        raise FedLabelsError("classes applies to a classification task only.")
    if len(Xa) != len(ya):
        raise FedLabelsError(f"X has {len(Xa)} rows but y has {len(ya)} labels.")
    if len(class_names) < 2 and not regression:
        raise FedLabelsError(f"y has {len(ya)} labels but "
                             + (f"a single class ({class_names[0]!r})" if class_names
                                else "no class")
                             + "; classification needs at least two classes.")
    needed = n_clients + (1 if X_test is not None else 2) - given
    if len(ya) < needed:
        raise FedLabelsError(f"only {len(ya)} labelled examples: a federation of {n_clients} "
                             f"clients needs at least {needed} (one per client, one in U"
                             + (")." if X_test is not None else ", one to test)."))

    seq = np.random.SeedSequence(seed)
    split_rng, part_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    order = split_rng.permutation(len(ya))

    if X_test is not None or y_test is not None:
        if X_test is None or y_test is None:
            raise FedLabelsError("pass both X_test and y_test, or neither.")
        Xt = _test_like(X, X_test, feature_names, spec.column or None)
        if isinstance(Xt, LazyRows):
            Xt = Xt[:]
        if Xt.ndim != Xa.ndim:
            raise FedLabelsError("X and X_test must both be text or both be numeric.")
        if Xt.ndim == 2 and Xt.shape[1] != Xa.shape[1]:
            raise FedLabelsError(f"feature dimensions do not match: X has {Xa.shape[1]} "
                                 f"features, X_test has {Xt.shape[1]}.")
        yt = np.asarray(yt_unit) if regression else _encode_like(y_test, class_names,
                                                                 declared)
        pool = order
    else:
        if n_test is None:
            test_fraction = 0.2 if test_fraction is None else test_fraction
            if not 0 < test_fraction < 1:
                raise FedLabelsError(f"test_fraction must lie in (0, 1), got {test_fraction}.")
            n_test = max(1, round(test_fraction * len(ya)))
        _check_size("test", n_test, len(ya) - 2, "--test")
        if not regression:  # a rare class left out of the test split by the draw: swap one in
            order = every_class_in_test(order, ya, n_test)
        Xt, yt = Xa[order[:n_test]], ya[order[:n_test]]
        pool = order[n_test:]
    built_from = data_sha256(  # before anything of it is drawn, filled or scaled
        {"X": Xa, "y": ya, **({"X_test": Xt, "y_test": yt} if X_test is not None else {}),
         **({"X_public": Xp} if given else {}),
         **({"sites": sites} if sites is not None else {})},
        {"features": feature_names, "classes": class_names, "sites": site_names})

    if given:
        n_unlabeled = 0
    elif n_unlabeled is None:  # as load_federation does for a user's table
        n_unlabeled = max(1, len(pool) // 2)
    if not given:
        _check_size("unlabeled (|U|)", n_unlabeled, len(pool) - 1, "--unlabeled")
    remaining = len(pool) - n_unlabeled
    if n_private is None:
        n_private = remaining
    _check_size("private", n_private, remaining, "--private")
    if n_private < n_clients:
        raise FedLabelsError(f"{n_private} private examples cannot give each of {n_clients} "
                             "clients at least one; use more private data or fewer clients.")
    favoured = None
    if shift:  # a third seed stream: S = 0 draws nothing more, so U stays as it was
        public_idx, favoured = shifted_public(pool, ya, n_unlabeled, n_private, shift,
                                              len(class_names),
                                              np.random.default_rng(seq.spawn(1)[0]))
    else:
        public_idx = pool[:n_unlabeled]
    private_idx = pool[n_unlabeled : n_unlabeled + n_private]
    from fedlabels.data.image_channels import ImageRows

    if isinstance(Xa, ImageRows) and not given:  # undeclared channels: U's files decide
        Xa = Xa.for_public(public_idx)
        feature_names = feature_names if Xa.names is None else Xa.names
        if X_test is None:
            Xt = Xa[order[:n_test]]
    if len(np.unique(ya[private_idx])) < 2 and not regression:
        raise FedLabelsError(f"the {n_private} private training examples hold a single class "
                             f"({class_names[int(ya[private_idx][0])]!r}), so no client can "
                             "learn to tell classes apart; use more private data (--private; "
                             "Python: private=...) or check the labels.")
    if not regression and declared is None:  # the clients' classes, not the test set's
        check_clients_hold(class_names, ya[private_idx])
    parts = partition_pool(ya[private_idx], n_clients, spec, part_rng,
                           groups=None if sites is None else sites[private_idx])
    import pandas as pd  # loaded already: as_feature_matrix read X

    if isinstance(X, pd.DataFrame):  # one-hot columns of U's categories only
        n_public = len(Xp) if given else 0
        Xa, Xt, Xp, feature_names = _public_categories(
            X, np.arange(len(X) - n_public, len(X)) if given else public_idx,
            Xa, Xt, Xp if given else None, feature_names)

    X_public = (Xp[:] if isinstance(Xp, LazyRows) else np.array(Xp)) if given \
        else Xa[public_idx]
    mean = std = None
    text = Xa.ndim == 1  # text features (as_feature_matrix): nothing to scale
    fill = gapped = None
    if gaps and isinstance(Xa, np.ndarray):  # after the split: U's medians, U's rows only
        from fedlabels.data.gaps import fill_gaps, gapped_columns, public_medians

        gapped = gapped_columns(feature_names, Xa, Xt, X_public)
        fill = public_medians(X_public)
        Xa, Xt, X_public = (fill_gaps(a, fill) for a in (Xa, Xt, X_public))
    if public_pca is not None:
        from fedlabels.data.public_pca import check_public_pca

        public_pca = check_public_pca(public_pca, len(X_public), 1 if text else Xa.shape[1],
                                      text)
    if text:
        scale = "none"
    if scale == "public":
        # statistics in float64 whatever the input dtype (float32 data included)
        with np.errstate(all="ignore"):  # overflow is reported by _check_range
            mean = X_public.mean(axis=0, dtype=np.float64)
            std = X_public.std(axis=0, dtype=np.float64)
        std[std == 0] = 1.0
    if not text and isinstance(Xa, np.ndarray):
        _check_range(Xa, mean, std, feature_names)
    if given and not text:
        _check_range(X_public, mean, std, feature_names)
    pca = None
    if public_pca is not None:  # U's features only (never its labels): no privacy cost
        from fedlabels.data.public_pca import fit_public_pca

        Z_public = np.asarray(X_public, dtype=np.float64)
        pca = fit_public_pca(Z_public if mean is None else (Z_public - mean) / std, public_pca)
        del Z_public

    def _scale(a: np.ndarray, owned: bool) -> np.ndarray:
        """``a`` z-scored (if scaling) as float32; ``owned``: ``a`` is a fresh array."""
        if text:
            return a if owned else a.copy()
        return _to_float32(a, mean, std, reuse=owned, pca=pca)

    yp = ya[private_idx]
    # each client's rows straight from the pool (one copy, not a copy of all private rows first)
    sites_data = [ClientData(_scale(Xa[private_idx[p]], owned=True), yp[p]) for p in parts]
    X_public_scaled = _scale(X_public, owned=True)
    seen_texts = None
    if text:
        from fedlabels.data.text_overlap import test_texts_seen

        seen_texts = test_texts_seen(Xt, [X_public, *(c.X for c in sites_data)],
                                     feature_names[0])
    y_public = None if given else ya[public_idx]
    # an explicit test set may be the caller's own array: copy it rather than share it
    X_test_scaled = _scale(Xt, owned=X_test is None or isinstance(X_test, LazyRows))
    copies = copies_of_labelled(X_public_scaled, [*(c.X for c in sites_data), X_test_scaled]) \
        if given else 0
    if copies:
        import warnings

        from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

        warnings.warn(FedLabelsWarning(
            f"the public set U holds {copies} row(s) identical to labelled rows (the "
            "clients' or the test set's): a public set must hold no private records "
            "(docs/privacy.md, 'A public set of your own'); drop them from it."),
            stacklevel=user_stacklevel())  # 3 pointed inside fedlabels
    measured = measure_shift(shift, X_public_scaled, [c.X for c in sites_data],
                             None if regression else y_public,
                             None if regression else yp, len(class_names), favoured)
    return Federation(
        name=name,
        clients=sites_data,
        X_public=X_public_scaled,
        y_public=y_public,
        X_test=X_test_scaled,
        y_test=yt,
        n_classes=len(class_names),
        class_names=class_names,
        feature_names=feature_names if pca is None else pca.feature_names(),
        preprocessing=Preprocessing.of(X, feature_names, class_names, mean, std, text=text,
                                       pca=pca, fill=fill,
                                       label_dtype=None if regression else label_dtype(y),
                                       target_range=bounds),
        info={"partition": str(spec), "seed": seed, "scale": scale,
              "n_private": int(n_private), "data_sha256": built_from,
              "unlabeled_shift": measured,
              **({"public_pca": pca.record()} if pca is not None else {}),
              **({"missing": {"policy": "public-median",
                              "fill": "median of U's observed values of each column",
                              "columns": gapped}} if gapped is not None else {}),
              **({"public": {"source": "given", "n_public": len(X_public_scaled),
                             "sha256": array_sha256(X_public_scaled),
                             "copies_of_labelled_rows": copies,
                             "labels": "none: no consensus_accuracy (a diagnostic against "
                                       "U's true labels)"}} if given else {}),
              **({"test_texts_seen": seen_texts} if seen_texts is not None else {}),
              **({"client_sites": site_names} if site_names is not None else {}),
              **({"task": task, "target_range": list(bounds),
                  "target_range_source": range_source} if bounds is not None else {})},
        task=task,
        target_range=bounds,
    )


def _public_categories(X: Any, public_rows: np.ndarray, Xa: Any, Xt: Any, Xp: Any,
                       feature_names: Sequence[str]) -> tuple[Any, Any, Any, Sequence[str]]:
    """``Xa``, ``Xt``, a given U ``Xp`` and ``feature_names`` without the one-hot columns
    of categories that no row of U holds (:func:`~.preprocessing.categories_not_in_public`),
    with a warning naming their columns (not the categories: a client's or the test
    set's values)."""
    from fedlabels.data.preprocessing import categories_not_in_public

    absent = set(categories_not_in_public(X, public_rows))
    if not absent:
        return Xa, Xt, Xp, feature_names
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    keep = [i for i, name in enumerate(feature_names) if name not in absent]
    columns = sorted({str(c) for c in X.columns
                      if any(a.startswith(f"{c}_") for a in absent)})
    warnings.warn(FedLabelsWarning(
        f"{len(absent)} categor{'y' if len(absent) == 1 else 'ies'} of column(s) "
        f"{', '.join(map(repr, columns))} occur{'s' * (len(absent) == 1)} in no row of U: "
        "the one-hot columns are "
        "U's categories (public), so rows of a client or the test set holding one encode "
        "it as none (all zeros); declare the categories (a pandas Categorical) to keep "
        "them."), stacklevel=user_stacklevel())  # 4 pointed at load_federation's body
    return (Xa[:, keep], Xt[:, keep], None if Xp is None else Xp[:, keep],
            [feature_names[i] for i in keep])


def refuse_drawn_u(unlabeled: IntLike | None, shift: FloatLike) -> None:
    """Beside a public set of the user's own (``public``, ``X_public``): sizes that draw U
    from the labelled rows are a one-line error."""
    if unlabeled is not None or shift:
        raise FedLabelsError("unlabeled and unlabeled_shift draw U from the labelled rows; "
                             "with a public set given (public, X_public) leave both out.")


def _check_aligned(X: Any, y: Any, x_name: str, y_name: str) -> None:
    """A one-line error when pandas features and labels carry different row indexes: rows
    are paired by position (as scikit-learn pairs them), which a sorted or filtered ``y``
    would pair with the wrong rows, silently."""
    import sys

    pd = sys.modules.get("pandas")  # no pandas loaded: no pandas objects to compare
    if pd is None or not isinstance(X, pd.DataFrame | pd.Series) or not isinstance(
            y, pd.DataFrame | pd.Series) or X.index.equals(y.index):
        return
    if len(X) != len(y):
        return  # the row counts differ: the error that follows says so
    at = next((i for i, (a, b) in enumerate(zip(X.index, y.index, strict=True))
               if not (a == b or (a != a and b != b))), None)  # NaN labels alike
    if at is None:
        return
    mine, theirs = (getattr(v, "item", lambda v=v: v)() for v in (X.index[at], y.index[at]))
    raise FedLabelsError(
        f"{x_name} and {y_name} have different row indexes (row {at}: {x_name}'s index "
        f"{mine!r}, {y_name}'s {theirs!r}); rows are paired by position, so "
        f"align them first: {y_name} = {y_name}.loc[{x_name}.index] to pair them by index, or "
        f"{y_name} = {y_name}.set_axis({x_name}.index) when the positions already match.")


def _check_label_not_a_feature(X: Any, y: Any) -> None:
    """A one-line error when a DataFrame X still holds the label column (a Series y's name,
    with y's values): every model would read the label off its own input."""
    import sys

    pd = sys.modules.get("pandas")
    name = getattr(y, "name", None)
    if pd is None or not isinstance(X, pd.DataFrame) or not isinstance(y, pd.Series) \
            or name is None or len(X) != len(y):
        return
    same = [c for c in X.columns if str(c) == str(name)]
    if same and np.array_equal(X[same[0]].to_numpy(), y.to_numpy()):
        raise FedLabelsError(f"X holds the label column {str(name)!r} (the values of y): every "
                             "client would read the label from its input; drop it: "
                             f"X.drop(columns={same[0]!r}).")


def _test_like(X: Any, X_test: Any, feature_names: Sequence[str],
               site_column: str | None) -> Any:
    """``X_test`` as :func:`as_feature_matrix` reads X. Beside a DataFrame X, a DataFrame is
    read as ``predict`` reads new rows: X's columns by name (the ``column:NAME`` partition's
    column ignored), one-hot encoded with X's categories (one X lacks encodes as none, with a
    warning), so that each test feature is the training feature of the same name."""
    import pandas as pd

    from fedlabels.data.preprocessing import Preprocessing

    if not (isinstance(X, pd.DataFrame) and isinstance(X_test, pd.DataFrame)):
        return as_feature_matrix(X_test, "X_test")[0]
    test = X_test.set_axis([str(c) for c in X_test.columns], axis=1)
    if site_column is not None:
        test = test.drop(columns=[c for c in test.columns if c == site_column])
    known = {str(c) for c in X.columns}
    extra = [c for c in test.columns if c not in known]
    if extra:
        raise FedLabelsError(f"X_test has column(s) {', '.join(extra[:5])} that X lacks; give "
                             "the test set X's feature columns (and no label).")
    return Preprocessing.of(X, feature_names, [], None, None).encode(test, "X_test")


def _with_public(X: Any, X_public: Any) -> tuple[Any, Any]:
    """X and a given U as :func:`as_feature_matrix` is to read them: two DataFrames as one
    (U's rows last, its columns in X's order, one-hot encoded together), else apart."""
    import pandas as pd

    if isinstance(X, pd.DataFrame) != isinstance(X_public, pd.DataFrame):
        raise FedLabelsError("X and X_public must both be DataFrames (named columns) or both "
                             "arrays.")
    if not isinstance(X, pd.DataFrame):
        return X, X_public
    columns = [str(c) for c in X.columns]
    theirs = [str(c) for c in X_public.columns]
    if sorted(columns) != sorted(theirs):
        missing = [c for c in columns if c not in theirs]
        extra = [c for c in theirs if c not in columns]
        raise FedLabelsError(f"X_public's columns are not X's: missing {missing}, extra "
                             f"{extra}; give U the features of X (and no label).")
    Xp = X_public.copy()
    Xp.columns = theirs
    both = pd.concat([X.set_axis(columns, axis=1), Xp[columns]], ignore_index=True)
    return both, len(X_public)


def _check_numeric(X: Any) -> None:
    """Refuse a gap fill for text or image features, before their rows are read."""
    from fedlabels.data.gaps import refuse_fill
    from fedlabels.learners.text_input import is_text

    if isinstance(X, LazyRows):
        refuse_fill("images", "X")
    if is_text(X):
        refuse_fill("text", "X")


def _split_public(Xa: Any, Xp: Any, gaps: bool = False) -> tuple[Any, Any]:
    """The rows of X and of U: the tail of one matrix (``Xp`` its length), or U's own."""
    if isinstance(Xp, int):
        if Xp == 0:
            raise FedLabelsError("X_public has no rows; U needs at least one.")
        return Xa[: len(Xa) - Xp], Xa[len(Xa) - Xp:]
    Xu, _ = as_feature_matrix(Xp, "X_public", gaps)
    if Xu.ndim != Xa.ndim or (Xa.ndim == 2 and Xu.shape[1] != Xa.shape[1]):
        raise FedLabelsError(f"X_public has {Xu.shape[1] if Xu.ndim == 2 else 'text'} "
                             f"features, X has {Xa.shape[1] if Xa.ndim == 2 else 'text'}; give "
                             "U the features of X.")
    if len(Xu) == 0:
        raise FedLabelsError("X_public has no rows; U needs at least one.")
    return Xa, Xu


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_range(X: np.ndarray, mean: np.ndarray | None, std: np.ndarray | None,
                 names: Sequence[str]) -> None:
    """A one-line error naming the columns whose values overflow when scaled (float64
    statistics) or stored as float32 model inputs."""
    with np.errstate(all="ignore"):
        # column extremes without an |X| temporary of the whole matrix
        largest = (np.maximum(np.abs(X.max(axis=0)), np.abs(X.min(axis=0))).astype(np.float64)
                   if len(X) else np.zeros(0))
        if mean is not None and std is not None:
            scaled = (largest + np.abs(mean)) / std
            bad = ~(np.isfinite(mean) & np.isfinite(std) & (scaled <= _FLOAT32_MAX))
        else:
            bad = largest > _FLOAT32_MAX
    cols = np.flatnonzero(bad)
    if cols.size:
        shown = ", ".join(names[c] for c in cols[:5]) + (" ..." if cols.size > 5 else "")
        raise FedLabelsError(f"X column(s) {shown} hold values too large to scale (up to "
                             f"{largest[cols[0]]:.3g}; the model inputs are float32, at most "
                             f"{_FLOAT32_MAX:.3g} after z-scoring); rescale them (other "
                             "units, a log) or drop them.")


def _to_float32(a: np.ndarray, mean: np.ndarray | None, std: np.ndarray | None,
                reuse: bool = False, pca: PublicPCA | None = None) -> np.ndarray:
    """``((a - mean) / std)`` as float32 (or ``a`` as float32 when ``mean`` is None), then
    projected by ``pca`` (n, K) if given.

    The arithmetic is float64, as if ``a`` had been widened first, but it runs over blocks of
    rows into a float32 result, so no float64 copy of the whole of ``a`` is ever made. With
    ``reuse`` a float32 ``a`` that needs no scaling is returned as it is (no copy).
    """
    if mean is None and pca is None and reuse and a.dtype == np.float32 \
            and a.flags.c_contiguous:
        return a
    out = np.empty(a.shape if pca is None else (len(a), pca.n_components), dtype=np.float32)
    step = _block_rows(a)
    for i in range(0, len(a), step):
        block = a[i : i + step]
        if mean is not None:
            block = (block - mean) / std  # float64, one block at a time
        if pca is not None:
            block = pca.project(block)
        out[i : i + step] = block  # rounds to float32 exactly like .astype(np.float32)
    return out


def _encode_like(y: Any, class_names: list[str],
                 declared: list[str] | None = None) -> np.ndarray:
    """Encode test labels with the class list (``declared``: the declared one, which the
    error names; else the training labels')."""
    values = np.asarray(y).ravel()
    if values.dtype.kind == "f" and np.all(np.mod(values, 1) == 0):
        values = values.astype(np.int64)  # 1.0 is the class "1"
    if values.dtype.kind in "iu" and class_names == [str(i) for i in range(len(class_names))]:
        outside = values[(values < 0) | (values >= len(class_names))]
        if len(outside):
            raise _unknown_test_class(outside[0], declared)
        return values.astype(np.int64)
    lookup = {c: i for i, c in enumerate(class_names)}
    try:
        return np.array([lookup[str(v)] for v in values], dtype=np.int64)
    except KeyError as exc:
        raise _unknown_test_class(exc.args[0], declared) from None


def _unknown_test_class(label: Any, declared: list[str] | None) -> FedLabelsError:
    """A test label outside the class list: the declared list and ``--classes`` where one
    was declared (it said "does not occur in y", which a declared class need not)."""
    shown = str(label) if isinstance(label, np.integer) else repr(label)
    if declared is None:
        return FedLabelsError(f"y_test has class {shown} which does not occur in y.")
    return FedLabelsError(f"y_test has class {shown} that the declared classes "
                          f"({', '.join(declared)}) lack; add it to classes (--classes) or "
                          "drop those rows.")
