"""CPU a local Flower deployment uses at rest: its processes' share of a core with no run.

Starts ``LocalDeployment`` (a SuperLink with its SuperExec, and per site a SuperNode with the
pinned executor, ``fedlabels.deploy.site_exec``) for FedCT on breast_cancer with
``--clients`` sites, waits ``--settle`` seconds after start-up (imports, registration), then
reads the machine's CPU counters (``/proc/stat``) over ``--seconds`` and prints the busy
share of one core. Run it on an otherwise quiet machine: every process counts.

    .venv/bin/python benchmarks/deployment_idle_cpu.py --clients 3 --seconds 30
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def busy_seconds() -> float:
    """The machine's busy CPU seconds so far (user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = sum(int(fields[i]) for i in (0, 1, 2, 5, 6))
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    from fedlabels.deploy.launcher import LocalDeployment
    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.runs.config import RunConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=8.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=args.clients,
                        model="dt", rounds=1, seed=0)
        prepared = prepare_run(cfg, work / "sites", output=work / "result.json")
        with LocalDeployment(prepared, work) as deployment:
            deployment.start()
            time.sleep(args.settle)
            cpu, wall = busy_seconds(), time.monotonic()
            time.sleep(args.seconds)
            share = (busy_seconds() - cpu) / (time.monotonic() - wall)
    print(f"{args.clients} sites at rest: {100 * share:.1f} % of a core "
          f"(machine CPU over {args.seconds:g} s; load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
