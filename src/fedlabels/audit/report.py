"""Human-readable audit output: a ROC plot (PNG) and a one-line-per-attack text summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError


def plot_roc(privacy: dict[str, Any], path: str | Path, title: str | None = None) -> Path:
    """Log-log ROC curves of every attack at its worst view (mean over clients); PNG, atomic.
    Only FPRs the non-members resolve (≥ 1/N) are drawn; the region below is shaded.

    ``privacy`` is the ``privacy`` entry of an audited result (``AuditReport.privacy()``).
    """
    import matplotlib

    from fedlabels.audit.curves import legend_outside, save_png
    from fedlabels.reporting.plots import hidden_note

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attacks = (privacy.get("audit") or {}).get("attacks") or {}
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([1e-4, 1], [1e-4, 1], color="grey", ls="--", lw=1, label="chance")
    drawn: dict[tuple[Any, ...], str] = {}
    for name, summary in sorted(attacks.items(), key=lambda kv: -kv[1]["vul"]):
        # below 1/N (N non-members) the curve is only a straight line to (0, 0): not drawn
        floor = float(summary.get("fpr_resolution") or 0.0) - 1e-12
        points = [(f, t) for f, t in zip(summary["roc"]["fpr"], summary["roc"]["tpr"],
                                         strict=True) if f >= floor and f > 0]
        ax.plot([f for f, _ in points], [max(t, 1e-4) for _, t in points],
                label=f"{name} (AUC {summary['vul']:.3f}, {summary['worst_view']})"
                      + hidden_note(drawn, points, name))
    resolution = max((float(s.get("fpr_resolution") or 0.0) for s in attacks.values()),
                     default=0.0)
    if resolution > 1e-3:
        ax.axvspan(1e-3, resolution, color="0.9", zorder=0,
                   label=f"FPR < 1/{round(1 / resolution)} non-members: not measured")
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
    legend_outside(ax)
    return save_png(fig, path)


def _ci(interval: list[float] | None) -> str:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""


def _tpr(value: float | None, n_nonmembers: int) -> str:
    """A TPR, or where 1 / N cannot resolve its FPR, ``n/a (resolution 1/N)``."""
    return f"{value:.3f}" if value is not None else f"n/a (resolution 1/{n_nonmembers})"


def format_audit(privacy: dict[str, Any]) -> str:
    """A short text table: each attack's VUL with its 95 % interval, TPR at 1 % / 0.1 % FPR
    (``n/a`` where the non-members cannot resolve it), the constant-target baseline of the
    calibrated attacks, and the worst view."""
    if "vul" not in privacy:
        raise FedLabelsError("this result has no audit (privacy.vul); run `fedlabels audit`.")
    threat = privacy.get("threat_model", {})
    name = threat.get("name") or threat.get("key")
    lines = [f"threat model: {name} ({threat.get('key')}) - {threat.get('adversary')}; "
             f"observes {threat.get('observes', threat.get('sees'))}"]
    attacks = (privacy.get("audit") or {}).get("attacks") or {}
    if not attacks:
        lines.append(f"VUL = {privacy['vul']} by construction: {threat.get('reason', '')}")
        return "\n".join(lines)
    rows = [["attack", "VUL (AUC)", "95 % interval", "TPR@1%", "TPR@0.1%", "const.",
             "worst view"]]
    for name, s in sorted(attacks.items(), key=lambda kv: -kv[1]["vul"]):
        n, const = s["n_nonmembers"], s.get("constant_target_auc")
        rows.append([name, f"{s['vul']:.4f}", _ci(s.get("auc_ci")),
                     _tpr(s["tpr_at_1pct_fpr"], n), _tpr(s["tpr_at_01pct_fpr"], n),
                     "-" if const is None else f"{const:.3f}", s["worst_view"]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += [" ".join([r[0].ljust(widths[0]), *(v.rjust(w) for v, w in
                                                 zip(r[1:-1], widths[1:-1], strict=True)),
                        " " + r[-1]]) for r in rows]
    lines.append(f"VUL = {privacy['vul']:.4f} {_ci(privacy.get('vul_ci'))} (strongest: "
                 f"{privacy['strongest_attack']}, {privacy['worst_view']}; the interval is of "
                 "the maximum over every attack and view, bias-corrected, so it differs from "
                 "the attack's own)")
    null = privacy.get("null_vul")
    if null is not None:
        lines.append(f"null VUL (ghost members, never trained on) = {null:.4f} "
                     f"{_ci(privacy.get('null_vul_ci'))}: a VUL inside this interval is no "
                     "evidence of leakage")
    lines.append("const. = the calibrated attack on a constant target (should be 0.5)")
    lines += [f"note: {note}" for note in (privacy.get("audit") or {}).get("notes") or []]
    return "\n".join(lines)
