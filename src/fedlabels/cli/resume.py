"""``fedlabels resume RESULT.json [--rounds N]``: continue or extend a run.

The run is rebuilt from the checkpoint beside its result (``RESULT.checkpoint.npz`` and its
journal ``RESULT.checkpoint.journal``, see :mod:`fedlabels.runs.checkpoint`), which holds
its configuration, so the command takes nothing that would change it: only ``--rounds``
(extend a finished run), ``--no-progress``, ``--workers`` (how it runs) and ``--metric``.
The run's own files (result, rounds table, models, checkpoint) are updated in place,
without ``--overwrite``: it is the same run. A ``RESULT.json`` that a SIGKILL never let be
written is fine: the checkpoint's two files are enough.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError


def resumed_run(args: argparse.Namespace) -> tuple[Any, dict[str, Path]]:
    """The resumed run's result and its files (written by the caller)."""
    from fedlabels.api import resume
    from fedlabels.core.files import result_path, run_outputs
    from fedlabels.runs.checkpoint import checkpoint_path
    from fedlabels.runs.loop import terminate_as_interrupt

    out = result_path(args.result, "resume")
    files = {**run_outputs(out), "checkpoint": checkpoint_path(out)}
    if not files["checkpoint"].is_file():
        raise FedLabelsError(f"cannot resume {out}: there is no checkpoint "
                             f"{files['checkpoint']} beside it (a run writes one as it goes; "
                             "a run that completed no round, or ran with "
                             "--no-checkpoint, has none).")
    from fedlabels.cli.run_options import note_progress_metric

    note_progress_metric(args)
    with terminate_as_interrupt():  # SIGTERM keeps the completed rounds, like Ctrl-C
        result = resume(files["checkpoint"], rounds=args.rounds,
                        progress=not args.no_progress, workers=args.workers,
                        save=False)  # written by the caller
    return result, files
