"""Plots of run results (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import atomic_path
from fedlabels.results import RunResult


def figure_format(path: str | Path) -> str:
    """The matplotlib format named by ``path``'s suffix (``x.pdf`` -> ``pdf``); an unknown
    or missing suffix is a :class:`FedLabelsError` listing the supported ones."""
    from matplotlib.figure import Figure

    supported = Figure().canvas.get_supported_filetypes()
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in supported:
        raise FedLabelsError(f"cannot tell the plot format of {path}: give a file name ending "
                             f"in one of {', '.join('.' + f for f in sorted(supported))}.")
    return fmt


def _describe(res: RunResult) -> dict[str, str]:
    """What tells runs apart in a legend."""
    config = res.config or {}
    return {"method": res.method,
            "models": ", ".join(sorted(set(res.models))),
            "dataset": res.dataset,
            "clients": f"m = {res.federation.get('n_clients', config.get('clients', '?'))}",
            "partition": str(config.get("partition", "")),
            "seed": f"seed {res.seed}",
            "rounds": f"R = {config.get('rounds', len(res.rounds))}",
            "options": ", ".join(f"{k}={v}" for k, v in sorted(
                (config.get("options") or {}).items()))}


def legend_labels(results: Sequence[RunResult]) -> tuple[list[str], str]:
    """One distinct label per run and a title naming what all runs share.

    Labels are ``method (models)`` plus every other attribute (dataset, clients, partition,
    seed, rounds, options) that differs between the runs; runs alike in all of these are
    numbered.
    """
    described = [_describe(r) for r in results]
    varying = [k for k in described[0] if k not in ("method", "models")
               and len({d[k] for d in described}) > 1]
    labels = [f"{d['method']} ({d['models']})" + "".join(f", {d[k]}" for k in varying)
              for d in described]
    if len(set(labels)) < len(labels):
        labels = [f"{label} #{i + 1}" for i, label in enumerate(labels)]
    shared = [described[0][k] for k in ("dataset", "clients") if k not in varying]
    return labels, ", ".join(shared) or "client test accuracy per round"


def plot_accuracy(results: Sequence[RunResult], path: str | Path,
                  title: str | None = None) -> Path:
    """Mean client test accuracy per round (min-max band), one line per run.

    The format follows the suffix of ``path`` (``.png``, ``.pdf``, ``.svg``, ...); the file
    is written atomically.
    """
    if not results:
        raise FedLabelsError("nothing to plot: give at least one result.")
    fmt = figure_format(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, shared = legend_labels(results)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for res, label in zip(results, labels, strict=True):
        _plot_run(ax, res, label)
    ax.set_xlabel("communication round")
    regression = all(r.federation.get("task") == "regression" for r in results)
    ax.set_ylabel("client test RMSE (mean)" if regression
                  else "client test accuracy (mean, min-max band)")
    ax.set_title(title or shared)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt)
    finally:
        plt.close(fig)
    return path


def _plot_run(ax: Any, res: RunResult, label: str) -> None:
    frame = res.to_frame()
    if "rmse_mean" in frame:  # regression: the mean client RMSE per round
        frame = frame.dropna(subset=["rmse_mean"])
        ax.plot(frame["round"], frame["rmse_mean"], marker="o", ms=3, label=label)
        return
    if "acc_mean" not in frame:  # stopped before its first evaluation: an empty entry
        ax.plot([], [], marker="o", ms=3, label=f"{label} (not evaluated)")
        return
    frame = frame.dropna(subset=["acc_mean"])
    ax.plot(frame["round"], frame["acc_mean"], marker="o", ms=3, label=label)
    ax.fill_between(frame["round"], frame["acc_min"], frame["acc_max"], alpha=0.15)
