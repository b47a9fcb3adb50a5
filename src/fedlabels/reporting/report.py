"""``fedlabels report``: compare runs in one self-contained HTML page and a summary table.

Results that differ only in their seed form one *configuration*; each row of the summary
table (and of the page's table) is one configuration with the mean ± standard deviation
over its seeds. The page embeds its plots as base64 PNG and loads nothing else, so it can
be mailed or archived as one file::

    fedlabels report results/*.json -o results/report       # report.html + summary.csv
    fedlabels report results/*.json -o cmp.html             # cmp.html + cmp.summary.csv

The page is drawn by :mod:`fedlabels.reporting.report_page`, its figures by
:mod:`fedlabels.reporting.report_figures`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import write_atomic
from fedlabels.reporting.plots import configuration, configuration_key, setting_differences
from fedlabels.results import RunResult, load_result


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

    def clinical_values(self, metric: str) -> list[float]:
        """Each run's mean over clients of a clinical metric (runs that have it)."""
        return [float(v) for r in self.runs if (v := ((r.extra.get("clinical") or {})
                .get("metrics", {}).get(metric) or {}).get("mean")) is not None]

    def statuses(self) -> list[str]:
        """``interrupted after round 1 of 12`` / ``extended ...`` of the runs it applies to."""
        from fedlabels.results.caveats import rounds_status

        return [f"seed {r.seed}: {s}" if len(self.runs) > 1 else s
                for r in self.runs if (s := rounds_status(r)) is not None]

    def privacy_values(self, key: str) -> list[float]:
        return [float(v) for r in self.runs
                if isinstance(v := (r.extra.get("privacy") or {}).get(key), int | float)
                and math.isfinite(v)]


def _label(res: RunResult, datasets: int) -> str:
    from fedlabels.reporting.plots import run_name

    return run_name(res) + (f" · {res.dataset}" if datasets > 1 else "")


