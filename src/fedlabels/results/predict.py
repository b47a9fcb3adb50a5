"""Apply a finished run's client models to new raw data.

A federation records how it turned raw features into the models' inputs
(:class:`Preprocessing`: the input columns, which were one-hot encoded, the resulting feature
names, the z-scoring statistics of the public set U, U's principal components when the run
projected onto them (``public_pca``), the class names). ``fedlabels run``
saves it with the clients' models beside the result (``X.models.npz``), so that::

    result = fl.run("fedct", "csv:patients.csv:outcome", model="dt")
    labels = result.predict(new_rows)                 # majority vote of the clients
    labels = result.predict(new_rows, client=2)       # one client's model
    targets = reg_result.predict(new_rows)            # regression: median, target's units

or ``fedlabels predict result.json new.csv -o predictions.csv`` gives labels in the
original label names for rows of raw data laid out like the training table.

The models file is plain arrays and data (:mod:`fedlabels.results.model_format`): loading it
builds only the model types fedlabels writes and never runs code from the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError, missing_column
from fedlabels.data.federation import IntLike
from fedlabels.data.preprocessing import Preprocessing


def predict_codes(models: Sequence[Any], X: np.ndarray, n_classes: int,
                  client: IntLike | None = None) -> np.ndarray:
    """Class codes from one client's model, or the majority vote of all (ties: lowest):
    the argmax of :func:`vote_shares`, computed from the same counts."""
    return _votes(models, X, n_classes, client).argmax(axis=1)


def vote_shares(models: Sequence[Any], X: np.ndarray, n_classes: int,
                client: IntLike | None = None) -> np.ndarray:
    """Each row's share of the clients whose model predicts each class (rows sum to 1;
    ``client``: that client's vote, one 1 per row). Their argmax, ties to the lowest code,
    is :func:`predict_codes`."""
    votes = _votes(models, X, n_classes, client)
    return votes / votes.sum(axis=1, keepdims=True)


def _votes(models: Sequence[Any], X: np.ndarray, n_classes: int,
           client: IntLike | None) -> np.ndarray:
    """How many of the chosen clients' models predict each class, per row."""
    client = _check_client(models, client)
    chosen = models if client is None else [models[client]]
    votes = np.zeros((len(X), n_classes), dtype=np.int64)
    for model in chosen:
        codes = np.asarray(model.predict(X), dtype=np.int64)
        votes[np.arange(len(X)), codes] += 1
    return votes


def predict_targets(models: Sequence[Any], target_range: tuple[float, float], X: np.ndarray,
                    client: IntLike | None = None) -> np.ndarray:
    """A regression run's predictions in the target's units: one client's model, or the
    median over the clients (FedCT's default consensus; the mean for an even number of
    clients is that of the two middle values). The models predict on the unit scale
    ``(y - lo) / (hi - lo)`` of the run's public target range."""
    client = _check_client(models, client)
    chosen = models if client is None else [models[client]]
    unit = np.median([np.asarray(m.predict(X), dtype=np.float64).ravel() for m in chosen],
                     axis=0)
    lo, hi = target_range
    return lo + (hi - lo) * unit


def _check_client(models: Sequence[Any], client: Any) -> int | None:
    """Refuse a run without models; ``client`` as :func:`client_index` reads it."""
    if not models:
        raise FedLabelsError("this run has no client models to predict with.")
    return client_index(client, len(models))


def client_index(client: Any, n_clients: int) -> int | None:
    """``client`` (a Python or numpy integer; ``None``: all clients) as the index of one of
    the run's ``n_clients`` clients, or a one-line error: a float, text or ``True`` named
    no client (``True`` was client 1, ``"1"`` a TypeError)."""
    if client is None:
        return None
    if isinstance(client, bool) or not isinstance(client, int | np.integer):
        raise FedLabelsError(f"client must be a client's index, an integer 0..{n_clients - 1} "
                             f"(or None for all clients), got {client!r}.")
    if not 0 <= client < n_clients:
        raise FedLabelsError(f"client {client} does not exist; this run has clients "
                             f"0..{n_clients - 1}.")
    return int(client)


