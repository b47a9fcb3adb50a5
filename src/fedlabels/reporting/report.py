"""``fedlabels report``: compare runs in one self-contained HTML page and a summary table.

Results that differ only in their seed form one *configuration*; each row of
``summary.csv`` (and of the page's table) is one configuration with the mean ± standard
deviation over its seeds. The page embeds its plots as base64 PNG and loads nothing else,
so it can be mailed or archived as one file::

    fedlabels report results/*.json -o results/report
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import write_atomic
from fedlabels.results import RunResult, load_result

MISSING = "—"
# config entries that do not change what is run
_NOT_CONFIG = ("seed", "output", "overwrite")


@dataclass
class Configuration:
    """Runs of one configuration (the same everything but the seed)."""

    label: str
    runs: list[RunResult]

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    def final_accuracies(self) -> list[float]:
        return self.final_values("mean_accuracy")

    def final_values(self, key: str) -> list[float]:
        """``final[key]`` of the runs that have it (``mean_rmse``, ``mean_r2`` for
        regression)."""
        return [f[key] for r in self.runs if (f := r.final) is not None and key in f]

    @property
    def regression(self) -> bool:
        return self.runs[0].federation.get("task") == "regression"

    def curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rounds, mean and std over seeds of the mean client accuracy (common rounds)."""
        per_run = [{rec.round: float(np.mean(rec.rmse or rec.accuracies or []))
                    for rec in r.rounds
                    if rec.rmse or rec.accuracies} for r in self.runs]  # regression: RMSE
        rounds = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
        acc = np.array([[p[k] for k in rounds] for p in per_run]).reshape(len(per_run), -1)
        std = acc.std(axis=0, ddof=1) if len(per_run) > 1 else np.zeros(len(rounds))
        return np.array(rounds), acc.mean(axis=0), std

    def privacy_values(self, key: str) -> list[float]:
        return [float(v) for r in self.runs
                if isinstance(v := (r.extra.get("privacy") or {}).get(key), int | float)
                and math.isfinite(v)]


def _config(res: RunResult) -> dict[str, Any]:
    return {k: v for k, v in res.config.items() if k not in _NOT_CONFIG}


def _config_key(res: RunResult) -> str:
    return json.dumps([res.method, res.dataset, res.models, _config(res)], sort_keys=True,
                      default=str)


def _label(res: RunResult) -> str:
    return f"{res.method} · {res.dataset} · {', '.join(sorted(set(res.models)))}"


def group_runs(results: Sequence[RunResult]) -> list[Configuration]:
    """Configurations in first-seen order. Where two would read alike, their labels name the
    settings that tell them apart (``rounds=5``)."""
    groups: dict[str, Configuration] = {}
    for res in results:
        groups.setdefault(_config_key(res), Configuration(_label(res), [])).runs.append(res)
    out = list(groups.values())
    by_label: dict[str, list[Configuration]] = {}
    for conf in out:
        by_label.setdefault(conf.label, []).append(conf)
    for alike in (confs for confs in by_label.values() if len(confs) > 1):
        configs = [_config(c.runs[0]) for c in alike]
        keys = sorted({k for cfg in configs for k in cfg})
        differ = [k for k in keys if len({json.dumps(cfg.get(k), sort_keys=True, default=str)
                                          for cfg in configs}) > 1]
        for conf, cfg in zip(alike, configs, strict=True):
            conf.label += f" ({_settings(cfg, differ)})"
    return out


def _settings(config: dict[str, Any], keys: Sequence[str]) -> str:
    """``rounds=5, audit``: scalar settings with their value, nested ones by name."""
    shown = []
    for key in keys:
        value = config.get(key)
        if isinstance(value, dict | list):
            shown.append(key if value else f"no {key}")
        elif value is not None:
            shown.append(f"{key}={value}")
    return ", ".join(shown) or "other settings"


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (``None`` for fewer than two values)."""
    if not values:
        return None, None
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else None


def _vul_interval(conf: Configuration) -> tuple[float | None, float | None]:
    """The audit's own interval when one seed; otherwise mean ± std over seeds."""
    lows, highs = [], []
    for r in conf.runs:
        priv = r.extra.get("privacy") or {}
        ci = priv.get("vul_ci") or priv.get("vul_interval")
        if isinstance(ci, dict):
            ci = [ci.get("low"), ci.get("high")]
        if isinstance(ci, list | tuple) and len(ci) == 2 and None not in ci:
            lows.append(float(ci[0]))
            highs.append(float(ci[1]))
    if len(conf.runs) == 1 and lows:
        return lows[0], highs[0]
    mean, std = _mean_std(conf.privacy_values("vul"))
    if mean is None or std is None:
        return None, None
    return mean - std, mean + std


