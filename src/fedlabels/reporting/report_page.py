"""The HTML page of ``fedlabels report``: warnings first, the summary table (only columns
that have values; one precision rule), the figures, the confusion matrices, the files.

Precision: a value with a spread shows the spread to two significant digits and the mean
to the same decimals (``0.925 ± 0.016``); a single value shows three significant digits;
bytes and counts are whole numbers, their spread too (``± < 1`` below one).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.core.class_names import shown_class_names, shown_names_of
from fedlabels.core.clinical import SCALAR_METRICS
from fedlabels.core.metric_names import METRIC_NAMES

if TYPE_CHECKING:
    from fedlabels.reporting.report import Configuration
    from fedlabels.results import RunResult

MISSING = "—"


def _count(n: int, noun: str) -> str:
    """``1 result``, ``2 results``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def decimals(value: float, spread: float | None = None) -> int:
    """Decimals of a cell: two significant digits of the spread, else three of the value
    (counted after rounding, so 0.99996 has two decimals: ``1.00``)."""
    ref, digits = (spread, 2) if spread else (abs(value), 3)
    if not ref or not math.isfinite(ref):
        return 3
    ref = float(f"{ref:.{digits - 1}e}")  # rounding may carry to the next power of ten
    return int(min(6, max(0, digits - 1 - math.floor(math.log10(ref)))))


def _positive_note(configs: Sequence[Any]) -> str:
    """The sentence naming the positive class of sensitivity and specificity: one class, or
    one per dataset where the report's datasets have their own (each dataset's first
    configuration that records one)."""
    esc = html.escape
    per_dataset: dict[str, tuple[str, str]] = {}
    for c in configs:
        run = c.runs[0]
        positive = (run.extra.get("clinical") or {}).get("positive_class")
        if not positive or run.dataset in per_dataset:
            continue
        names, k = shown_names_of(run.federation), positive["class"]
        shown = names[k] if k < len(names) else str(positive["name"])
        per_dataset[run.dataset] = (shown, str(positive["rule"]))
    if not per_dataset:
        return ""
    if len(set(per_dataset.values())) == 1:
        shown, rule = next(iter(per_dataset.values()))
        return (f" Sensitivity and specificity take <b>{esc(shown)}</b> as the positive "
                f"class ({esc(rule)}).")
    each = "; ".join(f"<b>{esc(shown)}</b> on {esc(d)} ({esc(rule)})"
                     for d, (shown, rule) in per_dataset.items())
    return f" Sensitivity and specificity take as the positive class: {each}."


def fmt(value: Any, spread: float | None = None, whole: bool = False) -> str:
    """A table cell: '—' when missing, else the value (± spread) by the precision rule."""
    if value is None:
        return MISSING
    if not isinstance(value, float | int) or isinstance(value, bool):
        return str(value)
    if whole:
        text = f"{value:,.0f}"
        if not spread:
            return text
        # whole numbers have a whole spread; one that rounds to 0 reads '< 1', as '± 0'
        # would say the runs agree
        whole_spread = f"{spread:,.0f}"
        return f"{text} ± {'< 1' if whole_spread == '0' else whole_spread}"
    d = decimals(float(value), spread)
    text = f"{value:,.{d}f}"
    return text if not spread else f"{text} ± {spread:,.{d}f}"


Cell = Callable[[dict[str, Any]], str]

#: the table's heading of each headline metric
HEADINGS = METRIC_NAMES


def _metric_column(name: str) -> tuple[str, str, Cell]:
    key = "accuracy" if name == "accuracy" else name
    return (HEADINGS[name], f"{key}_mean",
            lambda r: fmt(r[f"{key}_mean"], r[f"{key}_std"]))


def columns(metric: str) -> list[tuple[str, str, Cell]]:
    """(heading, the row key that must have a value, cell) in display order: what the
    models achieve (the headline ``metric`` first), then what it cost."""
    order = [metric, *(m for m in SCALAR_METRICS if m != metric)]
    return [
        *_FIRST,
        *(_metric_column(m) for m in order),
        ("majority-class baseline", "majority_baseline", lambda r: fmt(r["majority_baseline"])),
        ("training-mean baseline RMSE", "mean_baseline_rmse",
         lambda r: fmt(r["mean_baseline_rmse"])),
        ("RMSE", "rmse_mean", lambda r: fmt(r["rmse_mean"], r["rmse_std"])),
        ("R²", "r2_mean", lambda r: fmt(r["r2_mean"], r["r2_std"])),
        ("status", "status", lambda r: fmt(r["status"])),
    ]


