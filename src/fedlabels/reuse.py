"""Apply a finished run's client models to new raw data.

A federation records how it turned raw features into the models' inputs
(:class:`Preprocessing`: the input columns, which were one-hot encoded, the resulting feature
names, the z-scoring statistics of the public set U, U's principal components when the run
projected onto them (``public_pca``), the class names). ``fedlabels run``
saves it with the clients' models beside the result (``X.models.npz``), so that::

    result = fl.run("fedct", "csv:patients.csv:outcome", model="dt")
    labels = result.predict(new_rows)                 # majority vote of the clients
    labels = result.predict(new_rows, client=2)       # one client's model

or ``fedlabels predict result.json new.csv -o predictions.csv`` gives labels in the
original label names for rows of raw data laid out like the training table.

The models file is plain arrays and data (:mod:`fedlabels.model_files`): loading it builds
only the model types fedlabels writes and never runs code from the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.errors import FedLabelsError

if TYPE_CHECKING:
    from fedlabels.data.public_pca import PublicPCA


def categorical_columns(frame: Any) -> list[str]:
    """Columns of a DataFrame that are one-hot encoded: non-numeric or categorical dtype."""
    import pandas as pd

    return [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])
            or isinstance(frame[c].dtype, pd.CategoricalDtype)]


@dataclass(frozen=True)
class Preprocessing:
    """Raw features -> model inputs, as the federation did it."""

    feature_names: list[str]
    class_names: list[str]
    columns: list[str] | None = None  # the raw input columns (None: array input)
    categorical: tuple[str, ...] = ()  # raw columns one-hot encoded into feature_names
    mean: np.ndarray | None = None  # z-scoring statistics of U (None: not scaled)
    std: np.ndarray | None = None
    text: bool = False  # text input (issue 18): feature_names[0] names the text column
    # U's whitened top-K principal components, applied after the z-scoring (public_pca;
    # the models' inputs are then pc1..pcK, feature_names stay the d columns before it)
    pca: PublicPCA | None = None

    @classmethod
    def of(cls, X: Any, feature_names: Sequence[str], class_names: Sequence[str],
           mean: np.ndarray | None, std: np.ndarray | None,
           text: bool = False, pca: PublicPCA | None = None) -> Preprocessing:
        """The preprocessing of raw ``X`` (an array or a DataFrame) into ``feature_names``."""
        import pandas as pd

        is_frame = isinstance(X, pd.DataFrame)
        if text:
            return cls(feature_names=[str(f) for f in feature_names],
                       class_names=[str(c) for c in class_names], text=True)
        return cls(feature_names=[str(f) for f in feature_names],
                   class_names=[str(c) for c in class_names],
                   columns=[str(c) for c in X.columns] if is_frame else None,
                   categorical=tuple(str(c) for c in categorical_columns(X)) if is_frame else (),
                   mean=None if mean is None else np.asarray(mean, dtype=np.float64),
                   std=None if std is None else np.asarray(std, dtype=np.float64), pca=pca)

    def transform(self, X_raw: Any) -> np.ndarray:
        """Raw rows -> the float32 model inputs (unknown categories encode as all zeros)."""
        import pandas as pd

        if self.text:
            from fedlabels.data.text import text_rows

            return text_rows(X_raw, self.feature_names[0])

        if self.columns is not None:
            frame = X_raw if isinstance(X_raw, pd.DataFrame) else pd.DataFrame(
                np.asarray(X_raw), columns=self.columns)
            missing = [c for c in self.columns if c not in frame.columns]
            if missing:
                raise FedLabelsError(f"the data lacks column(s) {', '.join(missing[:5])} the "
                                     f"models were trained on ({len(self.columns)} columns).")
            frame = frame[self.columns]
            cats = list(self.categorical)
            if cats:
                frame = pd.get_dummies(frame.astype({c: str for c in cats}), columns=cats,
                                       dtype=float)
            frame = frame.reindex(columns=self.feature_names, fill_value=0.0)
            X = _floats(lambda: frame.to_numpy(dtype=np.float64, na_value=np.nan))
        else:
            X = _floats(lambda: np.asarray(X_raw, dtype=np.float64))
            if X.ndim != 2 or X.shape[1] != len(self.feature_names):
                raise FedLabelsError(f"the data must have {len(self.feature_names)} feature "
                                     f"columns; got shape {X.shape}.")
        if not np.isfinite(X).all():
            raise FedLabelsError("the data contains missing or non-finite values; impute or "
                                 "drop them first.")
        if self.mean is not None and self.std is not None:
            X = (X - self.mean) / self.std
        if self.pca is not None:
            X = self.pca.project(X)
        return X.astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"feature_names": self.feature_names, "class_names": self.class_names,
                "columns": self.columns, "categorical": list(self.categorical),
                "mean": None if self.mean is None else self.mean.tolist(),
                "std": None if self.std is None else self.std.tolist(), "text": self.text,
                **({"pca": self.pca.to_dict()} if self.pca is not None else {})}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocessing:
        from fedlabels.data.public_pca import PublicPCA

        return cls(feature_names=list(data["feature_names"]),
                   class_names=list(data["class_names"]), columns=data.get("columns"),
                   categorical=tuple(data.get("categorical") or ()),
                   mean=None if data.get("mean") is None else np.asarray(data["mean"]),
                   std=None if data.get("std") is None else np.asarray(data["std"]),
                   text=bool(data.get("text", False)),
                   pca=None if data.get("pca") is None else PublicPCA.from_dict(data["pca"]))


def _floats(convert: Any) -> np.ndarray:
    try:
        return np.asarray(convert())
    except (TypeError, ValueError) as exc:
        raise FedLabelsError(f"the data has non-numeric values where the models expect "
                             f"numbers ({exc}).") from None


def predict_codes(models: Sequence[Any], X: np.ndarray, n_classes: int,
                  client: int | None = None) -> np.ndarray:
    """Class codes from one client's model, or the majority vote of all (ties: lowest)."""
    if not models:
        raise FedLabelsError("this run has no client models to predict with.")
    if client is not None:
        if not 0 <= client < len(models):
            raise FedLabelsError(f"client {client} does not exist; this run has clients "
                                 f"0..{len(models) - 1}.")
        return np.asarray(models[client].predict(X), dtype=np.int64)
    votes = np.zeros((len(X), n_classes), dtype=np.int64)
    for model in models:
        codes = np.asarray(model.predict(X), dtype=np.int64)
        votes[np.arange(len(X)), codes] += 1
    return votes.argmax(axis=1)


