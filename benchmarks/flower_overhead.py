"""fedlabels' overhead over Flower's own: ``deploy local`` vs a trivial app, same pattern.

Runs, interleaved on the same machine, (a) a trivial Flower app (numpy only: one message per
site per round carrying |U| int8 labels, the reply carrying |U| int8 predictions and an
accuracy, replies pulled every 0.2 s as fedlabels pulls them) and (b) ``fedlabels deploy
local`` (FedCT, decision trees, breast_cancer; evaluation every round), both on a real
SuperLink and one SuperNode per site on 127.0.0.1, with the same number of sites and rounds.
Prints each run's per-round seconds, writes everything to ``--output``, and prints as its
last line ``ratio=R``: fedlabels' median seconds per round over the trivial app's.

    .venv/bin/python benchmarks/flower_overhead.py --clients 3 --rounds 5 --repeats 2 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from fedlabels.deploy.launcher import LocalDeployment, deploy_local
from fedlabels.engines.flower.prepare import PreparedRun
from fedlabels.engines.flower.spec import DeploySpec
from fedlabels.runs.config import RunConfig

TRIVIAL_APP = '''"""A trivial Flower app with fedlabels' message pattern (numpy only)."""
import json
import time

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

server = ServerApp()
client = ClientApp()


@client.train()
def train(msg, context):
    labels = msg.content["arrays"]["labels"].numpy()
    reply = RecordDict({"arrays": ArrayRecord({"labels": Array(labels[::-1].copy())}),
                        "config": ConfigRecord({"accuracy": float(np.mean(labels == 0))})})
    return Message(reply, reply_to=msg)


@server.main()
def main(grid, context):
    cfg = context.run_config
    n, rounds, size = int(cfg["clients"]), int(cfg["rounds"]), int(cfg["size"])
    while len(nodes := sorted(grid.get_node_ids())) < n:
        time.sleep(0.5)
    labels = np.zeros(size, dtype=np.int8)
    seconds = []
    for rnd in range(rounds):
        t0 = time.perf_counter()
        out = [Message(RecordDict({"arrays": ArrayRecord({"labels": Array(labels)})}),
                       dst_node_id=node, message_type="train", group_id=str(rnd))
               for node in nodes]
        pending = set(grid.push_messages(out))
        while pending:
            for reply in grid.pull_messages(list(pending)):
                pending.discard(reply.metadata.reply_to_message_id)
            if pending:
                time.sleep(0.2)
        seconds.append(time.perf_counter() - t0)
    with open(cfg["status"], "w") as fh:
        json.dump({"status": "completed", "round_seconds": seconds}, fh)
'''


def trivial_pyproject(clients: int, rounds: int, size: int, status: Path) -> str:
    return f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "trivial"
version = "1.0.0"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "bench"

[tool.flwr.app.components]
serverapp = "trivial_app:server"
clientapp = "trivial_app:client"

[tool.flwr.app.config]
clients = {clients}
rounds = {rounds}
size = {size}
status = "{status}"
"""


def run_trivial(work: Path, clients: int, rounds: int, size: int) -> list[float]:
    app = work / "app"
    app.mkdir(parents=True)
    status = work / "status.json"
    (app / "trivial_app.py").write_text(TRIVIAL_APP)
    (app / "pyproject.toml").write_text(trivial_pyproject(clients, rounds, size, status))
    dummy = work / "unused.npz"
    prepared = PreparedRun(work, [dummy] * clients, dummy, dummy, app, {},
                           DeploySpec(run={}, status=str(status)))
    with LocalDeployment(prepared, work) as dep:
        dep.start()
        dep.run_app(timeout=1800)
    return [float(s) for s in json.loads(status.read_text())["round_seconds"]]


def run_fedlabels(work: Path, cfg: RunConfig) -> tuple[list[float], int]:
    result = deploy_local(cfg, workdir=work, output=work / "result.json", timeout=1800)
    return [r.seconds for r in result.rounds], int(result.federation["n_public"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2,
                        help="pairs of runs, alternating which goes first (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/results/flower_overhead.json")
    args = parser.parse_args()
    cfg = RunConfig(method="fedct", dataset="breast_cancer", clients=args.clients, model="dt",
                    rounds=args.rounds, seed=args.seed)
    runs: list[dict[str, object]] = []
    size = 0
    load_before = os.getloadavg()
    for rep in range(args.repeats):
        order = ["fedlabels", "trivial"] if rep % 2 == 0 else ["trivial", "fedlabels"]
        if size == 0:  # the trivial app needs |U|: take it from a fedlabels run first
            order = ["fedlabels", "trivial"]
        for kind in order:
            with tempfile.TemporaryDirectory(prefix=f"fedlabels-overhead-{kind}-") as tmp:
                t0 = time.perf_counter()
                if kind == "fedlabels":
                    seconds, size = run_fedlabels(Path(tmp), cfg)
                else:
                    seconds = run_trivial(Path(tmp), args.clients, args.rounds, size)
                wall = time.perf_counter() - t0
            runs.append({"kind": kind, "repeat": rep, "round_seconds": seconds,
                         "wall_seconds": wall, "load_average": os.getloadavg()})
            print(f"{kind:9s} repeat {rep}: rounds " + ", ".join(f"{s:.2f}" for s in seconds)
                  + f" s (wall {wall:.1f} s, load {os.getloadavg()[0]:.1f})", flush=True)
    medians = {kind: statistics.median(s for r in runs if r["kind"] == kind
                                       for s in r["round_seconds"])  # type: ignore[attr-defined]
               for kind in ("fedlabels", "trivial")}
    ratio = medians["fedlabels"] / medians["trivial"]
    report = {"config": cfg.to_dict(), "repeats": args.repeats, "n_unlabeled": size,
              "median_round_seconds": medians, "ratio": ratio, "runs": runs,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "cpu_count": os.cpu_count()}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"median s/round: fedlabels {medians['fedlabels']:.2f}, trivial "
          f"{medians['trivial']:.2f}; written to {out}")
    print(f"ratio={ratio:.2f}")


if __name__ == "__main__":
    main()