def predict(models: Sequence[Any], preprocessing: Preprocessing | None, X_raw: Any,
            client: IntLike | None = None, what: str = "the data") -> np.ndarray:
    """Labels that ``models`` give the raw rows ``X_raw``, as the type of the training
    labels (ints for ints, strings for strings); for a regression run, predicted targets
    in the target's units (:func:`predict_targets`). ``what`` names the rows in errors."""
    _check_preprocessing(preprocessing)
    assert preprocessing is not None
    if preprocessing.target_range is not None:
        return predict_targets(models, preprocessing.target_range,
                               preprocessing.transform(X_raw, what), client)
    X = preprocessing.transform(X_raw, what)
    codes = predict_codes(models, X, len(preprocessing.class_names), client)
    return preprocessing.class_values()[codes]


def predict_proba(models: Sequence[Any], preprocessing: Preprocessing | None, X_raw: Any,
                  client: IntLike | None = None) -> np.ndarray:
    """The clients' vote shares (:func:`vote_shares`) on the raw rows ``X_raw``, one column
    per class in the order of ``preprocessing.class_values()``; a regression run has none."""
    _check_preprocessing(preprocessing)
    assert preprocessing is not None
    if preprocessing.target_range is not None:
        raise FedLabelsError("a regression run has no predict_proba; result.predict(X) gives "
                             "its targets.")
    return vote_shares(models, preprocessing.transform(X_raw),
                       len(preprocessing.class_names), client)


def _check_preprocessing(preprocessing: Preprocessing | None) -> None:
    """Refuse a run that cannot turn raw rows into its models' inputs."""
    if preprocessing is None:
        raise FedLabelsError("this run has no stored preprocessing (a run loaded from JSON "
                             "alone, or from an older version): predict from the result path "
                             "so the saved models and preprocessing are read (in Python "
                             "fl.load_run(PATH), not models=False).")
    if preprocessing.target_range is None and not preprocessing.class_names:
        # a regression run saved without its target range
        raise FedLabelsError("this regression run's models file stores no target range "
                             "(written by an older version); rerun to predict with it.")


