"""The sentence at the top of ``fedlabels report``'s page that says which configuration
scored best, by how much, and under what privacy guarantee: the best overall and, where
it has none, the best with a guarantee. It states means and spreads, and says so where the
two best lie within their spreads over seeds."""

from __future__ import annotations

import html
from collections.abc import Collection, Sequence
from typing import Any

from fedlabels.reporting.report_page import HEADINGS, decimals, fmt


def _scored(row: dict[str, Any], key: str, idle: Collection[str] = ()) -> str:
    """``<b>fedct · decision_tree</b>: 0.925 ± 0.016 over 3 seeds, privacy none``, and
    ``, which learnt next to nothing (read with care)`` for a configuration in ``idle``."""
    seeds = row["n_seeds"]
    guarantee = row["guarantee"] or "not stated"
    eps = "" if row["epsilon_mean"] is None else f", ε = {fmt(row['epsilon_mean'])} spent"
    nothing = (", whose models learnt next to nothing (read with care, above)"
               if row["configuration"] in idle else "")
    return (f"<b>{html.escape(str(row['configuration']))}</b>: "
            f"{fmt(row[key], row[key.replace('_mean', '_std')])} over {seeds} "
            f"seed{'s' if seeds != 1 else ''}, privacy {html.escape(guarantee)}{eps}{nothing}")


def _gap(gap: float, first: dict[str, Any], second: dict[str, Any], key: str) -> str:
    """The difference of two values at the decimals they are shown with (``0.001`` between
    0.905 and 0.904, not ``0.001000``, the precision of a float's rounding error); by the
    precision rule where it rounds to 0 there."""
    std = key.replace("_mean", "_std")
    d = max(decimals(first[key], first[std]), decimals(second[key], second[std]))
    shown = f"{gap:,.{d}f}"
    return shown if gap and float(shown.replace(",", "")) else fmt(gap)


def lead_sentence(rows: Sequence[dict[str, Any]], metric: str, regression: bool,
                  idle: Collection[str] = ()) -> str:
    """``Best accuracy: X: 0.959 ± 0.010 over 3 seeds, privacy none; next: Y: ...``, and the
    best with a privacy guarantee where the best has none; ``""`` for fewer than two
    configurations with the value, or results of several datasets (not comparable).
    ``idle``: the configurations whose models learnt next to nothing (every seed's, by
    :func:`fedlabels.results.caveats.learnt_next_to_nothing`), said beside their value."""
    key = "rmse_mean" if regression else f"{metric}_mean"
    scored = [r for r in rows if r.get(key) is not None]
    if len(scored) < 2 or len({r["dataset"] for r in rows}) > 1:
        return ""
    ranked = sorted(scored, key=lambda r: r[key], reverse=not regression)
    what = "RMSE (lower is better)" if regression else HEADINGS.get(metric, metric)
    first, second = ranked[:2]
    gap = abs(first[key] - second[key])
    spread = sum(r[key.replace("_mean", "_std")] or 0.0 for r in (first, second))
    overlap = (", within their spreads over seeds: no clear winner"
               if spread and gap <= spread else "")
    text = (f"Best {what}: {_scored(first, key, idle)}; next: {_scored(second, key, idle)} "
            f"(a difference of {_gap(gap, first, second, key)}{overlap}).")
    private = [r for r in ranked if r["guarantee"] not in (None, "none")]
    if private and private[0] not in (first, second):
        text += f" Best with a privacy guarantee: {_scored(private[0], key, idle)}."
    return text
