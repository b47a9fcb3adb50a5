"""What a deployed ClientApp costs before it does any work: its imports.

A SuperNode starts a new ``flwr-clientapp`` process for every message, so every module the
ClientApp imports is paid on every message of every site. Importing it must not pull in the
heavy libraries a run may not need (scikit-learn, pandas, matplotlib, torch, scipy.stats):
those are imported by the learner or method that uses them, when it is built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.client_app import site_threads
from fedlabels.engines.flower.spec import DeploySpec

HEAVY = ("sklearn", "pandas", "matplotlib", "torch", "scipy.stats")


def test_client_app_import_is_lean() -> None:
    code = ("import json, sys; import fedlabels.engines.flower.client_app; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_threads_reach_the_client_apps() -> None:
    """``--threads`` travels in the run config; a site's node config may override it."""
    spec = DeploySpec(run={}, threads=3)
    assert DeploySpec(run={}).threads == 1
    assert DeploySpec.from_run_config({"fedlabels": spec.to_json()}).threads == 3
    assert site_threads({"partition-id": 0}, spec) == 3
    assert site_threads({"partition-id": 0, "threads": 2}, spec) == 2
    with pytest.raises(FedLabelsError, match="threads must be a whole number"):
        site_threads({"partition-id": 0, "threads": "many"}, spec)


def _report_preloaded(queue: Any) -> None:
    """Runs in a task process: which of the executor's preloads it found already imported."""
    from fedlabels.deploy.site_exec import PRELOAD

    queue.put(sorted(name for name in PRELOAD if name in sys.modules))


def test_site_executor_forks_tasks_from_a_preloaded_server() -> None:
    # the pinned executor does not start an interpreter per message: its task processes are
    # forks of a server that imported the ClientApp path (flwr, fedlabels, scikit-learn) once
    from fedlabels.deploy import site_exec

    context = site_exec._task_context()
    queue = context.Queue()
    task = context.Process(target=_report_preloaded, args=(queue,))
    task.start()
    try:
        found = queue.get(timeout=180)
    finally:
        task.join(timeout=30)
    assert found == sorted(site_exec.PRELOAD)
