"""Plots of run results (matplotlib, headless).

Legends name a run by ``method · model`` and only the options it changed from their
defaults; runs that differ only in their seed are one line, their mean over seeds; local-only
and centralized runs are references (horizontal lines), the
majority-class baseline is drawn where all runs share a dataset, and interrupted or
extended runs say so in their legend entry.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import atomic_path
from fedlabels.results import RunResult

#: methods drawn as references rather than as curves
REFERENCE_METHODS = ("local", "centralized")
#: how a reference's line is dashed, in every figure: local-only dashed, centralized dotted
REFERENCE_DASH = {"local": "--", "centralized": ":"}
#: Okabe & Ito's colour-blind-safe colours first (their yellow left out: unreadable on
#: white; matplotlib's default cycle set red against green), then 13 more, each the one of
#: tab10, Dark2 and Tol's muted colours farthest (CIELAB) from those before it and from the
#: baselines' grey, so 20 configurations have 20 colours (before, the 8th repeated the 1st)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000",
           "#4B0092", "#666600", "#E7298A", "#66A61E", "#8B0000", "#882255", "#BCBD22",
           "#9467BD", "#17BECF", "#A6761D", "#006D2C", "#B15928", "#D62728")
#: markers: with the colour, a style no other of the first 140 series has
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


#: most markers drawn on one curve: a marker on each of 3,000 rounds drew a solid bar
MAX_MARKERS = 40


def markevery(n_points: int) -> int:
    """Every how many points a curve of ``n_points`` gets a marker (at most
    :data:`MAX_MARKERS`; the line still joins every point)."""
    return max(1, -(-n_points // MAX_MARKERS))


def style(i: int) -> tuple[str, str]:
    """Colour and marker of the ``i``-th series: colours first, then markers, so series
    past the palette do not repeat an earlier one's look."""
    return PALETTE[i % len(PALETTE)], MARKERS[(i // len(PALETTE)) % len(MARKERS)]


#: longest line of a title (in 11-point text, about the figure's width)
TITLE_WIDTH = 80
#: longest line of a legend entry; longer entries are wrapped, never cut
MAX_LABEL = 56


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


def changed_options(res: RunResult) -> dict[str, Any]:
    """The method options a run set to other than their declared defaults (all recorded
    options when the method is not registered here)."""
    options = dict((res.config or {}).get("options") or {})
    try:
        from fedlabels.methods import get_method

        defaults = {i.name: i.default for i in get_method(res.method).options_class.declared()}
    except FedLabelsError:
        return options
    return {k: v for k, v in options.items() if k not in defaults or defaults[k] != v}


def model_text(res: RunResult, arguments: bool = False) -> str:
    """``decision_tree``, ``mlp`` or ``dt, rf`` (each distinct model once, arguments
    dropped; with ``arguments`` each distinct spec whole: ``cnn(arch=cifar10)``, as the
    CLI's table names a run's model so that two runs can be told apart)."""
    names = dict.fromkeys(m if arguments else m.split("(")[0] for m in res.models)
    if not names:  # a method that trains no model (label propagation)
        return "no model"
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} models"


def run_name(res: RunResult) -> str:
    """``fedct · decision_tree (quorum=0.9)``: method, model and the changed options."""
    opts = ", ".join(f"{k}={v}" for k, v in sorted(changed_options(res).items()))
    return f"{res.method} · {model_text(res)}" + (f" ({opts})" if opts else "")


def wrap(text: str, width: int = MAX_LABEL) -> str:
    """``text`` with each of its lines wrapped at ``width`` characters (continuations
    indented), so a long name is read whole, not cut; a legend's value (``0.789 at the
    end``, ``0.789 at round 59``, ``0.912 (reference)``, ``0.956 (no DP)``) is kept on one
    line (it wrapped as ``0.789 at the`` / ``end`` and ``0.956 (no`` / ``DP)``)."""
    import re
    import textwrap

    glued = re.sub(r"\S+ (?:at the end|at round \d+)|(?<!\S)\d\S* \([^()\n]{1,24}\)",
                   lambda found: found.group(0).replace(" ", "\0"), text)  # kept whole
    return "\n".join(textwrap.fill(line, width, subsequent_indent="    ",
                                    break_on_hyphens=False)
                      for line in glued.split("\n")).replace("\0", " ")


def _describe(res: RunResult) -> dict[str, str]:
    """What else can tell runs apart in a legend (``""``: the setting's default)."""
    config = res.config or {}
    return {"dataset": res.dataset,
            "clients": f"m = {res.federation.get('n_clients', config.get('clients', '?'))}",
            "partition": str(run_settings(res).get("partition", "")),
            "seed": f"seed {res.seed}",
            "rounds": f"R = {config.get('rounds', len(res.rounds))}",
            **{key: f"{key} {value}" if value else "" for key, value in sorted(
                participating(res).items())}}


def participating(res: RunResult) -> dict[str, Any]:
    """How many clients took part in a round: ``participation`` and ``dropout`` as the run
    set them (``None``: all of them)."""
    config = res.config or {}
    q = config.get("participation")
    return {"participation": None if q in (None, 1, 1.0) else q,
            "dropout": config.get("dropout") or None}


#: settings a title names when the curves share them (a reference, which runs no rounds,
#: neither shares nor breaks them), and a legend entry names where they differ
ROUND_SETTINGS = ("rounds", "participation", "dropout")


def title_text(described: Sequence[dict[str, str]], curves: Sequence[dict[str, str]],
               varying: Sequence[str]) -> str:
    """``breast_cancer, m = 50, partition dirichlet:0.5, R = 8, participation 0.3, seed 0``:
    what all runs share, the partition where it is not ``iid``, the round settings where
    they are not their defaults."""
    shared = []
    for key in ("dataset", "clients", "partition", "rounds", "participation", "dropout",
                "seed"):
        value = (curves if key in ROUND_SETTINGS else described)[0][key]
        if key in varying or not value or (key == "partition" and value == "iid"):
            continue
        shared.append(f"partition {value}" if key == "partition" else value)
    return ", ".join(shared)


def legend_labels(results: Sequence[RunResult], seeds: bool = True
                  ) -> tuple[list[str], str]:
    """One distinct label per run and a title naming what all runs share (dataset,
    clients, partition, rounds, participation, seed: :func:`title_text`).

    Labels are :func:`run_name` plus every other attribute (dataset, clients, partition,
    seed, rounds) that differs between the runs, and the run's status when it was
    interrupted or extended; runs alike in all of these are numbered. Without ``seeds``
    (``results`` stand for configurations of several seeds) no label or title names one.
    """
    from fedlabels.results.caveats import rounds_status

    described = [{**_describe(r), **({} if seeds else {"seed": ""})} for r in results]
    # a reference (local, centralized) is a line at its final value: its rounds (20 unless
    # set) neither tell it apart nor keep the curves' shared R out of the title (the
    # report's title counts the curves' alone)
    curves = [d for d, r in zip(described, results, strict=True)
              if r.method not in REFERENCE_METHODS] or described
    varying = [k for k in described[0]
               if len({d[k] for d in (curves if k in ROUND_SETTINGS else described)}) > 1]
    names = [run_name(r) for r in results]
    labels = []
    for name, d, res in zip(names, described, results, strict=True):
        alike = [e for n, e in zip(names, described, strict=True) if n == name]
        labels.append(name + "".join(  # the dataset and how many took part, else only what
            f", {d[k]}" for k in varying if d[k] and (  # tells alike names apart
                k == "dataset" or len({e[k] for e in alike}) > 1
                or (k in ROUND_SETTINGS[1:] and res.method not in REFERENCE_METHODS))))
    for label in {x for x in labels if labels.count(x) > 1}:  # the settings that differ
        at = [i for i, x in enumerate(labels) if x == label]
        shown = ("dataset", "clients", "partition", "seed", *ROUND_SETTINGS, "output",
                 "overwrite")
        configs = [{k: v for k, v in run_settings(results[i]).items() if k not in shown}
                   for i in at]
        for i, text in zip(at, setting_differences(configs), strict=True):
            labels[i] += f" ({text})" if text != "other settings" else ""
    if len(set(labels)) < len(labels):  # alike in everything: numbered
        labels = [label + f" #{i + 1}" for i, label in enumerate(labels)]
    labels = [label + (f" [{s}]" if (s := rounds_status(r)) else "")
              for label, r in zip(labels, results, strict=True)]
    return labels, title_text(described, curves, varying)


def run_settings(res: RunResult) -> dict[str, Any]:
    """The run's configuration as it ran: a Flower deployment's sites stand for the workers.
    Its ``config.engine`` is ``flower``; a result written before it said so records the
    simulator's default (``engine=simulator``) beside a ``deployment`` entry, which names it.
    A run of ``flower-simulation`` keeps its engine and workers (Ray's CPUs)."""
    config = dict(res.config or {})
    config.update(_as_built(res))
    deployed = res.extra.get("deployment")
    engine = config.get("engine")
    if isinstance(deployed, dict) and engine in (None, "simulator"):
        engine = deployed.get("engine", "flower")
    if engine == "flower":
        config["engine"] = "flower deployment"
        config["workers"] = "one per site"
    return config


#: run settings that do not change what is run: runs alike but for these are one configuration
NOT_CONFIG = ("seed", "output", "overwrite")


def configuration(res: RunResult) -> dict[str, Any]:
    """The run's settings (:func:`run_settings`) but those that do not change what is run
    (:data:`NOT_CONFIG`: its seed, where it was written)."""
    return {k: v for k, v in run_settings(res).items() if k not in NOT_CONFIG}


def configuration_key(res: RunResult) -> str:
    """What a run is, but for its seed: runs of one key are one configuration (a row of
    ``fedlabels report``, one line of a plot over seeds)."""
    return json.dumps([res.method, res.dataset, res.models, configuration(res)],
                      sort_keys=True, default=str)


def seed_groups(results: Sequence[RunResult]) -> list[list[RunResult]]:
    """``results`` by configuration (:func:`configuration_key`), in first-seen order, each
    one's runs in seed order."""
    groups: dict[str, list[RunResult]] = {}
    for res in results:
        groups.setdefault(configuration_key(res), []).append(res)
    return [sorted(g, key=lambda r: r.seed) for g in groups.values()]


def _as_built(res: RunResult) -> dict[str, Any]:
    """The partition and sizes the run's federation was built with, from its result's
    ``federation`` summary, read as ``fl.run`` records a :class:`Federation`'s
    (:func:`~fedlabels.results.built.built_settings`): the partition's canonical text
    (``dirichlet:0.5,0.5``, where ``fedlabels run`` records ``dirichlet:0.5`` as given)
    and, for the sizes a configuration left to the dataset (``None``), those built, the
    private examples as their total (``private_per_client`` asks for it another way); so a
    run by dataset name, one on a :class:`Federation` and a result of an earlier version
    read as one configuration. A federation made from arrays adds the fingerprint of its
    data (``data_sha256``), so runs on other arrays under one name stay apart."""
    from fedlabels.results.built import built_settings, data_fingerprint

    built = built_settings(res.federation or {})
    config = res.config or {}
    out: dict[str, Any] = {}
    if built["partition"] is not None:
        out["partition"] = built["partition"]
    for key in ("unlabeled", "private", "test"):
        if config.get(key) is None and key in built:
            out[key] = built[key]
    if config.get("private_per_client") is not None and "private" in built:
        out["private"], out["private_per_client"] = built["private"], None
    from fedlabels.data.loaded_with import LOADED_KEYS

    out.update({k: built[k] for k in LOADED_KEYS if k in built})  # 'a,b' read as [a, b]
    if (digest := data_fingerprint(res.federation or {})) is not None:
        out["data_sha256"] = digest
    return out


def setting_differences(configs: Sequence[dict[str, Any]]) -> list[str]:
    """For configurations that would read alike, each one's settings that tell it apart:
    ``model=mlp(hidden=64), period=20`` (nested ones by name: ``audit``)."""
    keys = sorted({k for cfg in configs for k in cfg})
    differ = [k for k in keys if len({json.dumps(cfg.get(k), sort_keys=True, default=str)
                                      for cfg in configs}) > 1]
    return [_settings(cfg, differ) for cfg in configs]


def _settings(config: dict[str, Any], keys: Sequence[str]) -> str:
    """``rounds=5, audit``: scalar settings with their value (a list of names, such as
    ``features``, as ``features=a,b``), nested ones by name, one the others have and this
    one does not as ``no audit``."""
    shown = []
    for key in keys:
        value = config.get(key)
        if key == "data_sha256" and isinstance(value, str):  # 64 hex digits: the first 12
            shown.append(f"data sha256 {value[:12]}")
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            shown.append(f"{key}={','.join(value)}")
        elif isinstance(value, dict | list):
            shown.append(key if value else f"no {key}")
        elif value is None:
            shown.append(f"no {key}")
        else:
            shown.append(f"{key}={value}")
    return ", ".join(shown) or "other settings"


def check_plot_metric(metric: str) -> None:
    """Refuse a ``metric`` other than accuracy: a round records each client's test accuracy
    alone (RMSE and R² for regression), the other metrics of ``fedlabels report --metric``
    are computed once, on the final models (``clinical.metrics``), so there is no curve of
    them to draw."""
    from fedlabels.core.errors import did_you_mean
    from fedlabels.core.metric_names import SCALAR_METRICS

    if metric not in SCALAR_METRICS:
        raise FedLabelsError(f"metric {metric!r} is not one of {', '.join(SCALAR_METRICS)}"
                             f"{did_you_mean(str(metric), SCALAR_METRICS)}.")
    if metric != "accuracy":
        raise FedLabelsError(
            f"--metric {metric} cannot be plotted per round: a round records the clients' "
            f"test accuracy only, and {metric} is computed once, on the final models; see it "
            f"with fedlabels report RESULT... -o report.html --metric {metric} "
            f"(fl.report(..., metric={metric!r})), or drop --metric.")


def write_plot(results: Sequence[RunResult | str | Path], out: Path, *,
               title: str | None = None, overwrite: bool = False,
               overwrite_hint: str = "--overwrite", metric: str = "accuracy") -> Path:
    """``fedlabels plot`` and ``fl.plot``: :func:`plot_accuracy` of results (objects or
    result files) to ``out``, after checking ``metric`` (:func:`check_plot_metric`), its
    format and that it replaces no input and, unless ``overwrite``, no existing file
    (``overwrite_hint`` says how to ask)."""
    from fedlabels.core.files import check_outputs, writing
    from fedlabels.results import load_result

    check_plot_metric(metric)
    figure_format(out)
    check_outputs({"plot": out}, {f"result {p}": Path(p) for p in results
                                  if not isinstance(p, RunResult)},
                  overwrite=overwrite, overwrite_hint=overwrite_hint)
    loaded = [p if isinstance(p, RunResult) else load_result(p) for p in results]
    with writing(str(out)):
        return plot_accuracy(loaded, out, title=title, overwrite=True)  # checked above


def plot_accuracy(results: Sequence[RunResult], path: str | Path,
                  title: str | None = None, *, overwrite: bool = False) -> Path:
    """Mean client test accuracy per round (min-max band), one line per federated run,
    local-only and centralized runs as dashed reference lines, and the majority-class
    baseline (regression: the training-mean baseline's RMSE) when all runs share a dataset.

    The format follows the suffix of ``path`` (``.png``, ``.pdf``, ``.svg``, ...); the file
    is written atomically. An existing file is replaced only with ``overwrite=True`` (as
    :func:`fedlabels.plot`), else refused before anything is drawn.
    """
    from fedlabels.core.files import check_outputs

    if not results:
        raise FedLabelsError("nothing to plot: give at least one result.")
    fmt = figure_format(path)
    check_outputs({"plot": Path(path)}, overwrite=overwrite, overwrite_hint="overwrite=True")
    fig = accuracy_figure(results, title)
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt, bbox_inches="tight")  # all of a wide legend
    finally:
        plt.close(fig)
    return path


