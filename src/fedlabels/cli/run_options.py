"""The run options shared by ``run``, ``audit`` and ``deploy``, and the config they make."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedlabels.cli.method_flags import add_method_flags, check_flags, method_options
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.spec import add_run_flags, declared


def add_run_options(p: argparse.ArgumentParser, *, simulator: bool = False,
                    progress: bool = True) -> None:
    """The run parameters' flags (generated from
    :class:`~fedlabels.runs.config.RunConfig`; with ``simulator`` the simulator-only ones
    too), ``--config``, ``--overwrite``, ``--no-progress`` (unless a command that runs
    nothing: not ``progress``) and the method flags."""
    p.add_argument("--config", help="TOML file with the same keys as these options "
                                    "(method options in an [options] table)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace output files that exist (default: refuse)")
    if progress:
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    from fedlabels.runs.config import RunConfig

    add_run_flags(p, RunConfig, simulator=simulator)
    add_method_flags(p)


class _Renamed(argparse.Action):
    """A former flag: a one-line error that names what replaced it."""

    def __init__(self, option_strings: list[str], dest: str, instead: str = "",
                 **kwargs: Any) -> None:
        self.instead = instead
        super().__init__(option_strings, dest, help=argparse.SUPPRESS,
                         default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string} was replaced: {self.instead}")


#: former flags of ``fedlabels run`` and what replaced them
RENAMED = {
    "--resume": (1, "continue a run with `fedlabels resume RESULT.json [--rounds N]`"),
    "--audit": (0, "audit a run with `fedlabels audit` (same run flags)"),
    "--attack": (1, "say how malicious clients poison with --poison (and how many with "
                    "--malicious)"),
    "--attacks": (1, "choose membership-inference attacks with `fedlabels audit "
                     "--mia-attacks`"),
}


def add_renamed_flags(p: argparse.ArgumentParser,
                      only: tuple[str, ...] = tuple(RENAMED)) -> None:
    """Former flags (``only`` these), each an error naming its replacement."""
    for flag in only:
        nargs, instead = RENAMED[flag]
        p.add_argument(flag, action=_Renamed, nargs=nargs, instead=instead)


def config_from_args(args: argparse.Namespace, *, simulator: bool = False) -> Any:
    """The validated :class:`~fedlabels.runs.config.RunConfig`; method options are checked
    here, before any data is loaded. Without ``simulator`` (``audit``, ``deploy``) the
    simulator-only parameters (from a TOML file) are an error."""
    from fedlabels.methods import get_method
    from fedlabels.runs.config import RunConfig, load_config

    given: dict[str, Any] = {info.name: getattr(args, info.name) for info in declared(RunConfig)
                             if getattr(args, info.name, None) is not None}
    opts, flagged = method_options(args)
    if flagged.get("teachers") is not None:  # PATE-style methods: the teachers are the clients
        given.setdefault("clients", flagged["teachers"])
    if opts or flagged:
        given["options"] = {**opts, **flagged}
    cfg = load_config(args.config, **given) if args.config else RunConfig(**given)
    if not simulator:
        from fedlabels.runs.spec import by_name

        defaults = RunConfig.__dataclass_fields__
        extra = [name for name, info in by_name(RunConfig).items() if info.simulator_only
                 and getattr(cfg, name) != defaults[name].default]
        if extra:
            raise FedLabelsError(f"{', '.join(extra)}: simulator settings that only "
                                 "`fedlabels run` takes; remove them.")
    method = get_method(cfg.method)
    check_flags(method, flagged)
    # unknown keys and bad values, and the client count they refuse: an error, no data loaded
    from fedlabels.runs.federation import check_before_data

    check_before_data(cfg, method, method.parse_options(cfg.options))
    return cfg


def checked_outputs(cfg: Any, args: argparse.Namespace, *, models: bool = True,
                    tag: str = "", hashed: Mapping[str, Any] | None = None,
                    **extra: str) -> dict[str, Path]:
    """The output files of a run, checked before any data is loaded (see
    :mod:`fedlabels.core.files`): the result JSON, its rounds table, the models file (with
    ``models``) and ``extra`` files named by the result's suffix (``roc=".roc.png"``);
    ``tag`` and ``hashed`` as :func:`default_output` takes them."""
    from fedlabels.core.files import check_outputs, result_path, run_inputs, run_outputs

    out = result_path(cfg.output) if cfg.output else default_output(cfg, tag, hashed)
    files = run_outputs(out)
    if not models:
        del files["models file"]
    files.update({name: out.with_suffix(suffix) for name, suffix in extra.items()})
    check_outputs(files, run_inputs(cfg.dataset, args.config, cfg.public),
                  overwrite=getattr(args, "overwrite", False))
    return files


def save_result(result: Any, files: dict[str, Path]) -> None:
    """Write the result JSON, its rounds table and (if planned and present) the models;
    a failed write is a one-line error."""
    from fedlabels.core.files import writing

    with writing(str(files["result"])):
        result.save_json(files["result"], overwrite=True)
    with writing(str(files["rounds table"])):
        result.save_csv(files["rounds table"], overwrite=True)
    if "models file" in files and result.client_models:  # for `fedlabels inspect`
        import warnings

        from fedlabels.core.errors import FedLabelsWarning, user_stacklevel
        from fedlabels.results.model_format import UnsavableModelError
        from fedlabels.results.models_file import save_models

        try:
            with writing(str(files["models file"])):
                save_models(result, files["result"])
        except UnsavableModelError as exc:  # a model the safe format does not write
            warnings.warn(FedLabelsWarning(f"the models file was not written ({exc}); "
                                           "`fedlabels predict` and `inspect` need it."),
                          stacklevel=user_stacklevel())


def add_metric_flag(p: argparse.ArgumentParser) -> None:
    """``--metric``: the headline column of the printed table (commands that print one)."""
    from fedlabels.core.metric_names import SCALAR_METRICS

    p.add_argument("--metric", choices=SCALAR_METRICS, default="accuracy",
                   help="the headline column of the printed table: its mean, min and max "
                        "over clients (all are in the result's `clinical` entry; default "
                        "accuracy)")


def note_progress_metric(args: argparse.Namespace) -> None:
    """Before a run whose progress is shown, with ``--metric`` other than accuracy: a line on
    stderr (where progress goes) saying that each round's progress is the mean accuracy, the
    one classification metric the rounds record, and that ``--metric``'s is the final
    models', in the table at the end."""
    import sys

    from fedlabels.runs.progress import progress_mode

    metric = getattr(args, "metric", "accuracy")
    if metric == "accuracy" or progress_mode(not args.no_progress, sys.stderr) == "off":
        return
    print(f"progress shows each round's mean test accuracy, the one metric the rounds record; "
          f"--metric {metric} is the final models', in the table at the end.",
          file=sys.stderr, flush=True)


