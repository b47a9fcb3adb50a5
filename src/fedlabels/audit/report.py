"""Human-readable audit output: a ROC plot (PNG) and a one-line-per-attack text summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedlabels.errors import FedLabelsError


def plot_roc(privacy: dict[str, Any], path: str | Path, title: str | None = None) -> Path:
    """Log-log ROC curves of every attack at its worst view (mean over clients); PNG, atomic.

    ``privacy`` is the ``privacy`` entry of an audited result (``AuditReport.privacy()``).
    """
    import matplotlib

    from fedlabels.results import atomic_path

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attacks = (privacy.get("audit") or {}).get("attacks") or {}
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([1e-4, 1], [1e-4, 1], color="grey", ls="--", lw=1, label="chance")
    for name, summary in sorted(attacks.items(), key=lambda kv: -kv[1]["vul"]):
        fpr, tpr = summary["roc"]["fpr"], summary["roc"]["tpr"]
        ax.plot([max(f, 1e-4) for f in fpr], [max(t, 1e-4) for t in tpr],
                label=f"{name} (AUC {summary['vul']:.3f}, {summary['worst_view']})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-3, 1)
    ax.set_ylim(1e-3, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    threat = privacy.get("threat_model", {}).get("key", "")
    if not attacks:
        ax.text(0.05, 0.5, f"nothing to attack ({threat}): VUL = {privacy.get('vul')}",
                transform=ax.transAxes)
    ax.set_title(title or f"membership inference ({threat})", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    finally:
        plt.close(fig)
    return path


def format_audit(privacy: dict[str, Any]) -> str:
    """A short text table: VUL, TPR at 1 % / 0.1 % FPR and the worst view of each attack."""
    if "vul" not in privacy:
        raise FedLabelsError("this result has no audit (privacy.vul); run `fedlabels audit`.")
    threat = privacy.get("threat_model", {})
    lines = [f"threat model: {threat.get('key')} - the server sees {threat.get('sees')}"]
    attacks = (privacy.get("audit") or {}).get("attacks") or {}
    if not attacks:
        lines.append(f"VUL = {privacy['vul']} by construction: {threat.get('reason', '')}")
        return "\n".join(lines)
    lines.append(f"{'attack':<16} {'VUL (AUC)':>9} {'TPR@1%':>7} {'TPR@0.1%':>8}  worst view")
    for name, s in sorted(attacks.items(), key=lambda kv: -kv[1]["vul"]):
        lines.append(f"{name:<16} {s['vul']:>9.4f} {s['tpr_at_1pct_fpr']:>7.3f} "
                     f"{s['tpr_at_01pct_fpr']:>8.3f}  {s['worst_view']}")
    lines.append(f"VUL = {privacy['vul']:.4f} (strongest: {privacy['strongest_attack']}, "
                 f"{privacy['worst_view']})")
    return "\n".join(lines)
