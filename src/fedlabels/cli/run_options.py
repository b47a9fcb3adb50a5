"""The run options shared by ``run``, ``audit`` and ``deploy``, and the config they make."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedlabels.cli.method_flags import add_method_flags, check_flags, method_options
from fedlabels.core.errors import FedLabelsError

_RUN_KEYS = ("method", "dataset", "clients", "model", "rounds", "period", "unlabeled",
             "private", "private_per_client", "test", "partition", "unlabeled_shift",
             "public_pca", "seed", "eval_every",
             "output", "insecure_reproducible_noise", "sep", "features", "drop",
             "text_column",
             "task", "target_range",
             "malicious", "attack", "device", "precision", "image_size", "image_column")


#: simulator-only keys that only ``fedlabels run`` takes (flags added in cli/run.py)
_PARTICIPATION_KEYS = ("participation", "dropout", "deadline")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of ``run`` (also ``audit``, ``deploy local``, ``deploy prepare``)."""
    p.add_argument("--config", help="TOML file with the same keys as these options "
                                    "(method options in an [options] table)")
    p.add_argument("--method", help="a registered method (listed below; default fedct)")
    p.add_argument("--dataset", help="registered dataset or csv:PATH:TARGET "
                                     "(default breast_cancer)")
    p.add_argument("--clients", type=int, help="number of clients m (default 5)")
    p.add_argument("--sep", help="field separator of a csv: table (default ','; e.g. ';' "
                                 "or '\\t')")
    p.add_argument("--features", help="comma-separated feature columns of a table to use "
                                      "(default: all but the target)")
    p.add_argument("--drop", help="comma-separated columns of a table to leave out (e.g. an "
                                  "ID or date column)")
    p.add_argument("--text-column", metavar="NAME",
                   help="the text column of a csv: table, used as the only feature (text "
                        "models such as tfidf)")
    p.add_argument("--task", choices=("classification", "regression"),
                   help="the task of a csv: table (default: the dataset's; classification "
                        "for csv:)")
    p.add_argument("--target-range", metavar="LO,HI",
                   help="public range of a regression target (default: the table's range)")
    p.add_argument("--model", help="model spec, one or one per client, e.g. dt or "
                                   "'mlp(hidden=512-512)' or dt,rf,logreg,dt,rf (default: the "
                                   "method's: mlp for methods that average parameters or "
                                   "distil soft labels, else decision_tree)")
    p.add_argument("--rounds", type=int, help="communication rounds R (default 20)")
    p.add_argument("--period", type=int,
                   help="local steps b per round for torch models (default 50)")
    p.add_argument("--unlabeled", type=int, help="size of the public unlabeled set U")
    p.add_argument("--private", type=int, help="total private examples over all clients")
    p.add_argument("--private-per-client", type=int, help="private examples per client")
    p.add_argument("--test", type=int, help="test-set size (datasets without a test split)")
    p.add_argument("--partition", help="iid | dirichlet:A1,A2 | shards:K | quantity:A[,MIN] "
                                       "| powerlaw:A[,MIN] | column:NAME (default iid)")
    p.add_argument("--unlabeled-shift", type=float, metavar="S",
                   help="draw U with class proportions (1-S) p + S u_H, half of the classes "
                        "favoured (0..1; default 0: U like the private data); the shift is "
                        "measured in the result (simulator only)")
    p.add_argument("--public-pca", type=int, metavar="K",
                   help="project every feature vector onto the top K principal components "
                        "of U, whitened (fitted on U's features only: no privacy cost; "
                        "default: none)")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--eval-every", type=int, help="evaluate every k rounds (default 1)")
    p.add_argument("--output", help="JSON result path, X.json; X.rounds.csv and X.models.npz "
                                    "go beside it (default: a name unique to the "
                                    "configuration under results/)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace output files that exist (default: refuse)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--insecure-reproducible-noise", action="store_true", default=None,
                   help="INSECURE, tests/debugging only: derive all DP noise and other "
                        "secret randomness from --seed so runs repeat exactly; the result "
                        "then says privacy.guarantee = none (simulator only)")
    p.add_argument("--malicious", type=int, metavar="K",
                   help="K malicious clients (below half), drawn from --seed (simulator only; "
                        "default 0)")
    p.add_argument("--attack", metavar="ATTACK",
                   help="what the malicious clients send: flip | random | constant[:K] | "
                        "targeted[:S:T] (weight methods: flip = sign-flipped update, constant "
                        "= scaled update, random = Gaussian update; default flip)")
    p.add_argument("--device", metavar="DEVICE",
                   help="where torch models train: auto (CUDA when present) | cpu | cuda "
                        "(clients round-robin over the GPUs) | cuda:N (default cpu)")
    p.add_argument("--precision", metavar="P",
                   help="fp32 | bf16 (autocast of torch models' forward passes; default fp32)")
    p.add_argument("--image-size", metavar="HxW",
                   help="resize the images of an imagefolder: dataset or a csv: image "
                        "column to HxW (default: they must all have one size)")
    p.add_argument("--image-column", metavar="NAME",
                   help="the image-path column of a csv: table, read as the only feature")
    add_method_flags(p)


