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
    with pytest.raises(FedLabelsError, match="threads must be an integer"):
        site_threads({"partition-id": 0, "threads": "many"}, spec)


@pytest.mark.parametrize("bad", ["0", "-2", "many", "1.5", "\u00b2", " ", True])
def test_deploy_local_checks_threads_as_the_site_does(bad: Any) -> None:
    """``deploy local --site-config threads=N`` is refused before anything starts by the
    site's own check, with the site's message (it had a copy of the check with its own
    wording); what it accepts reaches the site as the number the site accepts."""
    from fedlabels.deploy.launcher import check_site_settings

    spec = DeploySpec(run={})
    with pytest.raises(FedLabelsError) as launcher:
        check_site_settings({"threads": bad})
    with pytest.raises(FedLabelsError) as site:
        site_threads({"partition-id": 0, "threads": bad}, spec)
    assert str(launcher.value) == str(site.value) == \
        f"node config threads must be an integer >= 1, got {bad!r}."
    given = check_site_settings({"threads": "4"})["threads"]
    assert given == 4 and site_threads({"partition-id": 0, "threads": given}, spec) == 4


def test_deploy_local_cli_refuses_bad_threads_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from fedlabels.cli import main

    code = main(["deploy", "local", "--method", "fedct", "--dataset", "breast_cancer",
                 "--site-config", "threads=0"])
    err = capsys.readouterr().err
    assert code == 2 and "node config threads must be an integer >= 1, got '0'." in err
    assert "Traceback" not in err


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


def test_site_executor_asks_less_often_while_no_task_comes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle site's executor backs off (each request costs its SuperNode CPU) and asks at
    the shortest interval again right after a task: the sleeps between requests, recorded."""
    from flwr.proto.runtime_pb2 import AcquireTaskResponse
    from flwr.supercore import runtime

    from fedlabels.deploy import site_exec

    # the SuperNode's answers: nothing 4 times, a task, nothing 3 times, then the test stops
    answers = [False] * 4 + [True] + [False] * 3
    asked: list[int] = []

    class SuperNode:
        def AcquireTask(self, request: Any) -> AcquireTaskResponse:  # Flower's name
            has_task = answers[len(asked)]
            asked.append(1)
            res = AcquireTaskResponse()
            if has_task:
                res.task.SetInParent()
                res.token = "t"
            return res

        def close(self) -> None:
            pass

    started: list[tuple[Any, ...]] = []

    class Task:
        def __init__(self, target: Any, daemon: bool, args: tuple[Any, ...]) -> None:
            started.append(args)

        def start(self) -> None:
            pass

        def is_alive(self) -> bool:
            return False

    class Context:
        Process = Task

    sleeps: list[float] = []
    monkeypatch.setattr(runtime.RuntimeHttpClient, "from_server_address",
                        staticmethod(lambda **_: SuperNode()))
    monkeypatch.setattr(site_exec, "_task_context", lambda: Context())
    monkeypatch.setattr(site_exec.time, "sleep", sleeps.append)
    site_exec.serve("127.0.0.1:1", poll_intervals=(0.1, 0.5),
                    stop=lambda: len(asked) == len(answers))
    assert [args[1] for args in started] == ["t"]
    assert sleeps == [0.2, 0.4, 0.5, 0.5, 0.1, 0.2, 0.4, 0.5]
    assert site_exec.POLL_INTERVALS[0] < site_exec.POLL_INTERVALS[1] <= 1.0
