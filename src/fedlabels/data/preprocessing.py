"""How a federation turned raw features into the models' inputs (:class:`Preprocessing`).

Recorded with a run's models so that new raw rows can be prepared the same way
(:mod:`fedlabels.results.predict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.core.errors import FedLabelsError

if TYPE_CHECKING:
    from fedlabels.data.public_pca import PublicPCA


def categorical_columns(frame: Any) -> list[str]:
    """Columns of a DataFrame that are one-hot encoded: non-numeric or categorical dtype."""
    import pandas as pd

    return [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])
            or isinstance(frame[c].dtype, pd.CategoricalDtype)]


def categories_not_in_public(frame: Any, public_rows: np.ndarray) -> list[str]:
    """The one-hot columns of ``frame``'s categorical columns whose category no row of U
    (``public_rows``) holds: the encoding is fitted on U, which is public, so a category
    that only the test set or a client holds is no column (those rows encode it as none,
    all zeros). A pandas ``Categorical``'s declared categories all stay (schema, not data)."""
    import pandas as pd

    fitted = [c for c in categorical_columns(frame)
              if not isinstance(frame[c].dtype, pd.CategoricalDtype)]
    if not fitted:
        return []
    part = frame[fitted]
    every = pd.get_dummies(part, columns=fitted, dtype=float).columns
    public = set(pd.get_dummies(part.iloc[public_rows], columns=fitted, dtype=float).columns)
    return [str(c) for c in every if c not in public]


