"""``fedlabels run`` and ``fedlabels resume``: one method on one dataset, the result written
beside its rounds; or a checkpointed run continued."""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedlabels.cli.run_options import (
    add_metric_flag,
    add_renamed_flags,
    checked_outputs,
    config_from_args,
    interrupted_message,
    note_progress_metric,
    run_parser,
    save_result,
    show_table,
)


def cmd_run(args: argparse.Namespace) -> int:
    from fedlabels.api import run_config
    from fedlabels.runs.checkpoint import SUFFIX, remove_checkpoint
    from fedlabels.runs.journal import journal_path
    from fedlabels.runs.loop import terminate_as_interrupt

    if args.dry_run:
        return _dry_run(args)
    cfg = config_from_args(args, simulator=True)
    _check_metric_for_task(cfg, args.metric)
    # before any data is loaded; the journal too: a fresh run replaces it, --no-checkpoint
    # removes it, so one left beside no checkpoint is the user's to keep without --overwrite
    extra: dict[str, Any] = {"checkpoint": SUFFIX, "journal": journal_path(Path(SUFFIX)).name}
    if args.report:
        extra.update({"report": ".html", "report summary": ".summary.csv"})
    files = checked_outputs(cfg, args, **extra)
    checkpoint: Path | None = files["checkpoint"]
    if args.no_checkpoint:
        # a checkpoint left by an earlier run of this name (replaced with --overwrite)
        # would be resumed as this run's
        remove_checkpoint(files["checkpoint"])
        checkpoint = None
    note_progress_metric(args)
    with terminate_as_interrupt(), caveats_printed_not_warned():
        # SIGTERM keeps the completed rounds, like Ctrl-C
        result = run_config(cfg, progress=not args.no_progress, checkpoint=checkpoint,
                            save=False)  # written by _finish
    return _finish(result, files, args.metric)


#: flags that ask a run to write something, refused with --dry-run (which writes nothing)
_WRITING_FLAGS = {"output": "--output", "report": "--report", "overwrite": "--overwrite",
                  "no_checkpoint": "--no-checkpoint"}


def _dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the options checked and the data loaded as the run would, the
    session built (the DP servers calibrate), the privacy statement and the plan printed;
    nothing trained, released or written (:func:`fedlabels.api.privacy_plan`)."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.results import privacy_line
    from fedlabels.results.run_result import guarantee_text

    given = [flag for key, flag in _WRITING_FLAGS.items() if getattr(args, key, None)]
    if given:
        raise FedLabelsError(f"--dry-run writes nothing; remove {', '.join(given)}.")
    cfg = config_from_args(args, simulator=True)
    from fedlabels.api import privacy_plan
    from fedlabels.runs.config import RunConfig

    params = {k: v for k, v in cfg.to_dict().items()
              if k not in ("method", "dataset", "model")
              and v != RunConfig.__dataclass_fields__[k].default}
    plan = privacy_plan(cfg.method, cfg.dataset, model=cfg.model, **params)
    privacy = plan["privacy"]
    print(f"plan: {plan['method']} on {plan['dataset']}, {plan['clients']} clients, "
          f"{plan['rounds']} round(s), |U| = {plan['n_public']} (dry run: nothing trained "
          "or written)")
    print(privacy_line(privacy) or f"privacy: {guarantee_text(privacy)}")
    if privacy.get("not_planned"):
        print(f"ε: not known before the run: {privacy['not_planned']}")
    noise = [f"{name} = {privacy[key]:.6g}" for key, name in _NOISE.items()
             if isinstance(privacy.get(key), int | float)]
    if privacy.get("calibrated_by"):
        noise.append(f"calibrated by {privacy['calibrated_by']}")
    if noise:
        print("noise: " + ", ".join(noise) + (f"; ε over {privacy['planned']}"
                                              if privacy.get("planned") else ""))
    outside = [o.get("name") for o in privacy.get("outside_guarantee") or []
               if isinstance(o, dict)]
    if outside:
        print(f"outside the guarantee, of what the method may send or keep (a finished "
              f"run lists what it sent; each reason: fl.privacy_plan(...)['privacy']): "
              f"{', '.join(str(o) for o in outside)}")
    return 0


#: the noise a DP run's ``privacy`` states, by key, as the dry run prints it
_NOISE = {"epsilon_per_round": "ε per round", "noise_multiplier": "σ (noise multiplier)",
          "noise_sigma": "σ", "flip_probability": "flip probability",
          "laplace_scale": "Laplace scale"}


def _check_metric_for_task(cfg: Any, metric: str) -> None:
    """``--metric`` picks a classification column: refuse it before a regression run, not
    after it."""
    if metric == "accuracy":
        return
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.data.registry import get_dataset

    task = cfg.task
    if task is None and not cfg.dataset.startswith(("csv:", "imagefolder:")):
        task = get_dataset(cfg.dataset).task
    if task == "regression":
        raise FedLabelsError(f"--metric {metric} applies to classification; {cfg.dataset!r} is "
                             "a regression task, whose runs report RMSE and R²: drop --metric.")