def group_runs(results: Sequence[RunResult]) -> list[Configuration]:
    """Configurations in first-seen order, each one's runs in seed order (so its means,
    spreads and seed list do not depend on the order the files were given in). Where two
    would read alike, their labels name the settings that tell them apart (``rounds=5``)."""
    groups: dict[str, Configuration] = {}
    datasets = len({r.dataset for r in results})
    for res in results:
        groups.setdefault(configuration_key(res),
                          Configuration(_label(res, datasets), [])).runs.append(res)
    out = list(groups.values())
    for conf in out:
        conf.runs.sort(key=lambda r: r.seed)
    by_label: dict[str, list[Configuration]] = {}
    for conf in out:
        by_label.setdefault(conf.label, []).append(conf)
    for alike in (confs for confs in by_label.values() if len(confs) > 1):
        configs = [configuration(c.runs[0]) for c in alike]
        for conf, text in zip(alike, setting_differences(configs), strict=True):
            conf.label += f" ({text})"
    return out


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (``None`` for fewer than two values); equal values
    give exactly that value and 0 (numpy's mean of equal floats can be off by an ulp, which
    showed a spread such as ``7.999997 ± 0.000000``)."""
    if not values:
        return None, None
    a = np.asarray(values, dtype=float)
    if a.size > 1 and (a == a[0]).all():
        return float(a[0]), 0.0
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else None


def _vul_interval(conf: Configuration) -> tuple[float | None, float | None]:
    """A 95 % interval of the VUL: the audit's own (bootstrap) when one seed; otherwise the
    t-interval of the mean over seeds, mean ± t(0.975, n-1) · std / √n, clipped to [0, 1]."""
    from fedlabels.core.intervals import t_half_width

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
    values = conf.privacy_values("vul")
    mean, std = _mean_std(values)
    if mean is None or std is None:
        return None, None
    half = t_half_width(values)
    return max(0.0, mean - half), min(1.0, mean + half)


def summary_rows(configs: Sequence[Configuration]) -> list[dict[str, Any]]:
    """One row per configuration; ``None`` where a run has no such value."""
    rows = []
    for conf, settings in zip(configs, setting_cells(configs), strict=True):
        first = conf.runs[0]
        acc, acc_std = _mean_std(conf.final_accuracies())
        rmse, rmse_std = _mean_std(conf.final_values("mean_rmse"))
        r2, r2_std = _mean_std(conf.final_values("mean_r2"))
        per_round, per_round_std = _mean_std([r.mean_bytes_up_per_client_round()
                                              for r in conf.runs])
        totals = [(r.communication.get("bytes_up_total", 0)
                   + r.communication.get("bytes_down_total", 0))
                  / max(1, int(r.federation.get("n_clients") or 1)) for r in conf.runs]
        guarantees = dict.fromkeys(_guarantee(r) for r in conf.runs)
        eps, eps_std = _mean_std(conf.privacy_values("epsilon"))
        vul, vul_std = _mean_std(conf.privacy_values("vul"))
        low, high = _vul_interval(conf)
        deltas = conf.privacy_values("delta") if any(g not in (None, "none")
                                                      for g in guarantees) else []
        rows.append({
            "configuration": conf.label, "method": first.method, "dataset": first.dataset,
            "models": ";".join(sorted(set(first.models))),
            "clients": first.federation.get("n_clients"), "n_seeds": len(conf.runs),
            "seeds": " ".join(str(s) for s in conf.seeds), **settings,
            "accuracy_mean": acc, "accuracy_std": acc_std,
            "rmse_mean": rmse, "rmse_std": rmse_std, "r2_mean": r2, "r2_std": r2_std,
            "bytes_up_per_client_round": per_round,
            "bytes_up_per_client_round_std": per_round_std,
            "bytes_per_client_total": _mean_std(totals)[0],
            "guarantee": " / ".join(g for g in guarantees if g) or None,
            "epsilon_mean": eps, "epsilon_std": eps_std,
            "delta": max(deltas) if deltas else None,
            "vul_mean": vul, "vul_std": vul_std, "vul_low": low, "vul_high": high,
            **_clinical_cells(conf), "status": "; ".join(conf.statuses()) or None,
            **_placement(conf),
        })
    return rows


#: run settings every summary row names, whether or not the configurations differ in them
_ALWAYS = ("partition", "rounds")
#: run settings that other columns give already (``models``, ``clients``) or that are
#: not one value (``options``: a column each)
_OWN_COLUMNS = ("method", "dataset", "model", "clients", "options")


def setting_cells(configs: Sequence[Configuration]) -> list[dict[str, Any]]:
    """Each configuration's settings as summary columns, so that rows can be joined and
    pivoted without parsing their labels: ``partition`` and ``rounds`` always, every other
    run setting in which the configurations differ, and ``options.NAME`` for each method
    option some configuration changed from its default (its value as the run recorded it;
    empty where it is unset or the method has no such option)."""
    from fedlabels.reporting.plots import changed_options

    settings = [configuration(c.runs[0]) for c in configs]
    differ = sorted({k for s in settings for k in s if k not in _OWN_COLUMNS
                     and k not in _ALWAYS and len({_cell(t.get(k)) for t in settings}) > 1})
    options = sorted({k for c in configs for k in changed_options(c.runs[0])})
    return [{**{k: _cell(s.get(k)) for k in (*_ALWAYS, *differ)},
             **{f"options.{k}": _cell((s.get("options") or {}).get(k)) for k in options}}
            for s in settings]


def _cell(value: Any) -> Any:
    """A setting as one CSV cell: a list of names as ``a,b``, a table as JSON."""
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _guarantee(res: RunResult) -> str | None:
    """``none``, or the guarantee with its unit and the party it holds against (``formal,
    client-level, against anyone observing the global models; not the server``): ε of
    different units and adversaries must not read alike."""
    from fedlabels.results.run_result import guarantee_text

    privacy = res.extra.get("privacy") or {}
    kind = privacy.get("guarantee") or (res.extra.get("threat_model") or {}).get("guarantee")
    if kind in (None, "none"):
        return kind
    return guarantee_text({**privacy, "guarantee": kind})


def _placement(conf: Configuration) -> dict[str, Any]:
    """Where the configuration's runs trained: ``device`` (each device used, with the GPU's
    name) and ``precision``, from the results' ``device`` entries (``None`` if none has one,
    as in results written before it was recorded)."""
    devices: dict[str, None] = {}
    precisions: dict[str, None] = {}
    for run in conf.runs:
        record = run.extra.get("device") or {}
        names = record.get("device_names") or {}
        for device in record.get("devices") or []:
            devices[f"{device} ({names[device]})" if device in names else str(device)] = None
        if record.get("precision"):
            precisions[str(record["precision"])] = None
    return {"device": "; ".join(devices) or None, "precision": "; ".join(precisions) or None}


def _clinical_cells(conf: Configuration) -> dict[str, Any]:
    from fedlabels.core.clinical import SCALAR_METRICS
    from fedlabels.results.caveats import majority_baseline, training_mean_baseline

    out: dict[str, Any] = {}
    for name in SCALAR_METRICS[1:]:
        out[f"{name}_mean"], out[f"{name}_std"] = _mean_std(conf.clinical_values(name))
    # measured on the test set only: an estimate from the training classes (a result
    # without one) is another number than the one the other rows of that test set show
    bases = [b["accuracy"] for r in conf.runs
             if (b := majority_baseline(r)) is not None and not b.get("estimated")]
    out["majority_baseline"] = float(np.mean(bases)) if bases and not conf.regression else None
    means = [b for r in conf.runs if (b := training_mean_baseline(r)) is not None]
    for key in ("rmse", "r2"):  # the mean over the seeds that record it
        out[f"mean_baseline_{key}"] = float(np.mean([b[key] for b in means])) if means else None
    return out


def configuration_warnings(configs: Sequence[Configuration],
                           rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """(configuration, sentence) for every caveat: interrupted or extended runs, accuracy
    near chance, and federated runs below the local-only reference of the same dataset,
    models and number of clients."""
    from fedlabels.results.caveats import below_reference, run_warnings

    out = [(c.label, (f"seed {r.seed}: " if len(c.runs) > 1 else "") + w)
           for c in configs for r in c.runs for w in run_warnings(r)]
    for c in configs:  # copies of one run would pass for seeds that agree
        seeds = [r.seed for r in c.runs]
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        if twice:
            out.append((c.label, f"seed(s) {', '.join(map(str, twice))} appear in more than "
                                 "one result of this configuration: each is counted as a "
                                 "seed, which narrows the spread; drop the copies."))
    local = {_reference_key(c.runs[0]): (c, row["accuracy_mean"])
             for c, row in zip(configs, rows, strict=True) if c.runs[0].method == "local"}
    for conf, row in zip(configs, rows, strict=True):
        ref = local.get(_reference_key(conf.runs[0]))
        if conf.runs[0].method in ("local", "centralized") or ref is None:
            continue
        n_test = {r.federation.get("n_test") for r in (*conf.runs, *ref[0].runs)}
        line = below_reference(row["accuracy_mean"], ref[1], ref[0].label,
                               n_test=n_test.pop() if len(n_test) == 1 else None,
                               differences=_paired_differences(conf, ref[0]))
        if line:
            out.append((conf.label, line))
    return out


def _paired_differences(conf: Configuration, ref: Configuration) -> list[float]:
    """Final mean accuracy of ``conf`` minus ``ref``'s, per seed both ran once (the same
    seed splits the data alike, so the pairs share test and client sets)."""
    def by_seed(c: Configuration) -> dict[int, float]:
        seeds = c.seeds
        return {r.seed: float(f["mean_accuracy"]) for r in c.runs
                if seeds.count(r.seed) == 1 and (f := r.final) and "mean_accuracy" in f}

    mine, theirs = by_seed(conf), by_seed(ref)
    return [mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))]


def _reference_key(res: RunResult) -> str:
    return json.dumps([res.dataset, sorted(set(res.models)), res.federation.get("n_clients"),
                       configuration(res).get("partition")], default=str)


def mixed_datasets_warning(datasets: Sequence[str]) -> str:
    """The sentence that says a report holds runs of several datasets, whose values are
    not comparable across them."""
    return (f"these results are of {len(datasets)} datasets ({', '.join(datasets)}): their "
            "accuracies and costs are comparable only between rows of one dataset, though "
            "the figures draw them on shared axes (a report per dataset compares them).")


def report_outputs(output: str | Path) -> dict[str, Path]:
    """``X.html`` -> ``X.html`` and ``X.summary.csv``; any other path is a directory for
    ``report.html`` and ``summary.csv``."""
    if not str(output).strip():
        raise FedLabelsError("-o is empty: give a page name ending in .html or a directory.")
    out = Path(output).expanduser()
    if out.suffix.lower() in (".html", ".htm"):
        return {"report": out, "summary table": out.with_name(out.stem + ".summary.csv")}
    if out.suffix and not out.is_dir():
        raise FedLabelsError(f"-o {output}: give a page name ending in .html (its summary "
                             "goes beside it as NAME.summary.csv) or a directory for "
                             "report.html and summary.csv.")
    return {"report": out / "report.html", "summary table": out / "summary.csv"}


def _learnt_nothing(configs: Sequence[Configuration]) -> set[str]:
    """The configurations whose every run's models learnt next to nothing."""
    from fedlabels.results.caveats import learnt_next_to_nothing

    return {c.label for c in configs if c.runs and all(map(learnt_next_to_nothing, c.runs))}


