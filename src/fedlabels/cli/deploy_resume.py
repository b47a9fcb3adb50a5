"""``fedlabels deploy resume APP --out-dir DIR``: the app that resumes a deployed run.

Importing this module does not import Flower.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_deploy_resume(args: argparse.Namespace) -> int:
    from fedlabels.core.files import check_output_dir
    from fedlabels.deploy.resume_app import describe, read_app_spec, write_resumed_app

    read_app_spec(args.app)  # a folder that is no app: said before --out-dir is looked at
    check_output_dir(Path(args.out_dir), "resumed app", overwrite=args.overwrite)
    for line in describe(write_resumed_app(args.app, args.out_dir)):
        print(line)
    return 0


def add_resume_parser(dsub: Any) -> None:
    """Register ``deploy resume``."""
    p = dsub.add_parser(
        "resume", help="write the app that resumes a deployed run from its checkpoint (after "
                       "a ServerApp or SuperLink crash), checked against the run")
    p.add_argument("app", metavar="APP",
                   help="the submitted run's app folder (`deploy prepare`'s <out-dir>/app); "
                        "its run's checkpoint is beside the result it writes")
    p.add_argument("--out-dir", required=True,
                   help="the folder to write the resumed app to (then `flwr run` it)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out-dir (APP itself included: its "
                        "pyproject.toml is replaced)")
    p.set_defaults(func=cmd_deploy_resume)