_FIRST: list[tuple[str, str, Cell]] = [
    ("configuration", "configuration", lambda r: str(r["configuration"])),
    ("clients", "clients", lambda r: fmt(r["clients"], whole=True)),
    ("seeds", "n_seeds", lambda r: fmt(r["n_seeds"], whole=True)),
]


def cost_columns() -> list[tuple[str, str, Cell]]:
    """The second table: communication and privacy."""
    return [
        _FIRST[0],
        ("up B/client/round", "bytes_up_per_client_round",
         lambda r: fmt(r["bytes_up_per_client_round"], r["bytes_up_per_client_round_std"],
                       whole=True)),
        ("B/client total", "bytes_per_client_total",
         lambda r: fmt(r["bytes_per_client_total"], whole=True)),
        ("guarantee", "guarantee", lambda r: fmt(r["guarantee"])),
        ("ε spent", "epsilon_mean", lambda r: fmt(r["epsilon_mean"], r["epsilon_std"])),
        ("δ", "delta", lambda r: MISSING if r["delta"] is None else f"{r['delta']:g}"),
        ("VUL", "vul_mean", lambda r: fmt(r["vul_mean"], r["vul_std"])),
        ("VUL 95 % interval", "vul_low", lambda r: MISSING if r["vul_low"] is None
         else f"[{fmt(r['vul_low'])}, {fmt(r['vul_high'])}]"
         + (" (t, seeds)" if (r["n_seeds"] or 0) > 1 else "")),
    ]


def shown_columns(rows: Sequence[dict[str, Any]], cols: Sequence[tuple[str, str, Cell]]
                  ) -> list[tuple[str, str, Cell]]:
    """The columns at least one row has a value for."""
    return [c for c in cols if any(r.get(c[1]) is not None for r in rows)]


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}"
          "h1,h2{text-wrap:balance}"  # a long title wraps in even lines, no lone word
          "table{border-collapse:collapse;font-size:13px;margin-bottom:1em}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
          "td:first-child,th:first-child{text-align:left}"
          "th.head,td.head{background:#eef4fb;font-weight:bold}"
          "tr.flagged td{background:#fff4e0}"
          ".warn{background:#fff4e0;border-left:4px solid #e69500;padding:.5em 1em}"
          ".cm{display:inline-block;vertical-align:top;margin:0 1.5em 1em 0}"
          "img{max-width:100%;display:block;margin-bottom:1.5em}"
          "li{margin-bottom:.6em}code{overflow-wrap:anywhere}")