def summary_rows(configs: Sequence[Configuration]) -> list[dict[str, Any]]:
    """One row per configuration; ``None`` where a run has no such value."""
    rows = []
    for conf in configs:
        first = conf.runs[0]
        acc, acc_std = _mean_std(conf.final_accuracies())
        rmse, rmse_std = _mean_std(conf.final_values("mean_rmse"))
        r2, r2_std = _mean_std(conf.final_values("mean_r2"))
        per_round, per_round_std = _mean_std([r.mean_bytes_up_per_client_round()
                                              for r in conf.runs])
        totals = [(r.communication.get("bytes_up_total", 0)
                   + r.communication.get("bytes_down_total", 0))
                  / max(1, int(r.federation.get("n_clients") or 1)) for r in conf.runs]
        guarantees = {(r.extra.get("privacy") or {}).get("guarantee")
                      or r.extra.get("threat_model", {}).get("guarantee") for r in conf.runs}
        eps, eps_std = _mean_std(conf.privacy_values("epsilon"))
        vul, vul_std = _mean_std(conf.privacy_values("vul"))
        low, high = _vul_interval(conf)
        deltas = conf.privacy_values("delta")
        rows.append({
            "configuration": conf.label, "method": first.method, "dataset": first.dataset,
            "models": ";".join(sorted(set(first.models))),
            "clients": first.federation.get("n_clients"), "n_seeds": len(conf.runs),
            "seeds": " ".join(str(s) for s in conf.seeds),
            "accuracy_mean": acc, "accuracy_std": acc_std,
            "rmse_mean": rmse, "rmse_std": rmse_std, "r2_mean": r2, "r2_std": r2_std,
            "bytes_up_per_client_round": per_round,
            "bytes_up_per_client_round_std": per_round_std,
            "bytes_per_client_total": _mean_std(totals)[0],
            "guarantee": "/".join(sorted(str(g) for g in guarantees if g)) or None,
            "epsilon_mean": eps, "epsilon_std": eps_std,
            "delta": max(deltas) if deltas else None,
            "vul_mean": vul, "vul_std": vul_std, "vul_low": low, "vul_high": high,
        })
    return rows


# ------------------------------------------------------------------ plots

def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    ax.grid(alpha=0.3)
    return fig, ax


def plot_curves(configs: Sequence[Configuration]) -> str | None:
    """Accuracy per round: mean over seeds with a ± std band."""
    curves = [(c, *c.curve()) for c in configs]
    curves = [t for t in curves if len(t[1])]
    if not curves:
        return None
    fig, ax = _figure()
    for conf, rounds, mean, std in curves:
        (line,) = ax.plot(rounds, mean, marker="o", ms=3, label=conf.label)
        ax.fill_between(rounds, mean - std, mean + std, alpha=0.15, color=line.get_color())
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("communication round")
    what = "RMSE" if all(c.regression for c, *_ in curves) else "accuracy"
    ax.set_ylabel(f"mean client test {what} (± std over seeds)")
    ax.legend(fontsize=7)
    return _png(fig)


def _scatter(rows: Sequence[dict[str, Any]], x: str, xerr: str | None, xlabel: str,
             log: bool = False) -> str | None:
    points = [r for r in rows if r[x] is not None and r["accuracy_mean"] is not None
              and (not log or r[x] > 0)]
    if not points:
        return None
    fig, ax = _figure()
    for r in points:
        ax.errorbar(r[x], r["accuracy_mean"], yerr=r["accuracy_std"] or 0,
                    xerr=(r[xerr] or 0) if xerr else None, fmt="o", capsize=3,
                    label=r["configuration"])
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final mean client accuracy")
    ax.legend(fontsize=7)
    return _png(fig)


