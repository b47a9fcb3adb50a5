"""The figures of ``fedlabels report``, as base64 PNG: accuracy per round, the headline
metric (``--metric``) against communication and against privacy (ε, VUL). A configuration
has one colour in all of them.

Local-only and centralized configurations are references: horizontal lines in the round
and privacy plots, and points at a marked "no communication" position left of the log
communication axis.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.reporting.plots import (
    REFERENCE_DASH,
    REFERENCE_METHODS,
    TITLE_WIDTH,
    draw_constant_balanced,
    draw_majority,
    draw_training_mean,
    guarantee_line,
    hidden_note,
    learnt_note,
    markevery,
    new_figure,
    participating,
    place_legend,
    round_axes,
    run_settings,
    seeds_status,
    style,
    where_it_ends,
    wrap,
)

if TYPE_CHECKING:
    from fedlabels.reporting.report import Configuration
    from fedlabels.results.run_result import RunResult


#: what the figures' bars are (the VUL's horizontal ones: its 95 % interval)
BARS = "bars: ± std over seeds"


def png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")  # all of a wide legend
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _is_reference(conf: Configuration) -> bool:
    return conf.runs[0].method in REFERENCE_METHODS


def colours(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """One colour per configuration (its row's position), the same in every figure."""
    return {r["configuration"]: style(i)[0] for i, r in enumerate(rows)}


def markers(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """One marker per configuration: with its colour, unlike any other's."""
    return {r["configuration"]: style(i)[1] for i, r in enumerate(rows)}


def _label(conf: Configuration) -> str:
    """The configuration's name and, where some of its runs were interrupted or extended,
    how many (``[2 of 3 seeds interrupted]``; one run's status as it is)."""
    status = conf.statuses()
    said = seeds_status(conf.runs) if len(conf.runs) > 1 else (status[0] if status else None)
    return conf.label + (f" [{said}]" if said else "")


def _ends(conf: Configuration, rounds: np.ndarray) -> str:
    """``at the end``, or ``at round N`` where a run of the configuration was interrupted
    (``rounds``: the rounds its curve has)."""
    interrupted = [r for r in conf.runs if where_it_ends(r) != "at the end"]
    return where_it_ends(interrupted[0], int(rounds[-1])) if interrupted else "at the end"


def curves_figure(configs: Sequence[Configuration],
                  rows: Sequence[dict[str, Any]]) -> Any | None:
    """Mean over seeds of the mean client accuracy (RMSE) per round, ± std band; references
    as horizontal lines at their final value. A curve that hides one drawn before it says
    so (:func:`~fedlabels.reporting.plots.hidden_note`), as ``fedlabels plot`` does."""
    regression = all(c.regression for c in configs)
    curves = [(c, *c.curve()) for c in configs if not _is_reference(c)]
    curves = [t for t in curves if len(t[1])]
    key = "rmse_mean" if regression else "accuracy_mean"
    refs = [(c, r[key]) for c, r in zip(configs, rows, strict=True)
            if _is_reference(c) and r[key] is not None]
    if not curves and not refs:
        return None
    colour, marker = colours(rows), markers(rows)
    fig, ax = new_figure()
    drawn: dict[tuple[Any, ...], str] = {}  # a curve's points -> the first drawn there
    for conf, rounds, mean, std in curves:
        privacy = conf.runs[0].extra.get("privacy") or {}
        if len(eps := conf.privacy_values("epsilon")) > 1:  # the seeds' mean ε spent
            privacy = {**privacy, "epsilon": float(np.mean(eps))}
        (line,) = ax.plot(rounds, mean, marker=marker[conf.label], ms=4,
                          color=colour[conf.label], markevery=markevery(len(rounds)),
                          label=f"{_label(conf)}: {mean[-1]:.3f} {_ends(conf, rounds)}"
                                f"{guarantee_line(privacy)}"
                                + ("" if regression else learnt_note(conf.runs))
                                + hidden_note(drawn, list(zip(rounds, mean, strict=True)),
                                              conf.label))
        ax.fill_between(rounds, mean - std, mean + std, alpha=0.15, color=line.get_color())
    for conf, value in refs:
        ax.axhline(value, ls=REFERENCE_DASH[conf.runs[0].method], lw=1.6,
                   color=colour[conf.label], label=f"{_label(conf)}: {value:.3f} (reference)"
                   + ("" if regression else learnt_note(conf.runs)))
    if not curves:
        ax.set_xlim(0.5, 1.5)
    # as fedlabels plot draws them (the majority class was left out where rows differed)
    round_axes(ax, [r for c in configs for r in c.runs], regression)
    what = "RMSE" if regression else "accuracy"
    better = "; lower is better" if regression else ""
    ax.set_ylabel(f"mean client test {what}\n(band: ± std over seeds{better})")
    ax.set_title(f"Test {what} per round: does collaboration beat the references?",
                 fontsize=11)
    place_legend(fig, ax)
    return fig


#: the y axis of the summary figures, by the rows' metric (``--metric``'s headings else)
_NAME = {"accuracy": "accuracy", "rmse": "RMSE (target's units)"}


def metric_name(m: str) -> str:
    """How the summary figures name the metric ``m`` (``balanced accuracy``, ``AUROC``)."""
    from fedlabels.core.metric_names import METRIC_NAMES

    return _NAME.get(m) or METRIC_NAMES.get(m, m)


def _headed(m: str) -> str:
    """:func:`metric_name` to begin a title with (``AUROC`` kept as it is)."""
    name = "RMSE" if m == "rmse" else metric_name(m)
    return name[:1].upper() + name[1:]


def utility(rows: Sequence[dict[str, Any]], metric: str = "accuracy") -> str:
    """What the summary figures plot: ``rmse`` when the rows are regression runs (they have
    no accuracy), so a regression report keeps them; else ``metric`` (the report's
    ``--metric``) where a row has it, else ``accuracy``."""
    regression = rows and all(r["accuracy_mean"] is None and r["rmse_mean"] is not None
                              for r in rows)
    if regression:
        return "rmse"
    return metric if any(r.get(f"{metric}_mean") is not None for r in rows) else "accuracy"


def _draw_baseline(ax: Any, runs: Sequence[RunResult], m: str) -> None:
    """The baseline of ``runs`` for the metric ``m``, as the round figure and ``fedlabels
    plot`` draw it: points at it learnt next to nothing. The majority class's accuracy, the
    balanced accuracy 1/C any constant answer scores, or, for RMSE, the training mean's;
    none for another metric (no majority-class baseline recorded for it)."""
    if m == "rmse":
        draw_training_mean(ax, runs)
    elif m == "accuracy":
        draw_majority(ax, runs)
    elif m == "balanced_accuracy":
        draw_constant_balanced(ax, runs)


def communication_figure(rows: Sequence[dict[str, Any]],
                         runs: Sequence[RunResult] = (),
                         metric: str = "accuracy") -> Any | None:
    """Final ``metric`` (:func:`utility`) against bytes uploaded per client per round
    (log); runs that send nothing sit at a marked "0" position left of the smallest positive
    value. ``None`` for fewer than two configurations (a lone point on an empty panel).
    ``runs``: the rows' results, whose baseline is drawn (:func:`_draw_baseline`)."""
    m = utility(rows, metric)
    points = [r for r in rows if r["bytes_up_per_client_round"] is not None
              and r[f"{m}_mean"] is not None]
    if len(points) < 2:  # one point compares with nothing: its bytes are in the table
        return None
    positive = [r["bytes_up_per_client_round"] for r in points
                if r["bytes_up_per_client_round"] > 0]
    lo = min(positive) if positive else 100.0
    zero_at = 10 ** (np.floor(np.log10(lo)) - 1)  # a decade left of the first tick
    colour, marker = colours(rows), markers(rows)
    fig, ax = new_figure()
    for r in points:
        x = r["bytes_up_per_client_round"] or zero_at
        ax.errorbar(x, r[f"{m}_mean"], yerr=r[f"{m}_std"] or 0,
                    xerr=(r["bytes_up_per_client_round_std"] or 0) if x != zero_at else None,
                    fmt=marker[r["configuration"]], ms=7, capsize=3,
                    color=colour[r["configuration"]], label=r["configuration"])
    ax.set_xscale("log")
    ax.axvline(zero_at * 3, color="0.6", lw=0.8, ls="--")
    ticks = [t for t in ax.get_xticks() if t > zero_at * 3]
    ax.set_xticks([zero_at, *ticks], ["0\n(none)", *(_bytes(t) for t in ticks)])
    ax.set_xlim(zero_at / 2, max([lo, *positive]) * 3)
    _draw_baseline(ax, runs, m)
    ax.set_xlabel("bytes uploaded per client per round (log scale; 0 = no communication)")
    ax.set_ylabel(f"final mean client test {metric_name(m)}\n({BARS})")
    ax.set_title(f"{_headed(m)} against communication: "
                 f"{'lower' if m == 'rmse' else 'higher'} and further left is better",
                 fontsize=11)
    place_legend(fig, ax)
    return fig


def _bytes(value: float) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value:g} B"


def _x_bars(r: dict[str, Any], x: str, xerr: str | tuple[str, str]) -> tuple[float, float]:
    """How far a point's horizontal bar reaches left and right of ``r[x]``: ± ``r[xerr]``,
    or out to the interval ``(r[low], r[high])``; none where the row has no such value."""
    if isinstance(xerr, str):
        return (r[xerr] or 0.0, r[xerr] or 0.0)
    low, high = (r[k] for k in xerr)
    if low is None or high is None:
        return 0.0, 0.0
    return max(0.0, r[x] - low), max(0.0, high - r[x])


def side_by_side(xs: Sequence[float], span: float) -> list[float]:
    """Shifts that draw points at (nearly) one x side by side, centred on it, 1.5 % of the
    axis ``span`` apart: at one ε, DP-FedCT's and DP-FedAvg's points and bars hid each
    other. Points within 1 % of the span of the group's first are one x."""
    groups: list[list[int]] = []
    for i in sorted(range(len(xs)), key=lambda i: xs[i]):
        if groups and xs[i] - xs[groups[-1][0]] <= 0.01 * span:
            groups[-1].append(i)
        else:
            groups.append([i])
    shifts = [0.0] * len(xs)
    for group in groups:
        for k, i in enumerate(group):
            shifts[i] = (k - (len(group) - 1) / 2) * 0.015 * span
    return shifts


def privacy_figure(rows: Sequence[dict[str, Any]], x: str, xerr: str | tuple[str, str],
                   xlabel: str, title: str, missing: str, guarantee: bool = False,
                   runs: Sequence[RunResult] = (), metric: str = "accuracy") -> Any | None:
    """Final ``metric`` (:func:`utility`) against a privacy measure; configurations
    without one (non-private runs, references) are horizontal lines, so a single private
    point still has context.
    ``xerr``: the key of a ± spread, or the (low, high) keys of an interval around ``x``;
    ``guarantee``: each point's legend entry states its guarantee (unit, against whom);
    ``runs``: the rows' results, whose baseline is drawn (:func:`_draw_baseline`): private
    points at it cost nothing only because nothing was learnt.
    """
    m = utility(rows, metric)
    points = [r for r in rows if r[x] is not None and r[f"{m}_mean"] is not None]
    if not points:
        return None
    colour, marker = colours(rows), markers(rows)
    fig, ax = new_figure()
    hi = max(r[x] + _x_bars(r, x, xerr)[1] for r in points)
    lo = min(r[x] - _x_bars(r, x, xerr)[0] for r in points)
    limits = (0, hi * 1.25 if hi > 0 else 1) if x.startswith("epsilon") else \
        (min(0.45, lo - 0.02), max(1.0, hi + 0.02))  # ε from 0: one point is not centred
    shifts = side_by_side([r[x] for r in points], limits[1] - limits[0])
    for r, shift in zip(points, shifts, strict=True):
        left, right = _x_bars(r, x, xerr)
        ax.errorbar(r[x] + shift, r[f"{m}_mean"], yerr=r[f"{m}_std"] or 0,
                    xerr=[[left], [right]], fmt=marker[r["configuration"]], ms=7,
                    capsize=3,
                    color=colour[r["configuration"]],
                    label=r["configuration"] + (f"\n    {r['guarantee']}"
                                                if guarantee and r["guarantee"] else ""))
        if len(points) == 1:
            ax.annotate(f"{r[x]:.3g}", (r[x], r[f"{m}_mean"]), textcoords="offset points",
                        xytext=(8, 6), fontsize=9)
    others = [r for r in rows if r[x] is None and r[f"{m}_mean"] is not None]
    for r in others:  # a reference is dashed as in the round figure; others dash-dotted
        ax.axhline(r[f"{m}_mean"], lw=1.2, ls=REFERENCE_DASH.get(r["method"], "-."),
                   color=colour[r["configuration"]],
                   label=f"{r['configuration']}: {r[f'{m}_mean']:.3f} ({missing})")
    _draw_baseline(ax, runs, m)
    ax.set_xlim(*limits)
    if any(shifts):
        xlabel += "\npoints at one value are drawn side by side, 1.5 % of the axis apart"
    if guarantee and len({r["guarantee"] for r in points}) > 1:
        xlabel += "\nnot comparable between guarantees of other units or adversaries (legend)"
    ax.set_xlabel(xlabel)
    bars = BARS if isinstance(xerr, str) else f"vertical {BARS}"
    ax.set_ylabel(f"final mean client test {metric_name(m)}\n({bars})")
    ax.set_title(title, fontsize=11)
    place_legend(fig, ax)
    return fig


def what_ran(configs: Sequence[Configuration]) -> str:
    """``breast_cancer, m = 5, R = 3, seeds 0, 1, 2``: the datasets, clients, partition
    (where not ``iid``), rounds, participation and dropout (where set) and seeds of the runs
    (each value once), for titles."""
    runs = [r for c in configs for r in c.runs]

    def each(values: Sequence[Any]) -> str:
        return ", ".join(str(v) for v in dict.fromkeys(values))

    seeds = sorted({r.seed for r in runs})
    curves = [r for r in runs if r.method not in REFERENCE_METHODS]
    rounds = each([(r.config or {}).get("rounds", len(r.rounds)) for r in curves] or ["-"])
    partitions = [str(run_settings(r).get("partition") or "iid") for r in runs]
    took_part = [participating(r) for r in curves]
    how = "".join(f", {key} {each([t[key] or full for t in took_part])}"
                  for key, full in (("participation", 1), ("dropout", 0))
                  if any(t[key] for t in took_part))
    return (f"{each([r.dataset for r in runs])}, m = "
            f"{each([r.federation.get('n_clients', '?') for r in runs])}, "
            + (f"partition {each(partitions)}, " if set(partitions) != {"iid"} else "")
            + f"R = {rounds}{how}, "
            f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")


def _subtitle(fig: Any, text: str) -> Any:
    """``text`` as a second title line (what ran), below the figure's own."""
    if fig is not None:
        ax = fig.axes[0]
        ax.set_title(f"{ax.get_title()}\n{wrap(text, TITLE_WIDTH)}", fontsize=11)
    return fig


#: what the ε axis shows: the ε each run spent (``privacy.epsilon``), which is below its
#: ``epsilon`` budget where clients sat rounds out or the run stopped early
EPSILON_AXIS = ("ε spent over the run, as accounted (at most its epsilon budget; lower is "
                "more private)")


def figures(configs: Sequence[Configuration], rows: Sequence[dict[str, Any]],
            metric: str = "accuracy") -> list[tuple[str, str]]:
    """(heading, base64 PNG) of every figure that has data; each title names what ran.
    The communication, ε and VUL figures plot ``metric`` (the report's ``--metric``; the
    rounds record accuracy only, so the round figure plots accuracy)."""
    eps = [r for r in rows if r["epsilon_mean"] is not None]
    what = "RMSE" if configs and all(c.regression for c in configs) else "Accuracy"
    summary = _headed(utility(rows, metric)) if rows else what
    runs = [r for c in configs for r in c.runs]
    made = [
        (f"{what} per round", curves_figure(configs, rows)),
        (f"{summary} against communication", communication_figure(rows, runs, metric)),
        ("Privacy against utility: ε (DP runs)", privacy_figure(
            rows, "epsilon_mean", "epsilon_std", EPSILON_AXIS,
            "One privacy level: its cost against the non-private runs (lines)"
            if len({r["epsilon_mean"] for r in eps}) == 1
            else f"{summary} against ε: the price of privacy", "no DP", guarantee=True,
            runs=runs, metric=metric)),
        ("Privacy against utility: VUL (audited runs)", privacy_figure(
            rows, "vul_mean", ("vul_low", "vul_high"), "VUL: membership attack ROC AUC "
            "(0.5 = no leak); horizontal bars: its 95 % interval, as in the table",
            f"{summary} against measured leakage: further left is more private",
            "not audited", runs=runs, metric=metric)),
    ]
    ran = what_ran(configs)
    return [(title, png(_subtitle(fig, ran))) for title, fig in made if fig is not None]
