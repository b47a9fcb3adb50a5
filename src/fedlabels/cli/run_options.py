"""The run options shared by ``run``, ``audit`` and ``deploy``, and the config they make."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedlabels.cli.method_flags import add_method_flags, check_flags, method_options
from fedlabels.errors import FedLabelsError

_RUN_KEYS = ("method", "dataset", "clients", "model", "rounds", "period", "unlabeled",
             "private", "private_per_client", "test", "partition", "seed", "eval_every",
             "output")


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of ``run`` (also ``audit``, ``deploy local``, ``deploy prepare``)."""
    p.add_argument("--config", help="TOML file with the same keys as these options "
                                    "(method options in an [options] table)")
    p.add_argument("--method", help="a registered method (listed below; default fedct)")
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
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--eval-every", type=int, help="evaluate every k rounds (default 1)")
    p.add_argument("--output", help="JSON result path (a CSV of rounds goes beside it)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_method_flags(p)


def config_from_args(args: argparse.Namespace) -> Any:
    """The validated :class:`~fedlabels.config.RunConfig`; method options are checked here,
    before any data is loaded."""
    from fedlabels.config import RunConfig, load_config
    from fedlabels.protocols import get_method

    given: dict[str, Any] = {k: getattr(args, k) for k in _RUN_KEYS
                             if getattr(args, k) is not None}
    opts, flagged = method_options(args)
    if flagged.get("teachers") is not None:  # PATE-style methods: the teachers are the clients
        given.setdefault("clients", flagged["teachers"])
    if opts or flagged:
        given["options"] = {**opts, **flagged}
    if args.config:
        cfg = load_config(args.config, **given)
    else:
        try:
            cfg = RunConfig(**given)
        except TypeError as exc:
            raise FedLabelsError(str(exc)) from None
    method = get_method(cfg.method)
    check_flags(method, flagged)
    method.parse_options(cfg.options)  # unknown keys and bad values: an error, no data loaded
    return cfg


def default_output(cfg: Any) -> Path:
    safe = cfg.dataset.replace("/", "_").replace(":", "_")
    return Path("results") / f"{cfg.method}_{safe}_seed{cfg.seed}.json"


def run_parser(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand with the run options and the list of methods in its epilog."""
    from fedlabels.cli.method_flags import methods_epilog

    p = sub.add_parser(name, epilog=methods_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
    add_run_options(p)
    return p