def add_trust_module_flag(p: argparse.ArgumentParser) -> None:
    """``--trust-module MODULE`` (repeatable): rebuild a run's own network by importing it."""
    p.add_argument("--trust-module", action="append", default=[], metavar="MODULE",
                   help="a run of your own network (--model module:MODULE:FACTORY): import "
                        "MODULE (from PYTHONPATH, as the run did) and call its factory to "
                        "rebuild the network; this runs MODULE's code, so give it only for "
                        "code you trust (repeatable; a package covers its modules)")


def show_table(result: Any, metric: str = "accuracy") -> None:
    """Print a run's table row (headline ``metric``) and, on stderr, its caveats."""
    import sys

    from fedlabels.reporting.plots import model_text
    from fedlabels.results import format_table, table_warnings

    row = result.summary_row()  # method/model spec (`cnn(arch=cifar10)`, not only `cnn`)
    label = f"{row['method']}/{model_text(result, arguments=True)}" if result.models \
        else row["method"]
    print(format_table([{**row, "method": label}], metric=metric))
    clinical = result.extra.get("clinical") or {}
    if metric != "accuracy" and row.get("mean_rmse") is not None:
        print(f"fedlabels: warning: --metric {metric} applies to classification; a regression run "
              "reports RMSE and R²", file=sys.stderr)
    elif metric != "accuracy" and row.get(f"mean_{metric}") is None:
        if clinical.get("unavailable") or not clinical:
            why = clinical.get("unavailable") or "a Flower deployment keeps the models at " \
                "the sites"
        elif metric == "auroc":
            why = str(clinical.get("auroc_scores")).removeprefix("n/a: ")
        else:
            why = "it applies to binary tasks only"
        print(f"fedlabels: warning: --metric {metric} is n/a for this run: {why}", file=sys.stderr)
    for line in table_warnings([row]):
        print(line, file=sys.stderr)


