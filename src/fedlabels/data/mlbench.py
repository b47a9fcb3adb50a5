"""UCI tables from Debian's ``r-cran-mlbench`` package, read with ``rdata`` (no R needed).

One fetch (``fedlabels fetch mlbench``, or fetching any table of it) downloads the .deb once
and copies the ``.rda`` files into the cache directory ``mlbench``. Loading then converts a
table to numeric features explicitly (:func:`encode_table`):

* **categorical features** (R factors, pandas ``category``): a factor with two levels becomes
  one 0/1 column (1 = the second level), an ordered factor becomes its integer level code
  ``0..L-1``, and an unordered factor with more levels becomes one 0/1 column per level
  (``name=level``). The level lists come from the R factor, not from the rows present, so
  every split has the same columns.
* **missing values**: rows with a missing target are dropped; rows with any missing feature
  are dropped too (``missing="drop"``, the default), and the count is reported. The
  alternative ``missing="indicator"`` keeps the rows, leaves a gap NaN and adds a
  ``name_missing`` 0/1 column that flags it (an unordered factor's gap is all-zero level
  columns). Nothing is filled here: the table is encoded before it is split, so a column
  median would carry the test rows' and every client's values into the rows of the others;
  the federation fills the gaps after the split with U's medians
  (``make_federation(missing="public-median")``). The four classification tables
  (LetterRecognition, Shuttle, DNA, Vehicle) have no gaps; of the regression tables
  (BostonHousing, Ozone, Servo) only Ozone has, and uses ``missing="indicator"`` (V9 alone
  lacks 139 of 366 values: dropping would lose 40%).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.core.errors import DatasetNotFetchedError, FedLabelsError
from fedlabels.downloads.cache import dataset_dir
from fedlabels.downloads.fetch import DebSource, check_fetched

if TYPE_CHECKING:
    import pandas as pd

CACHE_NAME = "mlbench"
_DATA = "usr/lib/R/site-library/mlbench/data"


@dataclass(frozen=True)
class MlbenchTable:
    """One registered mlbench table."""

    name: str  # fedlabels dataset name
    rda: str  # R object / file name
    target: str
    description: str
    defaults: dict[str, int | None]
    task: str = "classification"  # "regression": a numeric target
    missing: str = "drop"  # the missing-value policy of encode_table


TABLES: dict[str, MlbenchTable] = {t.name: t for t in (
    MlbenchTable("letter", "LetterRecognition", "lettr",
                 "UCI Letter Recognition, 20,000 x 16, 26 classes",
                 {"n_unlabeled": 1000, "n_private": 1000, "n_test": 2000}),
    MlbenchTable("shuttle", "Shuttle", "Class",
                 "UCI Statlog Shuttle, 58,000 x 9, 7 classes (very imbalanced)",
                 {"n_unlabeled": 1000, "n_private": 500, "n_test": 2000}),
    MlbenchTable("dna", "DNA", "Class",
                 "UCI Statlog DNA splice junctions, 3,186 x 180 binary, 3 classes",
                 {"n_unlabeled": 1000, "n_private": 500, "n_test": 1000}),
    MlbenchTable("vehicle", "Vehicle", "Class",
                 "UCI Statlog Vehicle silhouettes, 846 x 18, 4 classes",
                 {"n_unlabeled": 400, "n_private": 250, "n_test": 196}),
    # regression tables: numeric targets
    MlbenchTable("BostonHousing", "BostonHousing", "medv",
                 "Boston housing, 506 x 13, regression (median home value, $1000s)",
                 {"n_unlabeled": 200, "n_private": None, "n_test": 100}, task="regression"),
    MlbenchTable("Ozone", "Ozone", "V4",
                 "LA ozone 1976, 361 days x 12 (month, day, weekday one-hot: 66 features), "
                 "regression (daily max ozone); a gap is U's median beside a _missing 0/1 column",
                 {"n_unlabeled": 140, "n_private": None, "n_test": 72}, task="regression",
                 missing="indicator"),
    MlbenchTable("Servo", "Servo", "Class",
                 "Servo rise time, 167 x 4 factors (one-hot), regression",
                 {"n_unlabeled": 60, "n_private": None, "n_test": 33}, task="regression"),
)}

MLBENCH = DebSource(
    package="r-cran-mlbench",
    version="2.1-3-1",
    deb_size=1_049_188,
    files=tuple(f"{_DATA}/{t.rda}.rda" for t in TABLES.values()),
    marker="source.json",
)


def fetched_marker() -> Path:
    """The file whose presence means the mlbench package has been fetched."""
    return dataset_dir(CACHE_NAME) / MLBENCH.marker


def fetch_mlbench(from_deb: str | Path | None = None, log: Any = print) -> Path:
    """Fetch ``r-cran-mlbench`` once into the cache (all tables at once)."""
    from fedlabels.downloads.fetch import fetch_deb_dataset

    return fetch_deb_dataset(CACHE_NAME, MLBENCH, from_deb=from_deb, log=log)


def encode_table(frame: pd.DataFrame, target: str, missing: str = "drop",
                 log: Any = None, numeric_target: bool = False
                 ) -> tuple[pd.DataFrame, pd.Series]:
    """Explicit numeric encoding of a mixed-type table (see the module docstring).

    Parameters
    ----------
    frame : DataFrame
        Features and the target column; categoricals as pandas ``category`` dtype.
    target : str
        Name of the class column.
    missing : {"drop", "indicator"}
        Policy for missing feature values ("indicator": gaps stay NaN, flagged by a
        ``name_missing`` column, for the federation to fill after the split).
    log : callable, optional
        Receives a message when rows are dropped.
    numeric_target : bool
        Keep the target as float64 (a regression table) instead of class names.

    Returns
    -------
    X : DataFrame of float64, y : Series of class names (str), or floats
    """
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    if target not in frame.columns:
        raise FedLabelsError(f"table has no target column {target!r}; columns are "
                             f"{list(frame.columns)[:20]}.")
    if missing not in ("drop", "indicator"):
        raise FedLabelsError(f"missing must be 'drop' or 'indicator', got {missing!r}.")
    frame = frame[frame[target].notna()]
    features = frame.drop(columns=[target])
    n_dropped = 0
    if missing == "drop":
        keep = features.notna().all(axis=1).to_numpy()
        n_dropped = int((~keep).sum())
        frame, features = frame[keep], features[keep]
        if n_dropped and log is not None:
            log(f"dropped {n_dropped} rows with missing feature values")
    columns: dict[str, np.ndarray] = {}
    for name in features.columns:
        col = features[name]
        key = str(name)
        if isinstance(col.dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(col):
            cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
            levels = list(cat.cat.categories)
            codes = cat.cat.codes.to_numpy()  # -1 = missing
            if cat.cat.ordered:
                values = codes.astype(float)
                if (codes < 0).any():  # only with missing="indicator"
                    values[codes < 0] = np.nan  # filled after the split (U's median)
                    columns[f"{key}_missing"] = (codes < 0).astype(float)
                columns[key] = values
            elif len(levels) <= 2:
                columns[key] = (codes == len(levels) - 1).astype(float) if len(levels) == 2 \
                    else np.zeros(len(codes))
                if (codes < 0).any():
                    columns[key][codes < 0] = np.nan  # filled after the split (U's median)
                    columns[f"{key}_missing"] = (codes < 0).astype(float)
            else:
                for i, level in enumerate(levels):
                    columns[f"{key}={level}"] = (codes == i).astype(float)
        else:
            values = col.to_numpy(dtype=float, na_value=np.nan)
            gaps = np.isnan(values)
            if gaps.any():  # only with missing="indicator": left NaN, flagged
                columns[f"{key}_missing"] = gaps.astype(float)
            columns[key] = values
    X = pd.DataFrame(columns, index=features.index)
    y = frame[target].astype(float if numeric_target else str).rename(target)
    if not numeric_target and isinstance(frame[target].dtype, pd.CategoricalDtype):
        # the factor's levels are the table's declared classes (fedlabels.data.classes)
        levels = [str(level) for level in frame[target].cat.categories]
        y = y.astype(pd.CategoricalDtype(levels))
    return X.reset_index(drop=True), y.reset_index(drop=True)


def read_table(table: MlbenchTable, root: Path | None = None) -> pd.DataFrame:
    """Read one ``.rda`` file of the fetched package as a DataFrame."""
    root = root if root is not None else dataset_dir(CACHE_NAME)
    if not (root / MLBENCH.marker).exists():
        raise DatasetNotFetchedError(
            f"dataset {table.name!r} has not been fetched yet; run `fedlabels fetch "
            f"{table.name}` (or `fedlabels fetch mlbench`) once: it downloads Debian's "
            f"{MLBENCH.package} package (about 1 MB, all mlbench tables) into {root}.")
    path = check_fetched(root, MLBENCH.marker, f"{table.rda}.rda")
    if not path.is_file():
        raise FedLabelsError(f"{path} is missing from the mlbench cache; delete {root} and "
                             "fetch again.")
    try:
        import rdata
    except ImportError:
        raise FedLabelsError("reading mlbench tables needs the 'rdata' package; install the "
                             "tabular extra: pip install 'fedlabels[tabular]'.") from None
    with warnings.catch_warnings():  # "Unknown encoding. Assumed ASCII." is harmless
        warnings.simplefilter("ignore")
        data = rdata.read_rda(path)
    try:
        return data[table.rda]
    except KeyError:
        raise FedLabelsError(f"{path} holds {list(data)}, not {table.rda!r}.") from None


def load_table(name: str, root: Path | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """Encoded features and class names of a registered mlbench table."""
    table = TABLES[name]
    return encode_table(read_table(table, root), table.target, table.missing,
                        numeric_target=table.task == "regression")
