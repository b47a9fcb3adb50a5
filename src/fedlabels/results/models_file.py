"""The clients' final models, saved beside a result as ``RESULT.models.npz``.

Written atomically, readable by its owner only (each client's model is trained on its
private data), with the run's preprocessing (plain lists), so a result's models can be
applied to raw rows later (:mod:`fedlabels.results.predict`) and inspected
(:mod:`fedlabels.reporting.inspect`). The file holds no pickle: loading builds only the model
types fedlabels writes (:mod:`fedlabels.results.model_format`), so a models file received
from someone else cannot run code; your own network is rebuilt by importing its factory's
module only when the caller trusts that module (:mod:`fedlabels.results.own_network`).
Earlier versions' ``.models.pkl`` files are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import PICKLED_MODELS, RUN_SIBLINGS, atomic_path, models_path


def save_models(result: Any, result_path: str | Path) -> Path:
    """Write the run's final client models (and names to read them by), atomically."""
    from fedlabels.data.pixel_names import names_record
    from fedlabels.results.model_format import write_models_file

    path = models_path(result_path)
    payload = {
        "method": result.method,
        "dataset": result.dataset,
        "seed": result.seed,
        "model_specs": list(result.models),
        "feature_names": names_record(getattr(result, "feature_names", []) or []),
        "class_names": list(result.federation.get("class_names", [])),
        "class_descriptions": list(result.federation.get("class_descriptions", [])),
        "models": list(result.client_models),
        # to apply the models to raw data (fedlabels.results.predict): plain lists, no objects
        "preprocessing": (result.preprocessing.to_dict()
                          if getattr(result, "preprocessing", None) is not None else None),
    }
    with atomic_path(path, private=True) as tmp:  # the clients' models: private state
        write_models_file(Path(tmp), payload)
    _warn_unrebuildable(result.client_models)
    return path


def _warn_unrebuildable(models: list[Any]) -> None:
    """Warn once if a client's own network cannot be rebuilt from the file (a lambda)."""
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel
    from fedlabels.results.own_network import factory_record, unrebuildable_note

    for model in models:
        network = getattr(model, "network", None)
        if callable(network) and "unrebuildable" in (record := factory_record(network)):
            warnings.warn(FedLabelsWarning(f"the models file holds the weights, but "
                                           f"{unrebuildable_note(record)}."),
                          stacklevel=user_stacklevel())
            return


def load_models(path: str | Path,
                trust_modules: Iterable[str] | None = None) -> dict[str, Any]:
    """Read a payload written by :func:`save_models` (from a ``.json`` or ``.models.npz``);
    only the model types fedlabels writes are built, nothing is unpickled; your own network
    only if its factory's module is in ``trust_modules`` (importing it runs its code)."""
    payload, models = open_models(path, trust_modules)
    return {**payload, "models": models()}


def open_models(path: str | Path, trust_modules: Iterable[str] | None = None
                ) -> tuple[dict[str, Any], Callable[[], list[Any]]]:
    """:func:`load_models` in two steps: the file is read and its entries other than the
    models decoded and checked now; the models are built (and their arrays checked) by the
    function returned, from the bytes read now (``fl.load_run``: when first used). Every
    error is one line."""
    from fedlabels.results.model_format import ModelsArchive
    from fedlabels.results.own_network import trusted_modules

    trusted = trusted_modules(trust_modules)
    given = Path(path)
    if given.suffix == ".json" and not given.is_file():
        from fedlabels.core.files import not_a_file

        raise FedLabelsError(f"result {given} {not_a_file(given)}; give the JSON a run "
                             "wrote (its models file lies beside it).")
    path = models_path(path)
    pickled = path if path.name.endswith(PICKLED_MODELS) else \
        path.with_name(path.name.removesuffix(".models.npz") + PICKLED_MODELS)
    if path == pickled or (not path.is_file() and pickled.is_file()):
        raise FedLabelsError(f"{pickled} was saved by an earlier fedlabels as a pickle, which "
                             "is no longer loaded (it could run code); re-run the run to save "
                             "its models again.")
    note = _no_models_note(given)
    if note and not path.is_file():
        raise FedLabelsError(f"{given} has no models file: {note}.")
    if not path.is_file() and not _names_a_run(given):
        # `fedlabels predict new.csv run.json` said "no saved models at new.models.npz"
        raise FedLabelsError(f"{given} is not a run's result: give the result JSON a run "
                             "wrote (X.json; its models file X.models.npz lies beside it).")
    if not path.is_file():
        raise FedLabelsError(f"no saved models at {path}; `fedlabels run` and, in Python, "
                             "result.save(path) write them beside the result JSON "
                             "(result.save_json writes the JSON alone: read it with "
                             "fl.load_run(path, models=False)), except models a run cannot "
                             "save (it warned then) and runs of older versions or other "
                             "engines.")
    archive = ModelsArchive(path, trusted)
    payload = {key: archive.decode(key) for key in archive.entries if key != "models"}
    _check_entries(payload, archive.entries.get("models"), path)
    _warn_untyped_labels(payload, path)
    archive.check_networks("models")  # your own network's trust: now, not on first use
    return payload, lambda: _checked_models(archive.decode("models"), path)


