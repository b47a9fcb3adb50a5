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
    # XCLP options (issue 8); mapped into the method options
    p.add_argument("--lsh-bits", type=int, help="XCLP: LSH length L (default 1024)")
    p.add_argument("--knn", type=int, help="XCLP: neighbours k per point (default 10)")
    p.add_argument("--alpha", type=float, help="XCLP: propagation alpha in (0, 1) "
                                               "(default 0.99)")
    p.add_argument("--secure", choices=["none", "ot", "paillier"],
                   help="XCLP: SecureHamming variant, or none for plaintext (default none)")
    p.add_argument("--labeled-fraction", type=float,
                   help="XCLP: fraction of each client's private data that keeps its labels "
                        "(default 0.1)")
    # privacy and teacher-student options (issues 4/5); mapped into the method options
    p.add_argument("--epsilon", type=float,
                   help="DP budget epsilon > 0 (dp-pate, dp-fedavg: total target; fredy: "
                        "per query; dp-fedct: pure epsilon per round)")
    p.add_argument("--delta", type=float, help="DP delta in (0, 1) (default 1e-5)")
    p.add_argument("--noise-sigma", type=float,
                   help="dp-pate: std of the GNMax Gaussian noise on each vote count")
    p.add_argument("--queries", type=int,
                   help="pate/dp-pate/fredy: number of queries from U labelled by the teachers")
    p.add_argument("--teachers", type=int,
                   help="pate/dp-pate/fredy: number of teachers (= clients)")
    # DP-FedCT / DP-FedAvg options (issue 5); mapped into the method options
    p.add_argument("--sensitivity",
                   help="dp-fedct: Hamming sensitivity s* in bits: worst (2|U|, default), "
                        "empirical, prop2 (needs --opt stability_rate=R) or a number")
    p.add_argument("--clip", type=float, help="dp-fedavg: L2 clipping norm S of each client "
                                              "update (default 1.0)")
    p.add_argument("--noise-multiplier", type=float,
                   help="dp-fedavg: noise multiplier sigma (noise std = sigma * S); or give "
                        "--epsilon to calibrate it")
    p.add_argument("--sample-rate", type=float,
                   help="dp-fedavg: Poisson client-sampling rate q in (0, 1] (default 1)")


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
    for flag, key in (("lsh_bits", "lsh_bits"), ("knn", "knn"), ("alpha", "alpha"),
                      ("secure", "secure"), ("labeled_fraction", "labeled_fraction"),
                      ("epsilon", "epsilon"), ("delta", "delta"),
                      ("noise_sigma", "noise_sigma"), ("queries", "queries"),
                      ("teachers", "teachers"), ("sensitivity", "sensitivity"),
                      ("clip", "clip"), ("noise_multiplier", "noise_multiplier"),
                      ("sample_rate", "sample_rate")):
        if getattr(args, flag, None) is not None:
            options[key] = getattr(args, flag)
    if getattr(args, "teachers", None) is not None:  # the teachers are the clients
        given.setdefault("clients", args.teachers)
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

    if getattr(args, "audit", False):  # issue 6: run + membership-inference audit
        from fedlabels.audit.cli import cmd_audit

        return cmd_audit(args)
    cfg = _config_from_args(args)
    out = Path(cfg.output) if cfg.output else _default_output(cfg)
    result = run_config(cfg, progress=not args.no_progress)
    result.save_json(out)
    result.save_csv(out.with_suffix(".csv"))
    if result.client_models:  # final models beside the result, for `fedlabels inspect`
        from fedlabels.interpret import save_models

        save_models(result, out)
    print(format_table([result.summary_row()]))
    print(f"\nresult: {out}  (rounds: {out.with_suffix('.csv')})")
    if result.extra.get("interrupted"):
        print(f"fedlabels: interrupted after round {result.rounds[-1].round}; the rounds "
              "completed so far were saved", file=sys.stderr)
        return 130
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


def cmd_inspect(args: argparse.Namespace) -> int:
    import json

    from fedlabels.interpret import format_inspection, inspect_models

    descriptions = inspect_models(args.result, top=args.top, client=args.client)
    if args.json:
        print(json.dumps(descriptions, indent=2, default=str))
    else:
        print(format_inspection(descriptions, max_lines=args.max_lines))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from fedlabels.learners import MODELS

    for name, entry in sorted(MODELS.items()):
        aliases = f" ({', '.join(entry.aliases)})" if entry.aliases else ""
        print(f"{name + aliases:<36} {entry.description}")
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    from fedlabels.protocols import METHODS

    for name, method in sorted(METHODS.items()):
        print(f"{name:<14} {method.description}")
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
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice; 1 is best on a "
                             "busy machine)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run one method on one dataset")
    _add_run_options(p)
    p.set_defaults(func=cmd_run)
    from fedlabels.audit.cli import add_audit_options, cmd_audit  # issue 6 (imports no torch)

    add_audit_options(p, flag=True)
    p = sub.add_parser("audit", help="run a method and attack what its server receives "
                                     "(membership inference: VUL, TPR at low FPR, ROC)")
    _add_run_options(p)
    add_audit_options(p)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("datasets", help="list datasets and whether they are fetched")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("fetch", help="fetch a dataset into the local cache")
    p.add_argument("names", nargs="+", help="dataset names, e.g. fashion_mnist, or mlbench "
                                          "(all mlbench tables)")
    p.add_argument("--from-deb", help="use an already downloaded .deb instead of apt-get")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("inspect", help="show the clients' final models of a run: tree text, "
                                       "rules, feature importances")
    p.add_argument("result", help="result JSON of `fedlabels run` (or its .models.pkl)")
    p.add_argument("--client", type=int, help="only this client (0-based)")
    p.add_argument("--top", type=int, default=10, help="feature importances to show")
    p.add_argument("--max-lines", type=int, default=40, help="lines of tree/rule text per model")
    p.add_argument("--json", action="store_true", help="structured output as JSON")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("models", help="list model names usable in --model")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("methods", help="list the federated methods usable in --method")
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("plot", help="plot accuracy per round of one or more results")
    p.add_argument("results", nargs="+", help="result JSON files")
    p.add_argument("-o", "--output", default="results/accuracy.png")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("demo", help="FedCT vs FedAvg vs local vs centralized on breast_cancer")
    p.add_argument("--output-dir", default="results/demo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)

    from fedlabels.privacy.cli import add_bound_parser  # issue 5 (imports no dp-accounting)

    add_bound_parser(sub)

    from fedlabels.engines.flower.commands import add_deploy_parser  # imports no flwr

    add_deploy_parser(sub, _add_run_options, _config_from_args, _default_output)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.threads is not None:
            if args.threads < 1:
                raise FedLabelsError(f"--threads must be >= 1, got {args.threads}.")
            import torch

            torch.set_num_threads(args.threads)
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


