"""The ``fedlabels`` command line: run, datasets, fetch, models, demo, plot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fedlabels.errors import FedLabelsError


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with the same keys as these options")
    p.add_argument("--method", help="fedct | fedavg | local | centralized (default fedct)")
    p.add_argument("--dataset", help="registered dataset or csv:PATH:TARGET "
                                     "(default breast_cancer)")
    p.add_argument("--clients", type=int, help="number of clients m (default 5)")
    p.add_argument("--model", help="model spec, one or one per client, e.g. dt or "
                                   "'mlp(hidden=512-512)' or dt,rf,logreg,dt,rf")
    p.add_argument("--rounds", type=int, help="communication rounds R (default 20)")
    p.add_argument("--period", type=int,
                   help="local steps b per round for torch models (default 50)")
    p.add_argument("--unlabeled", type=int, help="size of the public unlabeled set U")
    p.add_argument("--private", type=int, help="total private examples over all clients")
    p.add_argument("--private-per-client", type=int, help="private examples per client")
    p.add_argument("--test", type=int, help="test-set size (datasets without a test split)")
    p.add_argument("--partition", help="iid | dirichlet:A1,A2 | shards:K (default iid)")
    p.add_argument("--quorum", type=float,
                   help="qualified-majority quorum tau in (0, 1]; omit for a majority vote")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--eval-every", type=int, help="evaluate every k rounds (default 1)")
    p.add_argument("--output", help="JSON result path (a CSV of rounds goes beside it)")
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="method-specific option (repeatable), e.g. --opt epsilon=1.0")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


_RUN_KEYS = ("method", "dataset", "clients", "model", "rounds", "period", "unlabeled",
             "private", "private_per_client", "test", "partition", "quorum", "seed",
             "eval_every", "output")


def _config_from_args(args: argparse.Namespace) -> Any:
    from fedlabels.config import RunConfig, load_config

    given = {k: getattr(args, k) for k in _RUN_KEYS if getattr(args, k) is not None}
    options = dict(getattr(args, "options", None) or {})
    for item in getattr(args, "opt", []) or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise FedLabelsError(f"--opt {item!r}: use KEY=VALUE.")
        from fedlabels.learners.specs import _parse_value

        options[key.strip().replace("-", "_")] = _parse_value(value)
    if options:
        given["options"] = options
    if args.config:
        return load_config(args.config, **given)
    try:
        return RunConfig(**given)
    except TypeError as exc:
        raise FedLabelsError(str(exc)) from None


def _default_output(cfg: Any) -> Path:
    safe = cfg.dataset.replace("/", "_").replace(":", "_")
    return Path("results") / f"{cfg.method}_{safe}_seed{cfg.seed}.json"


def cmd_run(args: argparse.Namespace) -> int:
    from fedlabels.api import run_config
    from fedlabels.results import format_table

    cfg = _config_from_args(args)
    out = Path(cfg.output) if cfg.output else _default_output(cfg)
    result = run_config(cfg, progress=not args.no_progress)
    result.save_json(out)
    result.save_csv(out.with_suffix(".csv"))
    print(format_table([result.summary_row()]))
    print(f"\nresult: {out}  (rounds: {out.with_suffix('.csv')})")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from fedlabels.data.registry import REGISTRY

    print(f"{'name':<15} {'status':<12} {'default |U| / private / test':<30} description")
    for name, info in sorted(REGISTRY.items()):
        status = "bundled" if not info.needs_fetch else (
            "fetched" if info.is_available() else "NOT FETCHED")
        d = info.defaults
        sizes = " / ".join("rest" if d.get(k) is None and k != "n_test" else
                           ("official" if d.get(k) is None else str(d.get(k)))
                           for k in ("n_unlabeled", "n_private", "n_test"))
        print(f"{name:<15} {status:<12} {sizes:<30} {info.description} [{info.source}]")
    print("\nalso: csv:PATH:TARGET for any table. Fetch with `fedlabels fetch NAME`.")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from fedlabels.data import fetch_dataset

    for name in args.names:
        fetch_dataset(name, from_deb=args.from_deb)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from fedlabels.learners import MODELS

    for name, entry in sorted(MODELS.items()):
        aliases = f" ({', '.join(entry.aliases)})" if entry.aliases else ""
        print(f"{name + aliases:<36} {entry.description}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from fedlabels.plots import plot_accuracy
    from fedlabels.results import load_result

    results = [load_result(p) for p in args.results]
    print(plot_accuracy(results, args.output))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fedlabels.demo import run_demo

    run_demo(Path(args.output_dir), seed=args.seed, progress=not args.no_progress)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedlabels",
        description="Federated learning that shares labels, not models.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run one method on one dataset")
    _add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("datasets", help="list datasets and whether they are fetched")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("fetch", help="fetch a dataset into the local cache")
    p.add_argument("names", nargs="+", help="dataset names, e.g. fashion_mnist")
    p.add_argument("--from-deb", help="use an already downloaded .deb instead of apt-get")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("models", help="list model names usable in --model")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("plot", help="plot accuracy per round of one or more results")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("-o", "--output", default="results/accuracy.png")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("demo", help="FedCT vs FedAvg vs local vs centralized on breast_cancer")
    p.add_argument("--output-dir", default="results/demo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except FedLabelsError as exc:
        print(f"fedlabels: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("fedlabels: interrupted", file=sys.stderr)
        code = 130
    if argv is None:
        sys.exit(code)
    return code