def write_report(paths: Sequence[str | Path | RunResult], output: str | Path,
                 overwrite: bool = False, metric: str = "accuracy",
                 overwrite_hint: str = "--overwrite"
                 ) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """Read the results, write the page and the summary table (see :func:`report_outputs`);
    ``metric`` is the headline column. ``paths`` are result files or, from Python,
    :class:`RunResult` objects too (listed on the page by their ``repr``). Returns the paths
    written and the page's warnings as (configuration, sentence)."""
    from fedlabels.core.files import check_outputs, writing
    from fedlabels.reporting.plots import one_task
    from fedlabels.reporting.report_figures import figures
    from fedlabels.reporting.report_lead import lead_sentence
    from fedlabels.reporting.report_page import render_html

    if not paths:
        raise FedLabelsError("no results given; pass one or more result JSON files.")
    outputs = report_outputs(output)
    check_outputs(outputs, {f"result {p}": Path(p) for p in paths
                            if not isinstance(p, RunResult)},
                  overwrite=overwrite, overwrite_hint=overwrite_hint)
    unique: dict[Any, str | Path | RunResult] = {}
    repeated = []
    for p in paths:  # a file (or result) named twice (a shell glob and its name) counts once
        key = id(p) if isinstance(p, RunResult) else Path(p).expanduser().resolve()
        if key in unique:
            repeated.append(str(p) if not isinstance(p, RunResult) else repr(p))
        unique.setdefault(key, p)
    paths = list(unique.values())
    results = [p if isinstance(p, RunResult) else load_result(p) for p in paths]
    if one_task(results, "report") and metric != "accuracy":
        raise FedLabelsError(f"--metric {metric} applies to classification; these are "
                             "regression runs, whose report shows RMSE and R²: drop --metric.")
    configs = group_runs(results)
    rows = summary_rows(configs)
    warned = configuration_warnings(configs, rows)
    datasets = list(dict.fromkeys(r.dataset for r in results))
    if len(datasets) > 1:  # each row names its dataset; the figures share their axes
        warned.insert(0, ("the results given", mixed_datasets_warning(datasets)))
    if repeated:
        warned.insert(0, ("the results given", f"{', '.join(repeated[:3])} given more than "
                                               "once; each file is counted once."))
    page = render_html(rows, configs, figures(configs, rows, metric),
                       [repr(p) if isinstance(p, RunResult) else str(p) for p in paths],
                       warned, metric, runs=results,
                       lead=lead_sentence(rows, metric, all(c.regression for c in configs),
                                          idle=_learnt_nothing(configs)))
    from fedlabels.reporting.rows_csv import rows_csv

    with writing("the report"):
        write_atomic(outputs["summary table"], rows_csv(rows))
        write_atomic(outputs["report"], page)
    return outputs, warned