def new_figure(width: float = 7.5, height: float = 4.6) -> tuple[Any, Any]:
    """A figure with one axes, laid out by matplotlib's constrained layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def place_legend(fig: Any, ax: Any) -> None:
    """The legend below the axes (outside them, so it never covers data), in two columns
    when short; long entries are wrapped (:func:`wrap`)."""
    handles, labels = ax.get_legend_handles_labels()
    labels = [wrap(label) for label in labels]
    if handles:  # two columns of long labels would be wider than the figure
        wide = len(labels) <= 3 or max(len(line) for label in labels
                                       for line in label.split("\n")) > 48
        fig.legend(handles, labels, fontsize=8, ncol=1 if wide else 2,
                   frameon=False, loc="outside lower center")
        rows = sum(label.count("\n") + 1 for label in labels) / (1 if wide else 2)
        fig.set_figheight(fig.get_figheight() + max(0.0, rows - 6) * 0.17)  # axes keep size


def round_axes(ax: Any, results: Sequence[RunResult], regression: bool) -> None:
    """A per-round figure's baseline (the training mean's RMSE, or the majority class) and
    its x axis of whole rounds."""
    if regression:
        draw_training_mean(ax, results)
    else:
        draw_majority(ax, results)
    ax.set_xlabel("communication round")
    whole_rounds(ax)


def whole_rounds(ax: Any) -> None:
    """Round ticks at whole rounds; a run of one or two rounds gets its rounds alone (the
    locator would tick 0.96, 0.98, ... around a single point)."""
    ax.xaxis.get_major_locator().set_params(integer=True)
    low, high = ax.get_xlim()
    first, last = max(1, math.ceil(low)), math.floor(high)
    if last - first < 2:
        ax.set_xticks(range(first, max(first, last) + 1))
        ax.set_xlim(first - 0.5, max(first, last) + 0.5)


def one_task(results: Sequence[RunResult], verb: str) -> bool:
    """Whether ``results`` are regression runs; a mix of tasks is an error (RMSE and
    accuracy share no axis or column)."""
    kinds = [r.federation.get("task") == "regression" for r in results]
    if any(kinds) and not all(kinds):
        names = sorted({r.dataset for r, k in zip(results, kinds, strict=True) if k})
        raise FedLabelsError(f"these results mix regression runs ({', '.join(names)}) and "
                             "classification runs, whose RMSE and accuracy share no axis; "
                             f"{verb} each task on its own.")
    return bool(kinds) and all(kinds)


def accuracy_figure(results: Sequence[RunResult], title: str | None = None) -> Any:
    """The figure :func:`plot_accuracy` writes (kept open for the caller): one line a run,
    or, where some runs differ only in their seed, one a configuration
    (:func:`seeds_figure`)."""
    regression = one_task(results, "plot")
    groups = seed_groups(results)
    if any(len(g) > 1 for g in groups):
        return seeds_figure(groups, regression, title)
    labels, shared = legend_labels(results)
    fig, ax = new_figure()
    curves = [(r, lb) for r, lb in zip(results, labels, strict=True)
              if r.method not in REFERENCE_METHODS]
    refs = [(r, lb) for r, lb in zip(results, labels, strict=True)
            if r.method in REFERENCE_METHODS]
    colours: dict[str, str] = {}  # a reference takes the colour of a curve with its model
    drawn: dict[tuple[Any, ...], str] = {}  # a curve's points -> the first run drawn there
    for i, (res, label) in enumerate(curves):
        colours.setdefault(model_text(res), style(i)[0])
        final = _final_value(res, regression)
        rows = res.round_rows()
        shown = label if final is None else f"{label}: {final:.3f} {where_it_ends(res)}"
        shown += guarantee_line(res.extra.get("privacy") or {})
        shown += "" if regression else learnt_note([res])
        shown += hidden_note(drawn, _points(rows, regression), label)
        _plot_run(ax, res, rows, shown, *style(i))
    if not curves:  # references only: a round axis from their own records
        ax.set_xlim(0.5, max(max((rec.round for rec in r.rounds), default=1)
                             for r, _ in refs) + 0.5)
    used: set[tuple[str, str]] = set()  # (colour, dash) of the references drawn
    for i, (res, label) in enumerate(refs):
        value = _final_value(res, regression)
        dash = REFERENCE_DASH[res.method]
        colour = colours.setdefault(model_text(res), style(len(curves) + i)[0])
        if value is None:  # in the palette too (matplotlib's own blue was drawn)
            ax.plot([], [], ls=dash, color=colour, label=f"{label} (not evaluated)")
            continue
        if (colour, dash) in used:  # another seed's reference of the model: drawn alike
            colour = next((c for c in PALETTE if (c, dash) not in used), colour)
        used.add((colour, dash))
        ax.axhline(value, ls=dash, lw=1.6, color=colour,
                   label=f"{label}: {value:.3f} (reference)"
                         + ("" if regression else learnt_note([res])))
    round_axes(ax, results, regression)
    ax.set_ylabel("mean client test RMSE\n(the target's units; lower is better)" if regression
                  else "mean client test accuracy\n(band: min–max over clients)")
    what = "test RMSE per round" if regression else "test accuracy per round"
    ax.set_title(wrap(title or (f"{shared}: {what}" if shared else what.capitalize()),
                      TITLE_WIDTH), fontsize=11)  # a csv: dataset's path can be long
    place_legend(fig, ax)
    return fig


def seeds_figure(groups: Sequence[Sequence[RunResult]], regression: bool,
                 title: str | None = None) -> Any:
    """One line a configuration (``groups``: :func:`seed_groups`): the mean over its seeds
    of the mean client accuracy (RMSE) at the rounds all its seeds evaluated, in a band
    from the lowest seed's to the highest's; a reference a horizontal line at its seeds'
    mean final value. Labels as :func:`legend_labels` names the configurations, with
    ``mean of N seeds`` and how many were interrupted (``[2 of 3 seeds interrupted]``;
    the value is ``at round N`` where any was)."""
    firsts = [g[0] for g in groups]
    labels, shared = legend_labels(firsts, seeds=False)
    labels = [_of_seeds(lb, g) for lb, g in zip(labels, groups, strict=True)]
    fig, ax = new_figure()
    curves = [(g, lb) for g, lb in zip(groups, labels, strict=True)
              if g[0].method not in REFERENCE_METHODS]
    colours: dict[str, str] = {}
    for i, (runs, label) in enumerate(curves):
        colour, marker = style(i)
        colours.setdefault(model_text(runs[0]), colour)
        per_run = [dict(_points(r.round_rows(), regression)) for r in runs]
        rounds = sorted(set.intersection(*(set(p) for p in per_run)))
        seeds = _seeds_text(runs)
        if not rounds:
            ax.plot([], [], marker=marker, color=colour, label=f"{label} ({seeds}, not "
                                                              "evaluated)")
            continue
        values = np.array([[float(p[k]) for k in rounds] for p in per_run])
        mean = values.mean(axis=0)
        eps = [v for r in runs if isinstance(v := (r.extra.get("privacy") or {})
                                             .get("epsilon"), int | float)]
        privacy = {**(runs[0].extra.get("privacy") or {}),
                   **({"epsilon": float(np.mean(eps))} if eps else {})}
        (line,) = ax.plot(rounds, mean, marker=marker, ms=4, color=colour,
                          markevery=markevery(len(rounds)),
                          label=f"{label} ({seeds}): {mean[-1]:.3f} "
                                f"{_seeds_end(runs, rounds[-1])}"
                                + guarantee_line(privacy)
                                + ("" if regression else learnt_note(runs)))
        ax.fill_between(rounds, values.min(axis=0), values.max(axis=0), alpha=0.15,
                        color=line.get_color())
    if not curves:
        ax.set_xlim(0.5, 1.5)
    for i, (runs, label) in enumerate((g, lb) for g, lb in zip(groups, labels, strict=True)
                                      if g[0].method in REFERENCE_METHODS):
        finals = [v for r in runs if (v := _final_value(r, regression)) is not None]
        colour = colours.setdefault(model_text(runs[0]), style(len(curves) + i)[0])
        dash = REFERENCE_DASH[runs[0].method]
        seeds = _seeds_text(runs)
        if not finals:
            ax.plot([], [], ls=dash, color=colour, label=f"{label} (not evaluated)")
            continue
        ax.axhline(float(np.mean(finals)), ls=dash, lw=1.6, color=colour,
                   label=f"{label} ({seeds}): {np.mean(finals):.3f} (reference)")
    round_axes(ax, [r for g in groups for r in g], regression)
    what = "RMSE" if regression else "accuracy"
    ax.set_ylabel(f"mean client test {what}, mean over seeds\n(band: min–max over seeds"
                  + ("; lower is better)" if regression else ")"))
    text = f"test {what} per round over seeds"
    ax.set_title(wrap(title or (f"{shared}: {text}" if shared else text.capitalize()),
                      TITLE_WIDTH), fontsize=11)
    place_legend(fig, ax)
    return fig


#: the baselines' zorder: beneath the runs' lines and points (matplotlib draws lines at 2 and
#: a later line over an earlier one), so a run at exactly the baseline's value stays in view
BASELINE_ZORDER = 1.5


def draw_majority(ax: Any, results: Sequence[RunResult]) -> None:
    """The majority-class baseline of ``results`` when they share a dataset: a grey dash-dot
    line, or a grey band where their test sets give different values. Baselines measured on
    a run's test set are drawn; one estimated from the training classes (a run without its
    own, such as PATE's) only when no run has a measured one, and then says so (beside a
    measured one it widened the band: 0.605 to 0.612 "over the runs' test sets" for runs of
    one test set). Drawn beneath the runs (:data:`BASELINE_ZORDER`)."""
    from fedlabels.results.caveats import majority_baseline

    if len({r.dataset for r in results}) != 1:
        return
    found = [b for r in results if (b := majority_baseline(r)) is not None]
    bases = [b for b in found if not b.get("estimated")] or found
    values = sorted({round(float(b["accuracy"]), 12) for b in bases})
    names = ", ".join(f"'{n}'" for n in dict.fromkeys(str(b.get("name")) for b in bases))
    estimated = " (estimated from the training classes)" if any(
        b.get("estimated") for b in bases) else ""
    _draw_baseline(ax, values, f"majority class (always {names}): ", estimated)


def draw_constant_balanced(ax: Any, results: Sequence[RunResult]) -> None:
    """The balanced accuracy of always answering the majority class (1/C, as any constant
    answer scores; :func:`~fedlabels.results.caveats.constant_balanced_accuracy`) when the
    ``results`` share a dataset: a grey dash-dot line, or a band where their test sets have
    other numbers of classes; nothing where no run records its confusion matrices. Drawn
    beneath the runs (:data:`BASELINE_ZORDER`)."""
    from fedlabels.results.caveats import constant_balanced_accuracy

    if len({r.dataset for r in results}) != 1:
        return
    values = sorted({round(v, 12) for r in results
                     if (v := constant_balanced_accuracy(r)) is not None})
    _draw_baseline(ax, values, "majority class (any constant answer): balanced accuracy "
                   "1/C = ")


def draw_training_mean(ax: Any, results: Sequence[RunResult]) -> None:
    """The training-mean baseline of regression ``results`` when they share a dataset (the
    RMSE of always predicting the pooled private training targets' mean): a grey dash-dot
    line, or a grey band where their test sets give different values; nothing where no run
    records it (a result written before 2026-11-29). Drawn beneath the runs
    (:data:`BASELINE_ZORDER`)."""
    from fedlabels.results.caveats import training_mean_baseline

    if len({r.dataset for r in results}) != 1:
        return
    values = sorted({round(float(b["rmse"]), 12) for r in results
                     if (b := training_mean_baseline(r)) is not None})
    _draw_baseline(ax, values, "predict the training mean: RMSE ")


def _draw_baseline(ax: Any, values: Sequence[float], what: str, after: str = "") -> None:
    """A baseline's grey dash-dot line at its one value (beneath the runs:
    :data:`BASELINE_ZORDER`), or a grey band over its ``values`` where the runs' test sets
    give different ones (one run's would mislead); labelled ``what`` + the value(s) +
    ``after``; nothing without values."""
    if len(values) == 1:
        ax.axhline(values[0], color="0.45", lw=1.2, ls="-.", zorder=BASELINE_ZORDER,
                   label=f"{what}{values[0]:.3f}{after}")
    elif values:
        ax.axhspan(values[0], values[-1], color="0.45", alpha=0.12, lw=0,
                   label=f"{what}{values[0]:.3f} to {values[-1]:.3f} over the runs' test "
                         f"sets{after}")


def guarantee_line(privacy: dict[str, Any]) -> str:
    """A legend entry's second line for a run with a privacy guarantee: ``formal,
    record-level, against the server and the other clients; ε = 7.37 spent`` (the ε of
    two methods can be of other units and adversaries, and the entry's ``epsilon=8.0`` is
    the budget); ``""`` for a run without one."""
    from fedlabels.results.run_result import guarantee_text

    if privacy.get("guarantee") in (None, "none"):
        return ""
    eps = privacy.get("epsilon")
    spent = f"; ε = {eps:.2f} spent" if isinstance(eps, int | float) else ""
    return f"\n    {guarantee_text(privacy)}{spent}"


def learnt_note(runs: Sequence[RunResult]) -> str:
    """A legend entry's line for classification runs whose accuracy is not clearly above
    the majority-class line drawn beside them but whose balanced accuracy is clearly above
    chance: every run's by its test set's 95 % interval
    (:func:`fedlabels.results.caveats.balanced_above_chance`) and, for two or more runs
    (seeds), their mean's t-interval too. It states that evidence, ``balanced accuracy
    0.607 ± 0.072 (test set), above chance 0.500: it learnt``, so a curve below that line is
    not read as learning nothing, and adds ``(imbalanced classes)`` only where every run's
    are (:func:`fedlabels.results.caveats.classes_imbalanced`); ``""`` otherwise."""
    from fedlabels.core.intervals import t_half_width
    from fedlabels.results.caveats import (
        balanced_above_chance,
        chance_warning,
        classes_imbalanced,
        majority_baseline,
    )

    found = []
    for res in runs:
        clinical = res.extra.get("clinical")
        above = balanced_above_chance(clinical)
        if above is None or chance_warning((res.final or {}).get("mean_accuracy"),
                                           majority_baseline(res), clinical) is None:
            return ""
        found.append(above)
    if not found:
        return ""
    bas, chance = [f[0] for f in found], found[0][2]
    ba = float(np.mean(bas))
    if len(found) >= 2:
        half, over = t_half_width(bas), f"{len(found)} seeds"
        if ba - half <= chance:  # each run above chance, their mean not clearly so
            return ""
    else:
        half, over = found[0][1], "test set"
    why = " (imbalanced classes)" if all(classes_imbalanced(r) for r in runs) else ""
    return (f"\n    balanced accuracy {ba:.3f} ± {half:.3f} ({over}), above chance "
            f"{chance:.3f}: it learnt{why}")


def where_it_ends(res: RunResult, last: int | None = None) -> str:
    """``at the end``, or for an interrupted run ``at round 59`` (its last evaluated round,
    ``last`` where given): it did not reach the end it planned."""
    from fedlabels.results.caveats import rounds_status

    if not (rounds_status(res) or "").startswith("interrupted"):
        return "at the end"
    if last is None:
        last = int((res.final or {}).get("round") or (res.rounds[-1].round if res.rounds else 0))
    return f"at round {last}"


def seeds_status(runs: Sequence[RunResult]) -> str | None:
    """How many of a configuration's seeds ``runs`` were interrupted or extended (``2 of 3
    seeds interrupted``), or ``None`` where each ran the rounds it planned."""
    from fedlabels.results.caveats import rounds_status

    said = [s for r in runs if (s := rounds_status(r)) is not None]
    counts = {w: sum(s.startswith(w) for s in said) for w in ("interrupted", "extended")}
    return "; ".join(f"{k} of {len(runs)} seeds {w}" for w, k in counts.items() if k) or None


def _of_seeds(label: str, runs: Sequence[RunResult]) -> str:
    """A configuration's ``label`` (:func:`legend_labels` of its first seed) with the status
    of all its seeds (:func:`seeds_status`) in place of the first seed's alone."""
    from fedlabels.results.caveats import rounds_status

    if len(runs) == 1:
        return label
    first = rounds_status(runs[0])
    label = label.removesuffix(f" [{first}]") if first else label
    return label + (f" [{said}]" if (said := seeds_status(runs)) else "")


