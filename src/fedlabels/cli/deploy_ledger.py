"""``fedlabels deploy ledger``: what a Flower site has released, from its own ledger.

A site operator's view of ``<ledger-dir>/<dataset id>/ledger.jsonl``
(:mod:`fedlabels.privacy.site_ledger`): per dataset, the releases and noiseless answers
recorded, the runs they came from, the (ε, δ) they spend, the lifetime budget the site
recorded (its ``ledger-epsilon``, else one run of its plan) and what is left of it, the runs
in which it followed the coordinator's plan (``trust-coordinator=true``), checked under the
site's state key. Reads only; makes no key. Importing this module
does not import Flower.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError


def _read_key(path: Path) -> bytes:
    from fedlabels.core.private_files import read_key

    if not path.is_file():
        raise FedLabelsError(f"no state key at {path}: give the site's key with --state-key "
                             "(its node config's state-key; deploy prepare and deploy local "
                             "write <sites>/client_<i>.state.key).")
    return read_key(path, "site's state key", "give the site's --state-key.")


def _delta(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"give a δ in (0, 1), got {text!r}")
    return value


def cmd_deploy_ledger(args: argparse.Namespace) -> int:
    from fedlabels.engines.flower.site_privacy import DEFAULT_DELTA, key_path, ledger_dir
    from fedlabels.privacy.site_ledger import read_ledgers

    # the paths as the site resolves its node config's ledger-dir and state-key
    folder = ledger_dir({"ledger-dir": args.ledger_dir})
    if not folder.is_dir():
        raise FedLabelsError(f"no ledger directory at {folder}: give the site's --ledger-dir "
                             "(its node config's ledger-dir).")
    key = _read_key(key_path({"state-key": args.state_key}))
    rows = read_ledgers(folder, key, args.delta or DEFAULT_DELTA)
    if args.json:
        print(json.dumps({"ledger_dir": str(folder), "datasets": rows}, indent=2))
    else:
        _show(folder, rows)
    return 1 if any("error" in r for r in rows) else 0


def _show(folder: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        print(f"no dataset ledgers in {folder} (the site has released nothing there)")
        return
    print(f"site ledgers in {folder}:")
    print(f"  {'dataset':<32}  {'runs':>4}  {'releases':>8}  {'noiseless':>9}  "
          f"{'ε spent':>10}  {'δ':>7}  {'budget':>8}  {'left':>8}  {'budget from':<14}  "
          f"{'coordinator':>11}  last entry")
    for r in rows:
        if "error" in r:
            print(f"  {r['dataset']:<32}  FAILED: {r['error']}")
            continue
        budget, left = ("-", "-") if r["budget"] is None else \
            (f"{r['budget']:.4g}", f"{r['left']:.4g}")
        print(f"  {r['dataset']:<32}  {r['runs']:>4}  {r['releases']:>8}  "
              f"{r['noiseless_answers']:>9}  "
              f"{r['epsilon']:>10.4g}  {r['delta']:>7.0e}  {budget:>8}  {left:>8}  "
              f"{r['budget_from'] or '-':<14}  "
              f"{r['coordinator_runs']:>11}  {r['last_entry'] or '-'}")
    print("ε is each dataset's spend over all its runs, by its tightest accountant; the budget "
          "is the dataset's lifetime ε as the site recorded it: its node config's "
          "ledger-epsilon as last used (budget from ledger-epsilon), else the one run of its "
          "plan a site without one took (privacy-plan), and left is the budget less the spend, "
          "both at the budget's δ (--json: budget_delta); '-': none recorded (the site sets "
          "none, or a ledger-epsilon used only before 11-30, recorded from its next release "
          "on); coordinator counts the runs in which the site followed the coordinator's plan "
          "(trust-coordinator=true, no privacy-plan: --json lists those plans).")


def add_ledger_parser(dsub: Any) -> None:
    p = dsub.add_parser("ledger", help="show what a site released: its privacy ledger per "
                                       "dataset (releases, ε spent, budget), checked")
    p.add_argument("--ledger-dir", metavar="DIR",
                   help="the site's ledger-dir (default: $FLWR_HOME/fedlabels-ledger or "
                        "~/.flwr/fedlabels-ledger, as the site uses)")
    p.add_argument("--state-key", metavar="FILE",
                   help="the site's state-key file, which authenticates the ledger (default: "
                        "$FLWR_HOME/fedlabels-state.key or ~/.flwr/fedlabels-state.key)")
    p.add_argument("--delta", type=_delta, default=None,
                   help="the δ to state ε at: the site's ledger-delta (default 1e-5)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_deploy_ledger)