#: the payload's entries that readers index, and the types :func:`save_models` writes
_PAYLOAD_TYPES: dict[str, type | tuple[type, ...]] = {
    "models": list, "model_specs": list, "feature_names": (list, dict), "class_names": list,
    "class_descriptions": list, "preprocessing": (dict, type(None))}
#: entries written since the format's first version, and what a file without them means
_ADDED_LATER: dict[str, Any] = {"class_descriptions": []}  # none described (before 11-28)


def _check_entries(payload: dict[str, Any], models: Any, path: Path) -> None:
    """Refuse (one line) a ``payload`` (``models`` aside, as encoded: a list is a list)
    without the entries :func:`save_models` writes, or with one of another type (a forged
    file's ``{"models": 5}`` was a traceback in ``inspect`` and ``predict``); an entry
    added since the format's first version is filled in where an earlier fedlabels left it
    out."""
    for key, default in _ADDED_LATER.items():
        payload.setdefault(key, default)
    for key, kind in _PAYLOAD_TYPES.items():
        if not isinstance(models if key == "models" else payload.get(key), kind):
            raise FedLabelsError(f"{path} is not a valid fedlabels models file (its "
                                 f"{key!r} is missing or of the wrong type); re-run the run to "
                                 "write it again.")
    from fedlabels.data.pixel_names import PixelNames, names_of_record

    try:  # pixel names as their shape ({"pixels": [C, H, W]}), else each name
        names: Any = names_of_record(payload["feature_names"])
    except FedLabelsError:
        names = [None]
    texts = payload["model_specs"] + payload["class_names"]
    if not all(isinstance(t, str) for t in texts) or not (
            isinstance(names, PixelNames) or all(isinstance(t, str) for t in names)):
        raise FedLabelsError(f"{path} is not a valid fedlabels models file (a name is not "
                             "what fedlabels writes); re-run the run to write it again.")
    payload["feature_names"] = names


def _warn_untyped_labels(payload: dict[str, Any], path: Path) -> None:
    """Warn when the file's preprocessing does not record the labels' type (a file written
    by fedlabels of 26 Nov 2026): predictions are then the labels as text, so comparing them
    with int labels (``score``, ``accuracy_score``) found no match, without a word."""
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    saved = payload.get("preprocessing")
    if not isinstance(saved, dict) or "label_dtype" in saved or not saved.get("class_names"):
        return
    shown = ", ".join(repr(str(c)) for c in saved["class_names"][:3])
    warnings.warn(FedLabelsWarning(
        f"{path} was written by a fedlabels that did not record the labels' type: predict "
        f"gives the labels as text ({shown}); compare them with y.astype(str), or re-run "
        "the run to save its models again."), stacklevel=user_stacklevel())


def _checked_models(models: Any, path: Path) -> list[Any]:
    """``models`` if each one predicts; else a one-line error."""
    if not isinstance(models, list) or not all(
            callable(getattr(m, "predict", None)) for m in models):
        raise FedLabelsError(f"{path} is not a valid fedlabels models file (a model is not "
                             "what fedlabels writes); re-run the run to write it again.")
    return models


def _names_a_run(given: Path) -> bool:
    """Whether ``given`` is named as a run's file: its result ``X.json``, its models file or
    one of :data:`RUN_SIBLINGS` (not a data table such as ``new.csv``)."""
    name = given.name.lower()
    return name.endswith((".json", ".models.npz", PICKLED_MODELS, *RUN_SIBLINGS))


def _no_models_note(result: Path) -> str | None:
    """Why the run of the result JSON ``result`` keeps no models (its method trains none),
    read from the result; None for anything else."""
    import json

    if result.suffix != ".json" or not result.is_file():
        return None
    try:
        note = json.loads(result.read_text()).get("no_models")  # extra's keys are top-level
    except (OSError, ValueError, AttributeError):
        return None  # not a result: the caller's own message applies
    return note if isinstance(note, str) else None