def _seeds_text(runs: Sequence[RunResult]) -> str:
    """``mean of N seeds``, or ``seed S`` for a configuration of one."""
    return f"mean of {len(runs)} seeds" if len(runs) > 1 else f"seed {runs[0].seed}"


def _seeds_end(runs: Sequence[RunResult], last: int) -> str:
    """``at the end``, or ``at round N`` (``last``, the last round all ``runs`` evaluated)
    where any of them was interrupted, not only the first."""
    ends = [where_it_ends(r, last) for r in runs]
    return next((e for e in ends if e != "at the end"), "at the end")


def _final_value(res: RunResult, regression: bool) -> float | None:
    final = res.final or {}
    value = final.get("mean_rmse" if regression else "mean_accuracy")
    return None if value is None else float(value)


def hidden_note(drawn: dict[tuple[Any, ...], str], points: Sequence[Any], name: str) -> str:
    """`` (the same curve as X)`` when ``points`` equal those of X, drawn before, which the
    new curve hides; else ``""``. ``drawn`` collects the curves drawn so far."""
    key = tuple(tuple(round(float(v), 6) for v in p) for p in points)
    first = drawn.setdefault(key, name)
    return f" (the same curve as {first})" if first != name and key else ""


def _evaluated(rows: Sequence[dict[str, Any]], column: str) -> list[dict[str, Any]] | None:
    """The rows (:meth:`RunResult.round_rows`) with a value in ``column`` (``None``, NaN and
    a missing key are none); ``None`` where no row has the column."""
    if not any(column in row for row in rows):
        return None
    return [row for row in rows if not _missing(row.get(column))]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float | np.floating) and math.isnan(value))


