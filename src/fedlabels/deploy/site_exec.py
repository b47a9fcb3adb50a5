"""The site's pinned executor: its SuperNode runs fedlabels' ClientApp and no other code.

In open-source Flower a SuperNode runs whatever ClientApp the submitted app (FAB) contains:
its SuperExec installs the FAB and imports the ``clientapp`` component named there. Flower
1.41's only app pinning, ``flower-supernode --trusted-entities``, accepts FABs signed through
Flower's hub platform only (``valid_license`` in the FAB's verifications, which a FAB
submitted with ``flwr run <dir>`` never has), so it cannot pin a locally built app.

So the site pins it itself. It starts its SuperNode with ``--isolation process`` (the
SuperNode then starts no executor of its own) and runs this executor beside it, on the
SuperNode's Runtime API (loopback):

* :func:`serve` asks the SuperNode for ClientApp tasks (``AcquireTask``, as
  ``flower-superexec`` does) and starts one task process per message, forked from a fork
  server that has imported the ClientApp path once (:data:`PRELOAD`); when nothing listens
  at the SuperNode's address any more (killed, restarting) it stops the tasks still running
  (:func:`stop_tasks`: they hold the site's data, and Flower's task retries for ever) and
  waits for the SuperNode to come back;
* a task process (:func:`run_task`) runs Flower's own ``run_clientapp`` loop with two steps
  replaced: the FAB is **never installed or imported** — it is only read to check that it
  names fedlabels' ClientApp (:data:`PINNED_CLIENTAPP`), else the task fails with an error
  reply — and the ClientApp that runs is always the installed
  :data:`fedlabels.engines.flower.client_app.app`.

A foreign app's ClientApp code therefore never runs on the site, whoever submitted it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from fedlabels.core.errors import FedLabelsError, show_warnings_in_one_line

PINNED_CLIENTAPP = "fedlabels.engines.flower.client_app:app"
#: imported once by the fork server that every task process is forked from; not this module:
#: run as ``python -m``, each task process runs it again as ``__mp_main__``, and runpy warns
#: (once per task) where it was imported already
PRELOAD = ("fedlabels.engines.flower.client_app", "flwr.supernode.runtime.run_clientapp",
           "sklearn.tree")
#: seconds between requests for a task: the first after a task started, doubling while none
#: comes, up to the second. Each request costs the SuperNode CPU: asking every 0.1 s kept
#: 4 % of a core busy per site at rest; a message now waits at most the longer interval,
#: against the SuperNode's own 3 s between pulls from the SuperLink.
POLL_INTERVALS = (0.1, 0.5)
#: the Runtime API calls a SuperNode with --superexec-auth-secret-file authenticates (Flower's
#: own executor signs the same one)
AUTH_METHODS = frozenset({"/flwr.proto.Runtime/AcquireTask"})


def check_fab(fab_content: bytes) -> None:
    """Refuse a FAB whose ClientApp is not fedlabels' (its code is never used either way)."""
    from flwr.common.config import get_fab_config

    try:
        config = get_fab_config(fab_content)
        component = config["tool"]["flwr"]["app"]["components"]["clientapp"]
    except Exception as exc:  # any malformed FAB
        raise FedLabelsError(f"this site runs fedlabels' ClientApp only; the submitted app "
                             f"is not a fedlabels app ({type(exc).__name__}).") from None
    if component != PINNED_CLIENTAPP:
        raise FedLabelsError(f"this site runs fedlabels' ClientApp only "
                             f"({PINNED_CLIENTAPP}); the submitted app names "
                             f"{str(component)[:80]!r}. Refused; its code was not loaded.")


def _pinned_loader(**_: Any) -> Callable[..., Any]:
    """Stands in for Flower's ``get_load_client_app_fn``: always fedlabels' ClientApp."""
    from fedlabels.engines.flower.client_app import app

    return lambda *_args: app


def run_task(runtime_api_address: str, token: str, parent_pid: int | None) -> None:
    """One ClientApp task: Flower's ``run_clientapp`` with the FAB checked, never loaded;
    its warnings (new categories in the site's rows, ...) print as ``fedlabels: warning: ...``
    lines, as the CLI's do."""
    import flwr.supernode.runtime.run_clientapp as flower_task

    from fedlabels.engines.flower.site_log import log_to_stderr

    log_to_stderr()  # what the site sent, per message, for its operator
    show_warnings_in_one_line()  # a warning as the CLI prints it, not a path in fedlabels
    # the two steps that would install and import the FAB's code (flwr pinned to 1.41.0)
    vars(flower_task).update(install_from_fab=lambda content, **_: check_fab(content),
                             get_load_client_app_fn=_pinned_loader)
    flower_task.run_clientapp(runtime_api_address=runtime_api_address, token=token,
                              insecure=True, certificates=None, parent_pid=parent_pid,
                              runtime_dependency_install=False)


