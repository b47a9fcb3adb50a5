"""Plots of run results (matplotlib, headless)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fedlabels.results import RunResult


def plot_accuracy(results: Sequence[RunResult], path: str | Path,
                  title: str | None = None) -> Path:
    """Mean client test accuracy per round (min-max band), one line per run; PNG, atomic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for res in results:
        frame = res.to_frame().dropna(subset=["acc_mean"])
        label = f"{res.method} ({', '.join(sorted(set(res.models)))})"
        ax.plot(frame["round"], frame["acc_mean"], marker="o", ms=3, label=label)
        ax.fill_between(frame["round"], frame["acc_min"], frame["acc_max"], alpha=0.15)
    ax.set_xlabel("communication round")
    ax.set_ylabel("client test accuracy (mean, min-max band)")
    ax.set_title(title or f"{results[0].dataset}, m = {results[0].federation['n_clients']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path