def plots(configs: Sequence[Configuration], rows: Sequence[dict[str, Any]]
          ) -> list[tuple[str, str]]:
    """(title, base64 PNG) of every plot that has data."""
    made = [
        ("Accuracy per round", plot_curves(configs)),
        ("Accuracy against communication", _scatter(
            rows, "bytes_up_per_client_round", "bytes_up_per_client_round_std",
            "bytes uploaded per client per round (log)", log=True)),
        ("Privacy against utility: ε (DP runs)",
         _scatter(rows, "epsilon_mean", "epsilon_std", "ε (lower is more private)")),
        ("Privacy against utility: VUL (audited runs)",
         _scatter(rows, "vul_mean", "vul_std", "VUL: attack ROC AUC (0.5 = no leak)")),
    ]
    return [(title, png) for title, png in made if png is not None]


# ------------------------------------------------------------------ the page

def _fmt(value: Any, std: float | None = None, digits: int = 4) -> str:
    """A table cell: '—' when missing, ``mean ± std`` when a std is known."""
    if value is None:
        return MISSING
    if not isinstance(value, float):
        return str(value)

    def num(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.{digits}g}"

    return num(value) if std is None else f"{num(value)} ± {num(std)}"


TABLE_COLUMNS = ("configuration", "clients", "n seeds", "accuracy", "RMSE", "R²",
                 "up B/client/round",
                 "B/client total", "guarantee", "ε", "δ", "VUL", "VUL interval")


def _table_cells(r: dict[str, Any]) -> list[str]:
    interval = (MISSING if r["vul_low"] is None
                else f"[{r['vul_low']:.3f}, {r['vul_high']:.3f}]")
    return [r["configuration"], _fmt(r["clients"]), _fmt(r["n_seeds"]),
            _fmt(r["accuracy_mean"], r["accuracy_std"]), _fmt(r["rmse_mean"], r["rmse_std"]),
            _fmt(r["r2_mean"], r["r2_std"], digits=3),
            _fmt(r["bytes_up_per_client_round"], r["bytes_up_per_client_round_std"]),
            _fmt(r["bytes_per_client_total"]), _fmt(r["guarantee"]),
            _fmt(r["epsilon_mean"], r["epsilon_std"]), _fmt(r["delta"], digits=3),
            _fmt(r["vul_mean"], r["vul_std"], digits=3), interval]


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px}"
          "table{border-collapse:collapse;font-size:13px}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
          "td:first-child,th:first-child{text-align:left}"
          "img{max-width:100%;display:block;margin-bottom:1.5em}")


def render_html(rows: Sequence[dict[str, Any]], figures: Sequence[tuple[str, str]],
                sources: Sequence[str]) -> str:
    """The page: the summary table, the plots (embedded) and the result files used."""
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in TABLE_COLUMNS)
    body = "\n".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _table_cells(r))
                     + "</tr>" for r in rows)
    figs = "\n".join(f'<h2>{esc(t)}</h2>\n<img alt="{esc(t)}" '
                     f'src="data:image/png;base64,{png}">' for t, png in figures)
    files = "".join(f"<li>{esc(s)}</li>" for s in sources)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>fedlabels report</title><style>{_STYLE}</style></head><body>\n"
            f"<h1>fedlabels report</h1>\n<p>{len(sources)} results, {len(rows)} "
            "configurations; mean ± std over seeds (— where a run has no such value).</p>\n"
            f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>\n"
            f"{figs}\n<h2>Results</h2><ul>{files}</ul>\n</body></html>\n")


def report_outputs(out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir).expanduser()
    return {"report": out / "report.html", "summary table": out / "summary.csv"}


def write_report(paths: Sequence[str | Path], out_dir: str | Path,
                 overwrite: bool = False) -> dict[str, Path]:
    """Read the results, write ``report.html`` and ``summary.csv`` under ``out_dir``."""
    from fedlabels.core.files import check_outputs, writing

    if not paths:
        raise FedLabelsError("no results given; pass one or more result JSON files.")
    outputs = report_outputs(out_dir)
    check_outputs(outputs, {f"result {p}": Path(p) for p in paths}, overwrite=overwrite)
    results = [load_result(p) for p in paths]
    configs = group_runs(results)
    rows = summary_rows(configs)
    page = render_html(rows, plots(configs, rows), [str(p) for p in paths])
    import pandas as pd

    with writing("the report"):
        write_atomic(outputs["summary table"],
                     pd.DataFrame(rows).to_csv(index=False))
        write_atomic(outputs["report"], page)
    return outputs