@dataclass(frozen=True)
class Preprocessing:
    """Raw features -> model inputs, as the federation did it."""

    feature_names: Sequence[str]
    class_names: list[str]
    columns: list[str] | None = None  # the raw input columns (None: array input)
    categorical: tuple[str, ...] = ()  # raw columns one-hot encoded into feature_names
    mean: np.ndarray | None = None  # z-scoring statistics of U (None: not scaled)
    std: np.ndarray | None = None
    text: bool = False  # text input: feature_names[0] names the text column
    # U's whitened top-K principal components, applied after the z-scoring (public_pca;
    # the models' inputs are then pc1..pcK, feature_names stay the d columns before it)
    pca: PublicPCA | None = None
    # numpy dtype of the original labels (``np.dtype.str``), so predictions come back as
    # the same type as ``y`` (ints for ints, strings for strings); None: strings
    label_dtype: str | None = None
    # images read from files: how (fedlabels.data.images.image_input), so that new images,
    # or their paths, are read alike; None: the rows are the inputs
    image: dict[str, Any] | None = None
    # a regression run: the public target range [lo, hi] whose unit scale the models
    # predict on, so predictions go back to the target's units; None: classification
    target_range: tuple[float, float] | None = None
    # missing="public-median": per feature, the value a gap (NaN) becomes, U's median of
    # the column (NaN: a column without gaps, which stays an error); None: no gaps filled
    fill: np.ndarray | None = None

    @classmethod
    def of(cls, X: Any, feature_names: Sequence[str], class_names: Sequence[str],
           mean: np.ndarray | None, std: np.ndarray | None,
           text: bool = False, pca: PublicPCA | None = None,
           label_dtype: str | None = None,
           target_range: tuple[float, float] | None = None,
           fill: np.ndarray | None = None) -> Preprocessing:
        """The preprocessing of raw ``X`` (an array or a DataFrame) into ``feature_names``."""
        import pandas as pd

        is_frame = isinstance(X, pd.DataFrame)
        if text:
            return cls(feature_names=_names(feature_names),
                       class_names=[str(c) for c in class_names], text=True,
                       label_dtype=label_dtype, target_range=target_range)
        return cls(feature_names=_names(feature_names),
                   class_names=[str(c) for c in class_names],
                   columns=[str(c) for c in X.columns] if is_frame else None,
                   categorical=tuple(str(c) for c in categorical_columns(X)) if is_frame else (),
                   mean=None if mean is None else np.asarray(mean, dtype=np.float64),
                   std=None if std is None else np.asarray(std, dtype=np.float64), pca=pca,
                   label_dtype=label_dtype, target_range=target_range,
                   fill=None if fill is None else np.asarray(fill, dtype=np.float64))

    def class_values(self) -> np.ndarray:
        """The class labels as the type of the original ``y`` (``class_names`` are text)."""
        return class_values(self.class_names, self.label_dtype)

    def transform(self, X_raw: Any, what: str = "the data") -> np.ndarray:
        """Raw rows -> the float32 model inputs (unknown categories encode as all zeros, with
        a warning naming the column; ``what`` names the rows in errors);
        for a run on image files, images (files, a folder, a table's image column or pixel
        rows: :func:`fedlabels.data.images.new_image_rows`)."""
        if self.text:
            from fedlabels.data.text import text_rows

            return text_rows(X_raw, self.feature_names[0])
        X = self.encode(X_raw, what)
        if self.mean is not None and self.std is not None:
            X = (X - self.mean) / self.std
        if self.pca is not None:
            X = self.pca.project(X)
        return X.astype(np.float32)

    def encode(self, X_raw: Any, what: str = "the data") -> np.ndarray:
        """Raw rows -> ``feature_names`` as float64, one-hot encoded as the training rows
        were (their columns by name, in any order; unknown categories as all zeros, with a
        warning at the user's call), before any scaling; ``what`` names the rows in errors."""
        import pandas as pd

        if self.image is not None:
            from fedlabels.data.images import new_image_rows

            X = new_image_rows(self.image, X_raw)
        elif self.columns is not None:
            if isinstance(X_raw, pd.DataFrame):  # names as recorded: pd.DataFrame(a)'s 0 is "0"
                frame = X_raw
            else:
                frame = pd.DataFrame(self._rows(X_raw, len(self.columns)),
                                     columns=self.columns)
            X = encode_frame(frame, self.columns, self.categorical, self.feature_names, what,
                             filled=self.fill is not None)
        else:
            rows = self._rows(X_raw, len(self.feature_names))
            X = _floats(lambda: rows.astype(np.float64))
        if len(X) == 0:
            raise FedLabelsError(f"{what} has no rows; give at least one row to predict.")
        if self.fill is not None and X.shape[1] == len(self.fill):  # as the training rows
            from fedlabels.data.gaps import fill_gaps

            X = fill_gaps(X, self.fill)
        finite = np.isfinite(X)
        if not finite.all():
            names = self.feature_names if X.shape[1] == len(self.feature_names) else None
            cols = np.flatnonzero(~finite.all(axis=0))
            rows = np.flatnonzero(~finite.all(axis=1))
            where = ", ".join(repr(names[c]) if names else f"#{c}" for c in cols[:5])
            raise FedLabelsError(f"{what} has missing or non-finite values in column(s) "
                                 f"{where}{' ...' if len(cols) > 5 else ''} (rows "
                                 f"{', '.join(str(r) for r in rows[:5])}"
                                 f"{' ...' if len(rows) > 5 else ''}; counting from 0); impute "
                                 "or drop them first.")
        return X

    @staticmethod
    def _rows(X_raw: Any, n_columns: int) -> np.ndarray:
        """Raw array rows as a 2-D array of ``n_columns`` columns, or a one-line error."""
        import pandas as pd

        if isinstance(X_raw, pd.Series):  # df.iloc[0]: one row, 1-D
            raise FedLabelsError("the data is a pandas Series (1-D); pass a DataFrame of rows: "
                                 "one row as df.iloc[[i]] (double brackets) or "
                                 "row.to_frame().T.")
        if type(X_raw).__module__.startswith("scipy.sparse"):
            raise FedLabelsError("the data is a scipy sparse matrix; pass dense rows, "
                                 "X.toarray().")
        if hasattr(X_raw, "clients") and type(X_raw).__name__ == "Federation":
            raise FedLabelsError("the data is a Federation; predict takes raw rows laid out "
                                 "like the training data (a DataFrame or an array).")
        X = np.asarray(X_raw)
        if X.ndim == 1 and len(X) == n_columns and n_columns > 1:
            raise FedLabelsError(f"the data is one row as a 1-D array of {n_columns} values; "
                                 "pass a 2-D array, e.g. X.reshape(1, -1).")
        if X.ndim != 2 or X.shape[1] != n_columns:
            raise FedLabelsError(f"the data must be 2-D with {n_columns} feature columns "
                                 f"(the training data's); got shape {X.shape}.")
        return X

    def to_dict(self) -> dict[str, Any]:
        from fedlabels.data.pixel_names import names_record

        return {"feature_names": names_record(self.feature_names),
                "class_names": self.class_names,
                "label_dtype": self.label_dtype,
                "columns": self.columns, "categorical": list(self.categorical),
                "mean": None if self.mean is None else self.mean.tolist(),
                "std": None if self.std is None else self.std.tolist(), "text": self.text,
                **({"pca": self.pca.to_dict()} if self.pca is not None else {}),
                **({"image": self.image} if self.image is not None else {}),
                **({"target_range": list(self.target_range)}
                   if self.target_range is not None else {}),
                **({"fill": [None if np.isnan(v) else float(v) for v in self.fill]}
                   if self.fill is not None else {})}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocessing:
        from fedlabels.data.pixel_names import names_of_record
        from fedlabels.data.public_pca import PublicPCA

        return cls(feature_names=names_of_record(data["feature_names"]),
                   class_names=list(data["class_names"]), columns=data.get("columns"),
                   categorical=tuple(data.get("categorical") or ()),
                   mean=None if data.get("mean") is None else np.asarray(data["mean"]),
                   std=None if data.get("std") is None else np.asarray(data["std"]),
                   text=bool(data.get("text", False)), label_dtype=data.get("label_dtype"),
                   pca=None if data.get("pca") is None else PublicPCA.from_dict(data["pca"]),
                   image=None if data.get("image") is None else dict(data["image"]),
                   target_range=None if data.get("target_range") is None else
                   (float(data["target_range"][0]), float(data["target_range"][1])),
                   fill=None if data.get("fill") is None else
                   np.array([np.nan if v is None else v for v in data["fill"]], dtype=float))


