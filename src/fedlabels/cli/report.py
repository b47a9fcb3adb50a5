"""``fedlabels report`` (compare runs) and ``fedlabels predict`` (reuse a run's models)."""

from __future__ import annotations

import argparse
from typing import Any

from fedlabels.cli.run_options import add_trust_module_flag


def cmd_report(args: argparse.Namespace) -> int:
    import sys

    from fedlabels.reporting.report import write_report

    outputs, warned = write_report(args.results, args.output, overwrite=args.overwrite,
                                   metric=args.metric)
    print(f"wrote {outputs['report']} and {outputs['summary table']}")
    for conf, line in warned:
        print(f"fedlabels: warning: {conf}: {line}", file=sys.stderr)
    kept = kept_checkpoints(args.results)
    if kept:  # `fedlabels run -q` said nothing of them
        print(kept, file=sys.stderr)
    return 0


def kept_checkpoints(results: list[str], named: int = 3) -> str | None:
    """One line on the checkpoints kept beside ``results`` (``x.checkpoint.npz`` beside
    ``x.json``, and its journal): how many, their size, why they are kept and which to
    delete (the first ``named`` by name); ``None`` where there are none."""
    from pathlib import Path

    from fedlabels.cli.run import size_text
    from fedlabels.runs.checkpoint import checkpoint_path
    from fedlabels.runs.journal import journal_path

    found = dict.fromkeys(c for r in results
                          if (c := checkpoint_path(Path(r).expanduser())).is_file())
    if not found:
        return None
    journals = [j for c in found if (j := journal_path(c)).is_file()]
    size = sum(p.stat().st_size for p in [*found, *journals])
    n = len(found)
    names = ", ".join(str(c) for c in list(found)[:named]) + (
        f" and {n - named} more" if n > named else "")
    return (f"fedlabels: {n} checkpoint{'' if n == 1 else 's'} kept beside these results "
            f"({size_text(size)}{_with(journals, n)}), so that "
            f"`fedlabels resume RESULT.json --rounds N` can go on with a run; delete "
            f"RESULT.checkpoint.npz{' and RESULT.checkpoint.journal' if journals else ''} "
            f"of those you will not resume: {names}")


def cmd_predict(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.core.files import check_outputs, run_files, write_atomic, writing
    from fedlabels.data.csv_table import normalise_sep
    from fedlabels.results.predict import predict_file, run_sep, run_task

    data = Path(args.data).expanduser()
    if data.suffix.lower() == ".json" and data.is_file():  # pandas' parser error said nothing
        order = ("the arguments are the other way round: " if
                 Path(args.result).suffix.lower() != ".json" else "")
        raise FedLabelsError(f"{order}the data {args.data} is a JSON file; predict takes the "
                             "run's result first, then the CSV of rows to label: `fedlabels "
                             "predict RESULT.json DATA.csv -o OUT.csv`.")
    out = Path(args.output).expanduser()
    if out.suffix.lower() != ".csv":
        raise FedLabelsError(f"--output {args.output}: the predictions are CSV, give a path "
                             "ending in .csv.")
    check_outputs({"predictions": out},
                  {**run_files(args.result), "data file": Path(args.data)},
                  overwrite=args.overwrite)
    sep = normalise_sep(args.sep) if args.sep is not None else run_sep(args.result) or ","
    frame = predict_file(args.result, args.data, client=args.client, sep=sep,
                         image_column=args.image_column, trust_modules=args.trust_module)
    with writing("the predictions"):
        # the rows as given, and their labels: readable by no more than the data file
        write_atomic(out, frame.to_csv(index=False, sep=sep), no_wider_than=Path(args.data))
    who = (f"client {args.client}" if args.client is not None else
           "median of the clients" if run_task(args.result) == "regression" else
           "majority vote of the clients")
    print(f"wrote {len(frame)} prediction{'' if len(frame) == 1 else 's'} ({who}) to {out}")
    return 0


def _with(journals: list[Any], n: int) -> str:
    return "" if not journals else " with its journal" if n == 1 else " with their journals"


def add_report_parsers(sub: Any) -> None:
    p = sub.add_parser("report", help="compare results: a self-contained HTML page with plots "
                                      "and summary.csv (mean ± std over seeds)")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("-o", "--output", required=True,
                   help="NAME.html (the page; NAME.summary.csv beside it) or a directory "
                        "(report.html and summary.csv in it)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing page / summary table")
    from fedlabels.core.metric_names import SCALAR_METRICS

    p.add_argument("--metric", choices=SCALAR_METRICS, default="accuracy",
                   help="the headline column of the table (default accuracy)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("predict", help="label new raw data with a finished run's client models "
                                       "(majority vote, or one client's; a regression "
                                       "run: the median of the clients' predictions)")
    p.add_argument("result", help="result JSON of `fedlabels run` (its .models.npz beside it; "
                                  "loading it runs no code, except a module you trust with "
                                  "--trust-module)")
    p.add_argument("data", help="CSV with the training table's feature columns; for a run on "
                                "image files also a folder of images or one image file")
    p.add_argument("-o", "--output", required=True,
                   help="CSV to write: the rows with a `prediction` column")
    p.add_argument("--client", type=int, help="use this client's model (0-based) instead of "
                                              "the majority vote (the median on regression)")
    p.add_argument("--sep", help="field separator of the data CSV, also used for the output "
                                 "(default: the run's --sep, else ',')")
    p.add_argument("--image-column", metavar="NAME",
                   help="a run on images: the data CSV's column of image paths (relative to "
                        "its folder); default: the run's image column, else the CSV's one "
                        "text column")
    add_trust_module_flag(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.set_defaults(func=cmd_predict)