def _values(rows: Sequence[dict[str, Any]], column: str) -> np.ndarray:
    return np.asarray([row.get(column) for row in rows], dtype=float)


def _rounds(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.asarray([row["round"] for row in rows])


def _points(rows: Sequence[dict[str, Any]], regression: bool) -> list[tuple[Any, Any]]:
    """The (round, value) points a run's curve draws (``rows``: its ``round_rows()``)."""
    column = "rmse_mean" if regression else "acc_mean"
    kept = _evaluated(rows, column) or []
    return [(row["round"], row[column]) for row in kept]


def _plot_run(ax: Any, res: RunResult, rows: Sequence[dict[str, Any]], label: str,
              colour: str, marker: str = "o") -> None:
    """One run's curve from ``rows`` (its ``round_rows()``)."""
    regression = _evaluated(rows, "rmse_mean")
    if regression is not None:  # regression: the mean client RMSE per round
        ax.plot(_rounds(regression), _values(regression, "rmse_mean"),
                marker=marker, ms=4, label=label, color=colour,
                markevery=markevery(len(regression)))
        return
    kept = _evaluated(rows, "acc_mean")
    if kept is None:  # stopped before its first evaluation: an empty entry
        ax.plot([], [], marker=marker, ms=4, color=colour, label=f"{label} (not evaluated)")
        return
    rounds = _rounds(kept)
    mean = _values(kept, "acc_mean")
    (line,) = ax.plot(rounds, mean, marker=marker, ms=4, label=label,
                      color=colour, markevery=markevery(len(kept)))
    ax.fill_between(rounds, _values(kept, "acc_min"), _values(kept, "acc_max"), alpha=0.15,
                    color=line.get_color())
    if kept and (res.extra.get("interrupted") or "interrupted" in label):
        ax.plot(rounds[-1:], mean[-1:], marker="X", ms=9,
                color=line.get_color(), ls="none")
