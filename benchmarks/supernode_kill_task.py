"""How long a site's task process outlives its SuperNode, over real Flower processes.

Starts ``LocalDeployment`` (a SuperLink and two sites, each a SuperNode with the pinned
executor, ``fedlabels.deploy.site_exec``) for FedCT on breast_cancer (decision trees, seed 3,
200 rounds, a quorum), waits until, after round 1, site 0's executor runs a task (a
process forked for one message; it holds the site's data), SIGKILLs that site's SuperNode
(``kill_supernode``) and prints how long the task still runs (at most ``--wait`` seconds),
then the executor's log.
``--restart``: SIGTERM the SuperNode and start it again at once (``restart_supernode``)
instead, and also wait for the run's next round (the site rejoins).
``--hello`` (with ``--restart``): restart it while its task of the hello runs (before round
1) instead; the ServerApp's line on the hello (the node that answered in its place, or the
setup's failure) is printed at the end.
Run it from the checkout whose code it measures (``PYTHONPATH=<its src>``):

    PYTHONPATH=src .venv/bin/python benchmarks/supernode_kill_task.py
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path


def _rounds_done(status: Path) -> int:
    try:
        return int(json.loads(status.read_text()).get("rounds_done", 0))
    except (OSError, ValueError):
        return 0


def _status(status: Path) -> str:
    try:
        return str(json.loads(status.read_text()).get("status", ""))
    except (OSError, ValueError):
        return ""


def main() -> None:
    import fedlabels
    from fedlabels.deploy.launcher import LocalDeployment
    from fedlabels.deploy.processes import descendants, parent, start_time
    from fedlabels.deploy.watchdog import running
    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.runs.config import RunConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait", type=float, default=30.0,
                        help="seconds to watch the task after the kill (default 30)")
    parser.add_argument("--restart", action="store_true",
                        help="restart the SuperNode instead of killing it")
    parser.add_argument("--hello", action="store_true",
                        help="with --restart: restart during the hello, before round 1")
    args = parser.parse_args()
    if args.hello and not args.restart:
        parser.error("--hello needs --restart")
    print(f"fedlabels from {fedlabels.__file__}")
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=2, model="dt",
                    rounds=200, seed=3, options={"quorum": 1.0})
    tmp = Path(tempfile.mkdtemp(prefix="fedlabels-supernode-kill-"))
    prepared = prepare_run(cfg, tmp / "sites", output=tmp / "result.json",
                           reply_timeout=120, node_timeout=60)
    with LocalDeployment(prepared, tmp) as dep:
        dep.start()
        threading.Thread(target=lambda: dep.run_app(300), daemon=True).start()
        executor = dep.procs["site_exec_0"].pid
        started = time.monotonic()
        task = None
        while task is None and time.monotonic() - started < 240:
            done = _rounds_done(dep.status_path)
            at_hello = done == 0 and _status(dep.status_path) != "running"
            if at_hello if args.hello else done >= 1:  # the hello's task, or a round's
                task = next((p for p in descendants([executor])  # the fork server's children
                             if parent(p) != executor and running(p, None)), None)
            time.sleep(0.02)
        if task is None:
            raise SystemExit("no task process seen within 240 s")
        began = start_time(task)
        rounds = _rounds_done(dep.status_path)
        if args.restart:
            dep.restart_supernode(0)
        else:
            dep.kill_supernode(0)
        killed = time.monotonic()
        while running(task, began) and time.monotonic() - killed < args.wait:
            time.sleep(0.05)
        state = "still running" if running(task, began) else "gone"
        print(f"task {task}: {state} {time.monotonic() - killed:.1f} s after its SuperNode "
              f"was {'restarted' if args.restart else 'SIGKILLed'}")
        while args.restart and _rounds_done(dep.status_path) <= rounds + 1 \
                and time.monotonic() - killed < 240:
            time.sleep(0.2)
        if args.restart:
            print(f"rounds done: {rounds} at the restart, {_rounds_done(dep.status_path)} "
                  f"{time.monotonic() - killed:.1f} s later")
        print((dep.logs / "site_exec_0.log").read_text(errors="replace")[-800:])
        for log in sorted(dep.logs.glob("*.log")):  # the ServerApp's word on the hello
            for line in log.read_text(errors="replace").splitlines():
                if "hello: SuperNode" in line or "setup failed" in line:
                    print(f"{log.name}: {line.strip()}")


if __name__ == "__main__":
    main()