def _names(feature_names: Sequence[str]) -> Sequence[str]:
    """Feature names as text; pixel names as they are (made when read)."""
    from fedlabels.data.pixel_names import PixelNames

    return feature_names if isinstance(feature_names, PixelNames) else \
        [str(f) for f in feature_names]


def label_dtype(y: Any) -> str:
    """The numpy dtype of labels ``y`` as text (``int64``, ``<U3``, ``|O``, ...); a
    categorical's labels have its categories' type (ints for ``[3, 7, 9]``, text (object)
    for strings), so that predictions compare equal to ``y``."""
    import pandas as pd

    values = y.to_numpy() if isinstance(y, pd.Series) else np.asarray(y)  # a categorical:
    return values.dtype.str  # its categories' values (strings come out as objects)


def class_values(class_names: Sequence[str], dtype: str | None) -> np.ndarray:
    """``class_names`` (text) converted back to the labels' own type ``dtype``."""
    if dtype is None:
        return np.asarray(class_names, dtype=object)
    kind = np.dtype(dtype).kind
    if kind in "iu":
        return np.asarray([int(c) for c in class_names], dtype=dtype)
    if kind == "f":
        return np.asarray([float(c) for c in class_names], dtype=dtype)
    if kind == "b":
        return np.asarray([c == "True" for c in class_names], dtype=bool)
    if kind in "US":
        return np.asarray(class_names, dtype=str)
    return np.asarray(class_names, dtype=object)


#: whose columns new rows lack, in :func:`lacks_columns`' error: ``predict``'s
TRAINED_ON = "the models were trained on"
#: a Flower site's: its rows are read before any model exists
SHARED_U_HAS = "columns of the shared public set U"


def encode_frame(frame: Any, columns: Sequence[str], categorical: Sequence[str],
                 feature_names: Sequence[str], what: str = "the data",
                 filled: bool = False, of: str = TRAINED_ON) -> np.ndarray:
    """A table's raw ``columns`` (by name, in any order) as ``feature_names`` (float64, gaps
    NaN): the ``categorical`` ones one-hot encoded with the categories ``feature_names``
    name, so that a category they lack encodes as none (all zeros, with a warning at the
    user's call). How ``predict`` and a site's CSV rows are read; ``filled``: the run fills
    a numeric gap with U's median (``missing="public-median"``), as a missing column's
    error says; ``of``: whose columns they are, in that error (:func:`lacks_columns`)."""
    import pandas as pd

    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise FedLabelsError(lacks_columns(what, missing, columns, categorical, filled, of))
    given = list(frame.columns)
    twice = [c for c in columns if given.count(c) > 1]
    if twice:  # frame[c] would be a table of both, and the rows unreadable
        raise FedLabelsError(f"{what} names column(s) {', '.join(map(repr, twice))} "
                             "more than once; give each column its own name.")
    frame = frame[list(columns)]
    cats = list(categorical)
    _check_new_columns(frame, cats, what)
    _warn_unseen_categories(frame, cats, feature_names)
    if cats:
        frame = pd.get_dummies(frame.astype({c: str for c in cats}), columns=cats,
                               dtype=float)
    frame = frame.reindex(columns=list(feature_names), fill_value=0.0)
    return _floats(lambda: frame.to_numpy(dtype=np.float64, na_value=np.nan))