def config_from_args(args: argparse.Namespace) -> Any:
    """The validated :class:`~fedlabels.runs.config.RunConfig`; method options are checked here,
    before any data is loaded."""
    from fedlabels.methods import get_method
    from fedlabels.runs.config import RunConfig, load_config

    given: dict[str, Any] = {k: getattr(args, k) for k in _RUN_KEYS
                             if getattr(args, k) is not None}
    opts, flagged = method_options(args)
    if flagged.get("teachers") is not None:  # PATE-style methods: the teachers are the clients
        given.setdefault("clients", flagged["teachers"])
    if opts or flagged:
        given["options"] = {**opts, **flagged}
    given.update({k: getattr(args, k) for k in (*_PARTICIPATION_KEYS, "batch_clients")
                  if getattr(args, k, None) is not None})
    if args.config:
        cfg = load_config(args.config, **given)
    else:
        try:
            cfg = RunConfig(**given)
        except TypeError as exc:
            raise FedLabelsError(str(exc)) from None
    if (not hasattr(args, "participation") or getattr(args, "audit", False)) and any(
            getattr(cfg, k) is not None for k in _PARTICIPATION_KEYS):
        raise FedLabelsError("participation, dropout and deadline are simulator settings that "
                             "only `fedlabels run` (without --audit) takes; remove them.")
    if not hasattr(args, "participation") and cfg.batch_clients != "auto":
        raise FedLabelsError("batch_clients is a simulator setting that only `fedlabels run` "
                             "takes; remove it.")
    if not hasattr(args, "participation") and cfg.unlabeled_shift:
        raise FedLabelsError("unlabeled_shift is a simulator setting that only `fedlabels "
                             "run` takes; remove it.")
    if (not hasattr(args, "participation") or getattr(args, "audit", False)) and (
            cfg.malicious or cfg.attack is not None):
        raise FedLabelsError("malicious and attack are simulator settings that only "
                             "`fedlabels run` (without --audit) takes; remove them.")
    method = get_method(cfg.method)
    check_flags(method, flagged)
    method.parse_options(cfg.options)  # unknown keys and bad values: an error, no data loaded
    return cfg


