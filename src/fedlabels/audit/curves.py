"""Per-round vulnerability curves: each attack's mean AUC over clients at every recorded round.

Record every round with ``--audit-views 0``. A round with several exchanges (FREDY's teacher
phase: ``round r.j``) is spread over the round, its last exchange at x = r. The null
baseline (ghost members, the maximum over attacks and views) is drawn as a band.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_ROUND = re.compile(r"^round (\d+)(?:\.(\d+))?$")


def vul_curves(privacy: dict[str, Any]) -> dict[str, tuple[list[float], list[float]]]:
    """``attack -> (x, mean AUC)`` over the per-round views of an audited result."""
    attacks = (privacy.get("audit") or {}).get("attacks") or {}
    out = {}
    for name, summary in attacks.items():
        points: list[tuple[int, int, float]] = []
        for view, v in summary["per_view"].items():
            m = _ROUND.match(view)
            if m:
                points.append((int(m.group(1)), int(m.group(2) or 1), v["auc_mean"]))
        per_round = {r: max(j for rr, j, _ in points if rr == r) for r, _, _ in points}
        xs = sorted((r - 1 + j / per_round[r], auc) for r, j, auc in points)
        out[name] = ([x for x, _ in xs], [a for _, a in xs])
    return out


def plot_vul_curves(privacy: dict[str, Any], path: str | Path, title: str | None = None
                    ) -> Path:
    """PNG (atomic) of :func:`vul_curves`, with the null VUL and its interval as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from fedlabels.reporting.plots import hidden_note

    fig, ax = plt.subplots(figsize=(6, 4))
    curves = vul_curves(privacy)
    drawn: dict[tuple[Any, ...], str] = {}
    for name, (x, y) in sorted(curves.items()):
        ax.plot(x, y, marker="o", ms=3,
                label=name + hidden_note(drawn, list(zip(x, y, strict=True)), name))
    null, ci = privacy.get("null_vul"), privacy.get("null_vul_ci")
    if null is not None:
        ax.axhline(null, color="grey", ls="--", lw=1, label=f"null (ghosts) {null:.3f}")
        if ci:
            ax.axhspan(ci[0], ci[1], color="grey", alpha=0.15,
                       label=f"null 95 % interval [{ci[0]:.3f}, {ci[1]:.3f}]")
    if not curves:
        ax.text(0.05, 0.5, f"no per-round views: VUL = {privacy.get('vul')}",
                transform=ax.transAxes)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a round's views lie between
    ax.set_xlabel("communication round")
    ax.set_ylabel("VUL (mean AUC over clients)")
    name = (privacy.get("threat_model") or {}).get("name", "")
    ax.set_title(title or f"membership inference per round ({name})", fontsize=10)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return save_png(fig, path)


def legend_outside(ax: Any) -> None:
    """The legend right of the axes, so it covers no curve (``loc="best"`` put it over the
    attacks' curves where they bunch together)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              frameon=False)


def save_png(fig: Any, path: str | Path) -> Path:
    """Write a matplotlib figure as PNG, atomically, and close it."""
    import matplotlib.pyplot as plt

    from fedlabels.core.files import atomic_path

    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    finally:
        plt.close(fig)
    return path