def serve(runtime_api_address: str, poll_intervals: tuple[float, float] = POLL_INTERVALS,
          stop: Callable[[], bool] = lambda: False, auth_secret: bytes | None = None) -> None:
    """Acquire ClientApp tasks from the SuperNode and run each in a pinned task process,
    asking at ``poll_intervals`` (see :data:`POLL_INTERVALS`). ``auth_secret``: the shared
    secret of a SuperNode started with ``--superexec-auth-secret-file`` (the executor signs
    its task requests with it, as Flower's own executor does)."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import (
        RuntimeVersionHttpInterceptor,
        SuperExecAuthHttpInterceptor,
    )
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    interceptors: list[Any] = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
    if auth_secret:
        interceptors.append(SuperExecAuthHttpInterceptor(
            master_secret=auth_secret, protected_methods=AUTH_METHODS))
    # one try a request: a SuperNode that does not answer is this loop's to handle (Flower's
    # retried for ever, up to 20 s apart, and the executor could not see it was gone)
    invoker = make_simple_http_retry_invoker()
    invoker.max_tries = 1
    client = RuntimeHttpClient.from_server_address(
        server_address=runtime_api_address, insecure=True, root_certificates=None,
        interceptors=interceptors, retry_invoker=invoker)
    tasks = _task_context()
    children: list[multiprocessing.context.ForkServerProcess] = []
    first, longest = poll_intervals
    interval = first
    down = False  # the SuperNode did not answer the last request
    try:
        while not stop():
            try:
                res = client.AcquireTask(AcquireTaskRequest(
                    supported_task_types=[TaskType.CLIENT_APP], agentapp_fab_hashes=[]))
            except Exception as exc:  # the SuperNode restarts: wait for it, keep serving
                if supernode_gone(exc):
                    children = stop_tasks(children, runtime_api_address)
                if not down:  # once, not once a second
                    print(f"fedlabels site executor: {_why_not(runtime_api_address, exc)}; "
                          "retrying every second", file=sys.stderr)
                down = True
                time.sleep(max(longest, 1.0))
                continue
            if down:
                print(f"fedlabels site executor: the SuperNode at {runtime_api_address} "
                      "answers again; serving it", file=sys.stderr)
                down = False
            if res.HasField("task") and res.token:
                child = tasks.Process(target=run_task, daemon=True,
                                      args=(runtime_api_address, res.token, os.getpid()))
                child.start()  # forked from the preloaded fork server: no imports to pay
                children.append(child)
                interval = first
            else:
                interval = min(2 * interval, longest)
            children = [c for c in children if c.is_alive()]
            time.sleep(interval)
    finally:  # Ctrl-C too: a task blocked in a request may not end on SIGTERM alone
        client.close()
        end_tasks(children)


def supernode_gone(exc: BaseException) -> bool:
    """Whether a request failed because nothing listens at the SuperNode's address (its
    process ended: killed, crashed or restarting), not because it was slow or refused us."""
    import httpx

    return isinstance(exc, httpx.ConnectError)


def stop_tasks(children: list[Any], address: str, grace: float = 2.0) -> list[Any]:
    """Stop the task processes still running for a SuperNode that is gone; none is left.

    A task holds the site's data and its client role while it answers a message, and
    Flower's ``run_clientapp`` retries its requests to the SuperNode for ever: it outlived
    its SuperNode, unseen. It cannot answer any more (its token was the dead SuperNode's);
    the restarted SuperNode gets the message again and a new task answers it. SIGTERM (the
    task's own handler ends it), SIGKILL after ``grace`` seconds."""
    live = end_tasks(children, grace)
    if live:
        print(f"fedlabels site executor: the SuperNode at {address} is gone; stopped its "
              f"{len(live)} running task(s), which held the site's data and could not answer "
              "(a restarted SuperNode gets the message again)", file=sys.stderr)
    return []


def end_tasks(children: list[Any], grace: float = 2.0) -> list[Any]:
    """End the task processes still running: SIGTERM (the task's own handler ends it),
    SIGKILL after ``grace`` seconds (a task blocked in a request to its SuperNode took longer,
    and the executor's exit waited on it); the ones that were running."""
    live = [c for c in children if c.is_alive()]
    for child in live:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in live:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)
    return live


def _why_not(address: str, exc: BaseException) -> str:
    """Why the SuperNode at ``address`` gave no task: its authentication refused this
    executor (a SuperNode with ``--superexec-auth-secret-file``), or it does not answer."""
    text = str(exc)
    if "authentication" in text.lower() or "401" in text or "403" in text:
        return (f"the SuperNode at {address} refused this executor's authentication: start "
                "it with --superexec-auth-secret-file, the same file as the SuperNode's")
    return (f"the SuperNode at {address} is not answering ({type(exc).__name__}: "
            f"{text[:120]})")


def _task_context() -> multiprocessing.context.ForkServerContext:
    """A fork server that has imported the ClientApp path once: each task is a fork of it.

    A SuperNode would start a fresh interpreter per message, which pays the imports (flwr,
    fedlabels, the learner's library: about 3 CPU-s with scikit-learn) every time. The fork
    server is a clean process (none of this executor's threads or connections) started on
    the first task; its children inherit the imported modules.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def main(argv: list[str] | None = None) -> None:
    """``python -m fedlabels.deploy.site_exec --runtime-api-address A``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fedlabels.deploy.site_exec",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-api-address", default="127.0.0.1:9094",
                        help="the SuperNode's Runtime API (default 127.0.0.1:9094)")
    parser.add_argument("--superexec-auth-secret-file", default=None,
                        help="the shared secret file the SuperNode was started with "
                             "(--superexec-auth-secret-file), where it was")
    args = parser.parse_args(argv)
    secret = None
    if args.superexec_auth_secret_file is not None:
        from flwr.supercore.auth import load_superexec_auth_secret

        try:
            secret = load_superexec_auth_secret(args.superexec_auth_secret_file)
        except ValueError as exc:
            parser.error(str(exc))
    print(f"fedlabels site executor: serving the SuperNode at {args.runtime_api_address}"
          + (" (authenticated)" if secret else ""), file=sys.stderr)
    try:
        serve(args.runtime_api_address, auth_secret=secret)
    except KeyboardInterrupt:  # Ctrl-C: the operator stopped it; a traceback said nothing
        print("fedlabels site executor: stopped (Ctrl-C), with any task it was running; "
              "this site answers no message until it is started again", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