def predict(models: Sequence[Any], preprocessing: Preprocessing | None, X_raw: Any,
            client: int | None = None) -> np.ndarray:
    """Labels (the original class names) that ``models`` give the raw rows ``X_raw``."""
    if preprocessing is None:
        raise FedLabelsError("this run has no stored preprocessing (a run loaded from JSON "
                             "alone, or from an older version): predict from the result path "
                             "so the saved models and preprocessing are read.")
    if not preprocessing.class_names:  # a regression run (issue 16): no classes to vote on
        raise FedLabelsError("predicting with the models of a regression run is not "
                             "supported yet; only classification runs can be reused.")
    X = preprocessing.transform(X_raw)
    codes = predict_codes(models, X, len(preprocessing.class_names), client)
    return np.asarray(preprocessing.class_names, dtype=object)[codes]


def predict_file(result_path: str | Path, data_path: str | Path,
                 client: int | None = None) -> Any:
    """``fedlabels predict``: the rows of a CSV file with a ``prediction`` column added.

    The CSV has the training table's columns (more are kept but not used, e.g. the label).
    """
    import pandas as pd

    from fedlabels.interpret import load_models

    payload = load_models(result_path)
    if payload.get("preprocessing") is None:
        raise FedLabelsError(f"{result_path}: its models file stores no preprocessing (written "
                             "by an older version); rerun to predict with it.")
    prep = Preprocessing.from_dict(payload["preprocessing"])
    try:
        frame = pd.read_csv(data_path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or " ".join(str(exc).split())
        raise FedLabelsError(f"cannot read CSV file {data_path}: {reason}.") from None
    if prep.columns is None and not prep.text:  # trained on an array: every column is one
        features: Any = frame.to_numpy()
    else:
        features = frame
    return frame.assign(prediction=predict(payload["models"], prep, features, client))