def lacks_columns(what: str, missing: Sequence[str], columns: Sequence[str],
                  categorical: Sequence[str], filled: bool, of: str = TRAINED_ON) -> str:
    """The one-line error for rows without some of the training ``columns`` (``predict``'s
    and a Flower site's CSV): the missing ones, every expected one (the first 20 and the
    count), and whether an empty cell of the added column is filled as in training
    (``filled``: U's median) or refused."""
    listed = ", ".join(repr(c) for c in columns[:20]) + (
        f", ... ({len(columns)} in all)" if len(columns) > 20 else "")
    numeric = [c for c in missing if c not in categorical]
    if filled and numeric:
        cells = ("an empty cell of a numeric column is filled with U's median of it, as the "
                 "run's missing='public-median' filled the training rows (a categorical "
                 "column needs a value in every row)")
    elif filled:
        cells = "a categorical column needs a value in every row"
    else:
        cells = ("every row needs a value in it: the run filled no gaps (missing='refuse'), "
                 "so an empty cell is refused")
    return (f"{what} lacks column(s) {', '.join(map(repr, missing[:5]))}"
            f"{' ...' if len(missing) > 5 else ''} ({len(missing)} of the {len(columns)} "
            f"{of}: {listed}); add {'it' if len(missing) == 1 else 'them'} "
            f"under {'that name' if len(missing) == 1 else 'those names'}: {cells}.")


def _check_new_columns(frame: Any, categorical: list[str], what: str) -> None:
    """A one-line error naming the columns of new rows the models cannot read: a missing
    category (it would encode as an unknown one, all zeros, silently), or text in a column
    the models read as numbers (:func:`~fedlabels.data.columns.check_numbers`)."""
    from fedlabels.data.columns import check_numbers

    if categorical:
        missing = frame[categorical].isna().sum()
        missing = missing[missing > 0]
        if len(missing):
            named = ", ".join(f"{c!r} ({n})" for c, n in missing.items())
            raise FedLabelsError(f"the data has missing values in categorical column(s) "
                                 f"{named}; impute or drop them first.")
    check_numbers(frame, [c for c in frame.columns if c not in categorical], what)


def _warn_unseen_categories(frame: Any, categorical: list[str],
                            feature_names: Sequence[str]) -> None:
    """Warn, naming the column, where new rows hold categories the training data had not:
    they encode as all zeros (as no category). A column of numbers where training had text
    codes ('01', '02') is the usual cause: read the column as text."""
    import warnings

    import pandas as pd

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    for column in categorical:
        prefix = f"{column}_"
        known = {f[len(prefix):] for f in feature_names if f.startswith(prefix)}
        values = frame[column].astype(str)
        unseen = sorted(set(values) - known)
        if not unseen:
            continue
        hint = ("; the column holds numbers where training had text codes: read it as text "
                f"(pandas: dtype={{{column!r}: str}})"
                if pd.api.types.is_numeric_dtype(frame[column]) else "")
        shown = ", ".join(repr(v) for v in unseen[:5]) + (" ..." if len(unseen) > 5 else "")
        warnings.warn(FedLabelsWarning(
            f"column {column!r}: {int(values.isin(unseen).sum())} of {len(values)} rows hold "
            f"categories not seen in training ({shown}); they encode as no category "
            f"(all zeros){hint}."), stacklevel=user_stacklevel())


def _floats(convert: Any) -> np.ndarray:
    try:
        return np.asarray(convert())
    except (TypeError, ValueError) as exc:
        raise FedLabelsError(f"the data has non-numeric values where the models expect "
                             f"numbers ({exc}).") from None
