"""How a run's federation was built, as the run parameters that build it, read from the
federation's summary (:meth:`~fedlabels.data.federation.Federation.summary`, a result's
``federation``): the one reading of it that ``fl.run`` records for a :class:`Federation`
(``api``) and that ``fl.report`` and ``fl.plot`` compare runs by (``reporting/plots``), and
the fingerprint of the data a federation made from arrays was built from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def built_settings(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``clients``; ``partition`` as its canonical text (``dirichlet:0.5,0.5`` where it was
    asked as ``dirichlet:0.5``; ``None``: none recorded, a federation built by hand or a
    result of an earlier version); the sizes built, ``unlabeled``, ``private`` (over all
    clients: ``private_per_client`` asks for the same total another way) and ``test``;
    ``unlabeled_shift`` (its S) and ``public_pca`` (its components); the table settings
    of a loaded federation (``loaded_with``: ``features``, ``sep``, ``task``, ...) in their
    canonical form (:mod:`fedlabels.data.loaded_with`), and of one made from arrays
    (``make_federation``) its ``task`` and declared ``target_range``. A size or count the
    summary lacks is left out, and so are the table settings of a federation built by
    hand or a result of an earlier version."""
    out: dict[str, Any] = {}
    if isinstance(summary.get("n_clients"), int):
        out["clients"] = summary["n_clients"]
    partition = summary.get("partition")
    out["partition"] = partition if isinstance(partition, str) else None
    sizes = summary.get("client_sizes")
    private = sum(sizes) if isinstance(sizes, list) and all(
        isinstance(s, int) for s in sizes) else summary.get("n_private")
    for key, built in (("unlabeled", summary.get("n_public")), ("private", private),
                       ("test", summary.get("n_test"))):
        if isinstance(built, int):
            out[key] = built
    shift, pca = summary.get("unlabeled_shift"), summary.get("public_pca")
    out["unlabeled_shift"] = shift.get("S", 0.0) if isinstance(shift, dict) else 0.0
    out["public_pca"] = pca.get("components") if isinstance(pca, dict) else None
    loaded = summary.get("loaded_with")
    if isinstance(loaded, dict):
        from fedlabels.data.loaded_with import LOADED_KEYS

        out.update({k: loaded[k] for k in LOADED_KEYS if k in loaded})
        if isinstance(out.get("features"), list):  # earlier versions kept the order given
            out["features"] = sorted(out["features"])
    elif isinstance(summary.get("n_classes"), int):  # make_federation's: no table settings
        out.update(_task_of(summary))
    return out


def _task_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The ``task`` and ``target_range`` of a federation made from arrays, as a loaded
    one records them: the task (a regression has no classes), the range where declared."""
    task = summary.get("task")
    if not isinstance(task, str):
        task = "regression" if summary["n_classes"] == 0 else "classification"
    declared = summary.get("target_range_source") == "declared"
    bounds = summary.get("target_range") if declared else None
    return {"task": task, "target_range": bounds if isinstance(bounds, list) else None}


def data_fingerprint(summary: Mapping[str, Any]) -> str | None:
    """The SHA-256 of the arrays a federation made from arrays (``make_federation``) was
    built from (its ``data_sha256``), which tells runs on other data under one name
    (``custom``) apart; ``None`` for a loaded federation (its dataset and table settings
    name its data) and for a result of an earlier version, which group as before."""
    digest = summary.get("data_sha256")
    return digest if isinstance(digest, str) and "loaded_with" not in summary else None