def _table(rows: Sequence[dict[str, Any]], all_cols: Sequence[tuple[str, str, Cell]],
           metric: str, flagged: set[str]) -> str:
    esc = html.escape
    cols = shown_columns(rows, all_cols)
    for key in ("majority_baseline", "mean_baseline_rmse"):  # said once, above the table
        if len({r.get(key) for r in rows}) == 1:
            cols = [c for c in cols if c[1] != key]
    head_key = f"{metric}_mean"
    th = "".join(f'<th{" class=head" if key == head_key else ""}>{esc(h)}</th>'
                 for h, key, _ in cols)
    body = []
    for r in rows:
        tds = "".join(f'<td{" class=head" if key == head_key else ""}>{esc(cell(r))}</td>'
                      for _, key, cell in cols)
        cls = ' class="flagged"' if r["configuration"] in flagged else ""
        body.append(f"<tr{cls}>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>\n" + "\n".join(body) + \
        "\n</tbody></table>"


def _site_ledgers(configs: Sequence[Configuration]) -> str:
    """A table of every Flower site's own ledger figures (``privacy.site_ledgers``, reported
    by the sites and not verified by the coordinator) beside the coordinator's ε; empty
    where no result has them."""
    esc = html.escape
    rows = []
    for conf in configs:
        for run in conf.runs:
            privacy = run.extra.get("privacy") or {}
            block = privacy.get("site_ledgers") or {}
            for cid, site in sorted((block.get("sites") or {}).items(),
                                    key=lambda kv: int(kv[0])):
                told = isinstance(site, dict) and "epsilon" in site

                def cell(key: str, site: Any = site, told: bool = told) -> str:
                    value = site.get(key) if told else None
                    if isinstance(value, float) and key.endswith("delta"):
                        return f"{value:g}"
                    return fmt(value, whole=key.endswith("releases"))

                budget = (MISSING if not told or "budget" not in site else  # report-lifetime
                          f"{cell('budget')} ({site.get('budget_from') or 'none'})"
                          if site.get("budget") is not None else "none (recorded)")
                rows.append(
                    f"<tr><td>{esc(conf.label)}</td><td>{run.seed}</td><td>{esc(cid)}</td>"
                    f"<td>{fmt(privacy.get('epsilon'))}</td><td>{cell('epsilon')}</td>"
                    f"<td>{cell('delta')}</td><td>{cell('releases')}</td>"
                    f"<td>{cell('ledger_epsilon')}</td><td>{cell('ledger_releases')}</td>"
                    f"<td>{esc(budget)}</td></tr>")
    if not rows:
        return ""
    head = ("<tr><th>configuration</th><th>seed</th><th>site</th><th>coordinator's ε</th>"
            "<th>site's ε, this run</th><th>δ</th><th>releases</th><th>site's ε, lifetime"
            "</th><th>lifetime releases</th><th>site's budget</th></tr>")
    return ("<h2>Sites' own ledgers</h2>\n<p>What each Flower site's own privacy ledger "
            "enforced, <b>reported by the site, not verified by the coordinator</b> (— : "
            "the site reported nothing; a site reports its lifetime figures only with "
            "<code>report-lifetime=true</code> in its node config); the disagreements are "
            "listed under <i>Read with care</i>.</p>\n"
            f"<table><thead>{head}</thead><tbody>\n" + "\n".join(rows)
            + "\n</tbody></table>\n")


def _confusion(conf: Configuration) -> str | None:
    """The confusion matrix of the lowest seed, summed over clients (rows: truth)."""
    clinical = conf.runs[0].extra.get("clinical") or {}
    matrices = clinical.get("confusion_matrices")
    if not matrices:
        return None
    cm = np.sum(np.asarray(matrices), axis=0)
    names = shown_class_names(clinical.get("class_names") or [str(k) for k in range(len(cm))],
                              conf.runs[0].federation.get("class_descriptions"))
    esc = html.escape
    head = "".join(f"<th>{esc(str(n))}</th>" for n in names)
    body = "".join(f"<tr><th>{esc(str(n))}</th>" + "".join(f"<td>{v:,}</td>" for v in row)
                   + "</tr>" for n, row in zip(names, cm.tolist(), strict=True))
    seed = f", seed {conf.runs[0].seed}" if len(conf.runs) > 1 else ""
    return (f'<div class="cm"><b>{esc(conf.label)}</b> ({len(matrices)} client(s) summed'
            f"{seed})<table><thead><tr><th>true \\ predicted</th>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>")


def render_html(rows: Sequence[dict[str, Any]], configs: Sequence[Configuration],
                figures: Sequence[tuple[str, str]], sources: Sequence[str],
                warnings: Sequence[tuple[str, str]], metric: str = "accuracy",
                runs: Sequence[RunResult] = (), lead: str = "") -> str:
    """The page: warnings, ``lead`` (HTML: which configuration scored best), the summary
    table, the figures (embedded), the confusion matrices and the result files used (with
    ``runs``, the results in the order of ``sources``: how each ran and what its privacy
    guarantee covers)."""
    esc = html.escape
    warn = ""
    if warnings:
        items = "".join(f"<li><b>{esc(c)}</b>: {esc(w)}</li>" for c, w in warnings)
        warn = f'<div class="warn"><b>Read with care</b><ul>{items}</ul></div>\n'
    flagged = {c for c, _ in warnings}
    from fedlabels.reporting.report_figures import what_ran

    ran = esc(what_ran(configs)) if configs else ""
    figs = "\n".join(f'<h2>{esc(t)}</h2>\n<img alt="{esc(t)} ({ran})" '
                     f'src="data:image/png;base64,{png}">' for t, png in figures)
    matrices = [m for c in configs if (m := _confusion(c)) is not None]
    cms = ("<h2>Confusion matrices</h2>\n<p>Rows: true class; columns: predicted class; "
           "the final models on the test set.</p>\n" + "\n".join(matrices)) if matrices else ""
    pos_note = _positive_note(configs)
    files = "".join(f"<li>{esc(s)}" + ("" if res is None else _provenance(res)) + "</li>"
                    for s, res in zip(sources, [*runs, *[None] * len(sources)], strict=False))
    regression = bool(configs) and all(c.regression for c in configs)
    lead = f"<p>{lead}</p>\n" if lead else ""
    headline = "RMSE and R² (regression)" if regression else HEADINGS.get(metric, metric)
    bases = {r.get("majority_baseline") for r in rows}
    base = next(iter(bases)) if len(bases) == 1 else None
    base_note = "" if base is None else (
        f" The majority-class baseline (always the commonest training class) scores "
        f"accuracy <b>{fmt(base)}</b> (and balanced accuracy 1/C for C classes, as any "
        "constant answer does): a model has learnt where it beats that accuracy clearly, "
        "or, on imbalanced classes, where its balanced accuracy is clearly above 1/C.")
    means = {(r.get("mean_baseline_rmse"), r.get("mean_baseline_r2")) for r in rows}
    rmse, r2 = next(iter(means)) if len(means) == 1 else (None, None)
    if rmse is not None:
        base_note += (f" Predicting the training mean (always the mean of the pooled private "
                      f"training targets) scores RMSE <b>{fmt(rmse)}</b> (R² {fmt(r2)}): a "
                      "model must beat it clearly to have learnt anything.")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>fedlabels report: {ran}</title><style>{_STYLE}</style></head><body>\n"
            f"<h1>fedlabels report: {ran}</h1>\n{warn}"
            f"<p>{_count(len(sources), 'result')}, {_count(len(rows), 'configuration')}. "
            "Metrics of the "
            "clients' final models on the test set: the mean over clients, then mean ± "
            "standard deviation over seeds (— where a run has no such value). "
            f"Headline: <b>{esc(headline)}</b>.{pos_note}{base_note}</p>\n"
            f"{lead}{_table(rows, columns(metric), metric, flagged)}\n"
            "<h2>Communication and privacy</h2>\n"
            f"{_table(rows, cost_columns(), metric, flagged)}\n{_site_ledgers(configs)}"
            f"{figs}\n{cms}\n"
            "<h2>Results: how each ran and what its guarantee covers</h2>"
            f"<ul>{files}</ul>\n</body></html>\n")


