"""The clients' final models, saved beside a result as ``RESULT.models.pkl``.

A joblib pickle written atomically with the run's preprocessing (plain lists), so a result's
models can be applied to raw rows later (:mod:`fedlabels.results.predict`) and inspected
(:mod:`fedlabels.reporting.inspect`). Unpickling runs code: :func:`load_models` loads only
files the current user owns and nobody else may write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import atomic_path, models_path

FORMAT = "fedlabels-models/1"


def save_models(result: Any, result_path: str | Path) -> Path:
    """Write the run's final client models (and names to read them by), atomically."""
    import joblib

    path = models_path(result_path)
    payload = {
        "format": FORMAT,
        "method": result.method,
        "dataset": result.dataset,
        "seed": result.seed,
        "model_specs": list(result.models),
        "feature_names": list(getattr(result, "feature_names", []) or []),
        "class_names": list(result.federation.get("class_names", [])),
        "models": list(result.client_models),
        # to apply the models to raw data (fedlabels.results.predict): plain lists, no objects
        "preprocessing": (result.preprocessing.to_dict()
                          if getattr(result, "preprocessing", None) is not None else None),
    }
    with atomic_path(path) as tmp:
        joblib.dump(payload, tmp)
    return path


def load_models(path: str | Path) -> dict[str, Any]:
    """Read a payload written by :func:`save_models` (from a ``.json`` or ``.models.pkl``)."""
    import joblib

    given = Path(path)
    if given.suffix == ".json" and not given.is_file():
        from fedlabels.core.files import not_a_file

        raise FedLabelsError(f"result {given} {not_a_file(given)}; give the JSON a run "
                             "wrote (its models file lies beside it).")
    path = models_path(path)
    if not path.is_file():
        raise FedLabelsError(f"no saved models at {path}; `fedlabels run` writes them beside "
                             "the result JSON (runs from older versions or other engines may "
                             "have none).")
    _check_own_file(path)
    try:
        payload = joblib.load(path)
    except Exception as exc:  # a truncated or foreign file: any unpickling error
        raise FedLabelsError(f"{path} cannot be read as a fedlabels models file "
                             f"({type(exc).__name__}).") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise FedLabelsError(f"{path} is not a fedlabels models file ({FORMAT}).")
    return payload


def _check_own_file(path: Path) -> None:
    """Unpickling runs code: refuse a models file another user owns or others may write."""
    import os

    st = path.stat()
    getuid = getattr(os, "getuid", None)  # POSIX only
    if getuid is not None and (st.st_uid != getuid() or st.st_mode & 0o022):
        raise FedLabelsError(f"refusing to load {path}: models files are pickles (loading "
                             "one can run code), and this one is owned by another user or "
                             "writable by others; load only models files your own runs wrote.")