def checked_outputs(cfg: Any, args: argparse.Namespace, *, models: bool = True,
                    tag: str = "", **extra: str) -> dict[str, Path]:
    """The output files of a run, checked before any data is loaded (see
    :mod:`fedlabels.core.files`): the result JSON, its rounds table, the models file (with
    ``models``) and ``extra`` files named by the result's suffix (``roc=".roc.png"``)."""
    from fedlabels.core.files import check_outputs, result_path, run_inputs, run_outputs

    out = result_path(cfg.output) if cfg.output else default_output(cfg, tag)
    files = run_outputs(out)
    if not models:
        del files["models file"]
    files.update({name: out.with_suffix(suffix) for name, suffix in extra.items()})
    check_outputs(files, run_inputs(cfg.dataset, args.config),
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

        from fedlabels.core.errors import FedLabelsWarning
        from fedlabels.results.models_file import save_models

        try:
            with writing(str(files["models file"])):
                save_models(result, files["result"])
        except FedLabelsError as exc:  # a model type the safe format does not write
            if "cannot save" not in str(exc):
                raise
            warnings.warn(FedLabelsWarning(f"the models file was not written ({exc}); "
                                           "`fedlabels predict` and `inspect` need it."),
                          stacklevel=2)


def add_metric_flag(p: argparse.ArgumentParser) -> None:
    """``--metric``: the headline column of the printed table (commands that print one)."""
    from fedlabels.core.clinical import SCALAR_METRICS

    p.add_argument("--metric", choices=SCALAR_METRICS, default="accuracy",
                   help="the headline column of the printed table: its mean, min and max "
                        "over clients (all are in the result's `clinical` entry; default "
                        "accuracy)")


def show_table(result: Any, metric: str = "accuracy") -> None:
    """Print a run's table row (headline ``metric``) and, on stderr, its caveats."""
    import sys

    from fedlabels.results import format_table, table_warnings

    row = result.summary_row()
    print(format_table([row], metric=metric))
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


def interrupted_message(result: Any) -> str:
    """What an interrupted run kept, in one line."""
    if not result.rounds:
        return "fedlabels: interrupted before the first round completed; nothing to keep " \
               "but the configuration, which was saved"
    last = result.rounds[-1].round
    evaluated = "" if result.final is not None else " (none evaluated yet)"
    return f"fedlabels: interrupted after round {last}; the rounds completed so far " \
           f"were saved{evaluated}"


def default_output(cfg: Any, tag: str = "") -> Path:
    """``results/METHOD_DATASET_MODEL_mCLIENTS_PARTITION_seedSEED[TAG]_HASH.json``.

    ``HASH`` is the first 6 hex digits of the SHA-256 of the whole configuration (every key
    but ``output``, method options included), so runs that differ in anything — rounds, an
    option — get different names, and the same configuration always gets the same one.
    """
    import hashlib
    import json

    dataset = cfg.dataset
    if dataset.startswith("csv:"):  # csv:dir/patients.csv:target -> csv-patients-target
        table, _, target = dataset[len("csv:"):].rpartition(":")
        dataset = f"csv-{Path(table).stem}-{target}"
    settings = {k: v for k, v in cfg.to_dict().items() if k != "output"
                and not (k in _NAMELESS_DEFAULTS and v == _NAMELESS_DEFAULTS[k])}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    parts = [cfg.method, _slug(dataset), _slug(str(cfg.model or "default")),
             f"m{cfg.clients}", _slug(cfg.partition), f"seed{cfg.seed}{tag}",
             digest.hexdigest()[:6]]
    return Path("results") / ("_".join(parts) + ".json")


#: settings added later: at their defaults they leave a run's default name as it was
_NAMELESS_DEFAULTS: dict[str, Any] = {"device": "cpu", "precision": "fp32",
                                      "batch_clients": "auto",
                                      "image_size": None, "image_column": None}


def _slug(text: str, limit: int = 32) -> str:
    """Only letters, digits, ``.``, ``_`` and ``-``: 'mlp(hidden=64-64)' -> 'mlp-hidden-64-64'."""
    import re

    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-.")[:limit] or "x"


def run_parser(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand with the run options and the list of methods in its epilog."""
    from fedlabels.cli.method_flags import methods_epilog

    p = sub.add_parser(name, epilog=methods_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
    add_run_options(p)
    return p