def predict_file(result_path: str | Path, data_path: str | Path,
                 client: IntLike | None = None, sep: str | None = None,
                 image_column: str | None = None,
                 trust_modules: Sequence[str] = ()) -> Any:
    """``fedlabels predict``: the rows of a CSV file with a ``prediction`` column added.

    The CSV has the training table's columns (more are kept but not used, e.g. the label),
    separated by ``sep`` (default: the run's ``sep``, else ``,``); its categorical columns are
    read as text, as training read them (``01`` stays ``01``, not the number 1);
    for a run on image files, its image column's paths are relative to the CSV's folder:
    ``image_column``, else the run's image column, else the table's one text column.
    A run on images also takes a folder of images (sub-folders too) or one image file: one
    row per image, its ``path`` and ``prediction``. ``trust_modules``: the modules whose
    network factories may be imported to rebuild your own network (``--trust-module``).
    """
    import pandas as pd

    from fedlabels.core.files import refuse_special_file
    from fedlabels.results.models_file import load_models

    data = Path(data_path)
    refuse_special_file(data, "data")
    payload = load_models(result_path, trust_modules)
    if payload.get("preprocessing") is None:
        raise FedLabelsError(f"{result_path}: its models file stores no preprocessing (written "
                             "by an older version); rerun to predict with it.")
    try:
        prep = Preprocessing.from_dict(payload["preprocessing"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        raise FedLabelsError(f"{result_path}: its models file's preprocessing is malformed; "
                             "re-run the run to write it again.") from None
    if image_column is not None:
        _check_image_column(prep, data)
    if prep.image is not None and (data.is_dir() or data.suffix.lower() != ".csv"):
        from fedlabels.data.images import image_paths

        files = image_paths(data, prep.image)
        assert files is not None  # a path names files
        return pd.DataFrame({"path": [str(f) for f in files],
                             "prediction": _predicted(payload, prep, files, client,
                                                      result_path, str(data))})
    sep = sep or run_sep(result_path) or ","
    from fedlabels.data.csv_table import TEXTS_AS_WRITTEN, refuse_repeated_columns

    try:
        as_str = {c: str for c in prep.categorical}
        if prep.text:  # the texts as written: '00123' stays '00123', not the number 123
            as_str[prep.feature_names[0]] = str
        frame = pd.read_csv(data_path, sep=sep, dtype=as_str or None,
                            **(TEXTS_AS_WRITTEN if prep.text else {}))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or " ".join(str(exc).split())
        raise FedLabelsError(f"cannot read CSV file {data_path}: {reason}.") from None
    numbers_only = (prep.columns is None and not prep.text) or prep.image is not None
    if numbers_only and _header_is_data(frame):  # no header line: its first row is data
        frame = pd.read_csv(data_path, header=None, sep=sep)
    else:  # pandas renamed a column named twice ('a.1'), as the training table refuses
        refuse_repeated_columns(frame, data, sep)
    if prep.columns is not None and len(frame.columns) == 1 and len(prep.columns) > 1:
        raise FedLabelsError(f"{data_path} reads as one column {str(frame.columns[0])[:40]!r} "
                             f"with separator {sep!r}; give its separator (--sep ';' "
                             "or --sep '\\t').")
    if prep.image is not None:
        spec = prep.image
        if image_column is not None:
            if image_column not in frame.columns:
                raise FedLabelsError(f"{data_path} {missing_column(image_column, frame.columns)}"
                                     ".")
            spec = {**spec, "column": image_column}
        features: Any = _images_of_table(frame, spec, data.parent)
    elif prep.columns is None and not prep.text:  # trained on an array: every column is one
        features = frame.to_numpy()
    else:
        features = frame
    labels = pd.Series(_predicted(payload, prep, features, client, result_path, str(data)),
                       index=frame.index, name="prediction")
    # as assign would (an input column "prediction" replaced), without its warning on a wide
    # table that read_csv left in one block per column
    return pd.concat([frame.drop(columns="prediction", errors="ignore"), labels], axis=1)


def _predicted(payload: dict[str, Any], prep: Preprocessing, features: Any,
               client: IntLike | None, result_path: str | Path,
               what: str = "the data") -> np.ndarray:
    """:func:`predict` with a models file's models (``what``: the rows, in errors). Loading
    checks what would crash or run code; a model that loads but cannot predict (a forged
    file's classes past the run's, an inconsistent support-vector model: an IndexError or
    ValueError) is one line naming the file, not a traceback."""
    try:
        return predict(payload["models"], prep, features, client, what)
    except FedLabelsError:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200]
        raise FedLabelsError(f"the models in {result_path} could not predict "
                             f"({type(exc).__name__}: {reason}); is its models file damaged? "
                             "Re-run the run to write it again.") from None


def _check_image_column(prep: Preprocessing, data: Path) -> None:
    """``image_column`` names a CSV table's column of image paths for a run on images (as
    ``fedlabels run`` takes it for a ``csv:`` table only)."""
    if prep.image is None:
        raise FedLabelsError("image_column applies to a run on images; this run's models take "
                             "the training table's columns: remove it.")
    if data.is_dir() or data.suffix.lower() != ".csv":
        raise FedLabelsError(f"image_column applies to a CSV table of image paths; {data} is "
                             f"{'a folder' if data.is_dir() else 'not a .csv file'}: remove "
                             "it.")


def run_sep(result_path: str | Path) -> str | None:
    """The field separator the run's table was read with (its configuration's ``sep``)."""
    sep = _result_field(result_path, "config", "sep")
    return sep if isinstance(sep, str) and sep else None


def run_task(result_path: str | Path) -> str:
    """The task of a run's federation (``classification`` when the result does not say)."""
    task = _result_field(result_path, "federation", "task")
    return task if task == "regression" else "classification"


def _result_field(result_path: str | Path, section: str, key: str) -> Any:
    """``result[section][key]`` of a result JSON, or None where it is missing or unreadable."""
    import json

    try:
        part = json.loads(Path(result_path).read_text()).get(section) or {}
    except (OSError, ValueError, AttributeError):
        return None
    return part.get(key) if isinstance(part, dict) else None


def _header_is_data(frame: Any) -> bool:
    """Whether ``frame``'s header is a row of numbers (not the column numbers ``0..n-1``
    that pandas writes for an unnamed array): a table without a header line."""
    names = [str(c).strip() for c in frame.columns]
    if names == [str(i) for i in range(len(names))]:
        return False
    try:
        # pandas renames a repeated cell "0.5" of the header to "0.5.1", "0.5.2", ...
        [float(n.rsplit(".", 1)[0] if n.count(".") > 1 else n) for n in names]
    except ValueError:
        return False
    return True


def _images_of_table(frame: Any, image: dict[str, Any], folder: Path) -> Any:
    """A table's images for a run on image files: its paths relative to the table's
    ``folder`` (:func:`~fedlabels.data.images.table_image_paths`), or its pixel rows."""
    from fedlabels.data.images import table_image_paths

    files = table_image_paths(frame, image, folder)
    return frame.to_numpy() if files is None else files