def cmd_resume(args: argparse.Namespace) -> int:
    from fedlabels.cli.resume import resumed_run

    with caveats_printed_not_warned():
        outcome = resumed_run(args)
    return _finish(*outcome, args.metric)


@contextmanager
def caveats_printed_not_warned() -> Iterator[None]:
    """Ignore the API's :class:`RunCaveatWarning`: the command prints the same lines under
    its table (:func:`show_table`)."""
    from fedlabels.core.errors import RunCaveatWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunCaveatWarning)
        yield


def _finish(result: Any, files: dict[str, Path], metric: str) -> int:
    """Write the run's files, print its table; 130 for an interrupted run."""
    from fedlabels.results import device_line, privacy_line, site_ledgers_line
    from fedlabels.runs.progress import info

    save_result(result, files)
    show_table(result, metric)
    models = files["models file"]
    info(f"\nresult: {files['result']}  (rounds: {files['rounds table']}"
         + (f"; models: {models})" if models.is_file() else ")"))
    if "report" in files:  # checked before the run; its caveats are printed under the table
        from fedlabels.reporting.report import write_report

        written, _ = write_report([files["result"]], files["report"], overwrite=True,
                                  metric=metric)
        info(f"report: {written['report']}  (summary: {written['summary table']})")
    kept = files["checkpoint"]
    if kept.is_file() and not result.extra.get("interrupted"):
        from fedlabels.runs.journal import journal_path

        journal = journal_path(kept)
        beside = (f"; its journal {journal}, {size_text(journal.stat().st_size)}"
                  if journal.is_file() else "")
        info(f"checkpoint: {kept} ({size_text(kept.stat().st_size)}{beside}), kept so that "
             f"`fedlabels resume {shlex.quote(str(files['result']))} --rounds N` can extend "
             f"the run; delete {'both' if beside else 'it'} if not")
    where = device_line(result.extra.get("device") or {})
    if where:  # only where the run asked for more than the CPU, fp32, one by one
        info(where)
    for line in (privacy_line(result.extra.get("privacy") or {}),
                 site_ledgers_line(result.extra.get("privacy") or {})):
        if line:
            info(line)
    if result.extra.get("interrupted"):  # and how to go on, where it can
        resume = f"fedlabels resume {shlex.quote(str(files['result']))}" \
            if kept.is_file() else None
        print(interrupted_message(result, resume), file=sys.stderr)
        return 130
    return 0


def _fill_run(p: argparse.ArgumentParser) -> None:
    """``run``'s flags after the run options."""
    add_metric_flag(p)
    p.add_argument("--dry-run", action="store_true",
                   help="check the options, load the data and build the run as it would "
                        "be built (DP servers calibrate their noise), print its privacy "
                        "statement and plan, and exit: nothing trained or written, no "
                        "budget spent")
    p.add_argument("--no-checkpoint", action="store_true",
                   help="write no checkpoint (X.checkpoint.npz and its journal "
                        "X.checkpoint.journal; with --overwrite, one left by an earlier "
                        "run of X is removed): the run cannot be resumed; saves writing "
                        "every client's model as the run goes")
    p.add_argument("--report", action="store_true",
                   help="also write the run's HTML report beside its result, X.html and "
                        "X.summary.csv (as `fedlabels report X.json -o X.html`; "
                        "replaced only with --overwrite)")
    add_renamed_flags(p)
    p.set_defaults(func=cmd_run)


def add_run_parser(sub: Any) -> None:
    run_parser(sub, "run", _fill_run, simulator=True, help="run one method on one dataset")
    r = sub.add_parser("resume", help="continue an interrupted run from the checkpoint beside "
                                      "its result, or extend a finished one (--rounds N)",
                       description="Continue the run of RESULT.json from the checkpoint "
                                   "beside it: RESULT.checkpoint.npz and its journal "
                                   "RESULT.checkpoint.journal (copy or move both "
                                   "together), which hold its configuration and "
                                   "history; its files are updated in place.")
    r.add_argument("result", metavar="RESULT.json", help="the result of `fedlabels run`")
    r.add_argument("--rounds", type=int, metavar="N", help="extend the run to N rounds")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    r.add_argument("--workers", type=int, metavar="N",
                   help="run the clients in N worker processes (the result is the same)")
    add_metric_flag(r)
    r.set_defaults(func=cmd_resume, unknown_hint="; resume takes RESULT.json, --rounds, "
                   "--no-progress, --workers and --metric only: the checkpoint holds the "
                   "run's configuration")


def size_text(n_bytes: int) -> str:
    """``4.2 kB``, ``42 kB``, ``420 kB``, ``96 MB``: a file's size, decimal units."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= size:
            value = n_bytes / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n_bytes} B"