def how_it_ran(res: RunResult) -> str:
    """The command that ran ``res`` (``fedlabels run ...``, from its provenance) or, for a
    run started from Python, its method, dataset, model and the settings it changed from
    ``fedlabels run``'s defaults (the seed always): enough to run it again."""
    import shlex

    from fedlabels.reporting.plots import changed_options
    from fedlabels.runs.config import RunConfig
    from fedlabels.runs.spec import by_name

    line = (res.extra.get("provenance") or {}).get("command_line")
    if isinstance(line, list) and all(isinstance(a, str) for a in line):
        return shlex.join(line)
    config = res.config or {}
    defaults = {k: p.default for k, p in by_name(RunConfig).items()}
    shown = {"method": res.method, "dataset": res.dataset, "model": config.get("model"),
             **{k: v for k, v in config.items() if k in defaults and k not in (
                 "method", "dataset", "model", "options") and v != defaults[k]},
             "seed": res.seed, **changed_options(res)}
    return "from Python: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()
                                        if v is not None)


def guarantee_text(res: RunResult) -> str:
    """What the run's ``privacy`` says: ``none`` and why, or the guarantee, its (ε, δ),
    against whom, the neighbouring datasets it is stated for and what it leaves outside
    (``privacy.outside_guarantee``: each value's name and why)."""
    privacy = res.extra.get("privacy") or {}
    guarantee = privacy.get("guarantee") or "not stated"
    if guarantee == "none" or not privacy.get("guarantee_against"):
        reason = privacy.get("reason")
        return f"{guarantee}" + (f" ({reason})" if reason else "")
    eps, delta = privacy.get("epsilon"), privacy.get("delta")
    spent = "" if eps is None else f", ε = {fmt(eps)}" + (
        "" if delta is None else f", δ = {delta:g}")  # 1.4e-5 is not 1e-05
    calibrated = privacy.get("calibrated_by")  # the server ledger's: σ given, or by whom
    if isinstance(calibrated, str):
        spent += "; σ given" if calibrated == "given" else f"; σ calibrated by {calibrated}"
    outside = [o for o in privacy.get("outside_guarantee") or [] if isinstance(o, dict)]
    left = "; ".join(f"{o.get('name')} ({o.get('reason')})" for o in outside)
    return (f"{guarantee}{spent}; against {privacy['guarantee_against']}; neighbouring "
            f"datasets: {privacy.get('neighbouring') or 'not stated'}"
            + (f"; outside the guarantee: {left}" if left else ""))


def _provenance(res: RunResult) -> str:
    """A result's list entry on the page after its name: how it ran and its guarantee."""
    esc = html.escape
    return (f"<br>ran: <code>{esc(how_it_ran(res))}</code>"
            f"<br>privacy: {esc(guarantee_text(res))}")