def interrupted_message(result: Any, resume: str | None = None) -> str:
    """What an interrupted run kept, in one line; ``resume``: the command that continues
    it (``fedlabels resume R.json``), where its checkpoint was kept."""
    if not result.rounds:
        return "fedlabels: interrupted before the first round completed; nothing to keep " \
               "but the configuration, which was saved"
    last = result.rounds[-1].round
    evaluated = "" if result.final is not None else " (none evaluated yet)"
    kept = result.extra.get("provenance", {}).get("checkpoints", {}).get("last_round")
    resumes = f"; `{resume}` continues it" if resume else ""
    if kept is not None and kept != last:
        resumes = f"; its checkpoint holds round {kept}, where " \
                  f"`{resume or 'fedlabels resume'}` continues"
    return f"fedlabels: interrupted after round {last}; the rounds completed so far " \
           f"were saved{evaluated}{resumes}"


def default_output(cfg: Any, tag: str = "", hashed: Mapping[str, Any] | None = None) -> Path:
    """``results/METHOD_DATASET_MODEL_mCLIENTS_PARTITION_seedSEED[TAG]_HASH.json``.

    ``HASH`` is the first 6 hex digits of the SHA-256 of the whole configuration (every key
    but ``output`` and how the run is executed, ``workers`` and ``engine``: the same result;
    method options included), so runs that differ in anything — rounds, an
    option — get different names, and the same configuration always gets the same one.
    ``hashed``: a command's own settings besides the run's (the audit's threat and counts),
    hashed with them (a plain run's name is unchanged).
    """
    import hashlib
    import json

    dataset = cfg.dataset
    if dataset.startswith("csv:"):  # csv:dir/patients.csv:target -> csv-patients-target
        from fedlabels.core.files import csv_parts

        table, target = csv_parts(dataset)
        dataset = f"csv-{Path(table).stem}-{target.replace(':', '-')}"
    from fedlabels.runs.config import RunConfig
    from fedlabels.runs.spec import hashed_settings

    settings = hashed_settings(RunConfig, {k: v for k, v in cfg.to_dict().items()
                                           if k not in ("output", "workers", "engine")})
    if hashed:
        settings = {**settings, **hashed}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    parts = [cfg.method, _slug(dataset), _slug(str(cfg.model or "default")),
             f"m{cfg.clients}", _slug(cfg.partition), f"seed{cfg.seed}{tag}",
             digest.hexdigest()[:6]]
    return Path("results") / ("_".join(parts) + ".json")


def _slug(text: str, limit: int = 32) -> str:
    """Only letters, digits, ``.``, ``_`` and ``-``: 'mlp(hidden=64-64)' -> 'mlp-hidden-64-64'.
    A longer one ends at a ``-`` rather than inside a word or number ('...-hidden-128' is not
    cut to '...-hidden-12'; the name's hash tells such runs apart)."""
    import re

    slug = re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-.")
    if len(slug) > limit:
        cut = slug[:limit]
        if slug[limit] != "-" and "-" in cut:
            cut = cut.rsplit("-", 1)[0]
        slug = cut.strip("-.")
    return slug or "x"


def run_parser(sub: Any, name: str, fill: Callable[[argparse.ArgumentParser], None], *,
               simulator: bool = False, progress: bool = True, **kwargs: Any) -> None:
    """A subcommand with the run options, the list of methods in its epilog, then what
    ``fill`` adds; all built when the subcommand is first used (:mod:`fedlabels.cli.lazy`):
    the method flags and the epilog import every method."""
    from fedlabels.cli.lazy import defer

    def build(p: argparse.ArgumentParser) -> None:
        from fedlabels.cli.method_flags import methods_epilog

        p.epilog = methods_epilog()
        add_run_options(p, simulator=simulator, progress=progress)
        fill(p)

    p = sub.add_parser(name, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
    defer(p, build)
