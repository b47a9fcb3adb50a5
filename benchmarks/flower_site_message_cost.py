"""What one message costs a Flower site early and late in a long run (docs/deployment.md,
Long deployments): CPU time and the bytes its files give, per message, counted around the
ClientApp.

Runs a DP-FedCT (or ``--method``) deployment over the in-process loopback grid (the real
ServerApp loop and ClientApp, Flower's serialisation, each site's state dir, message record
and ledger on disk), breast_cancer, 3 clients, decision trees, seed 0, and prints the
median CPU time and mean bytes read per message over the first and the last 20 rounds::

    nice -n 10 python benchmarks/flower_site_message_cost.py --rounds 200

Bytes read are those of ``Path.read_bytes`` (the ledger, the message record, stored
replies), not the snapshots' ``np.load``. Wall time depends on the load; CPU time less so.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fedlabels.engines.flower.convert import from_record_dict
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.runs.config import RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--method", default="dp-fedct")
    parser.add_argument("--window", type=int, default=20)
    args = parser.parse_args()
    options = ({"epsilon_per_round": 0.05, "mechanism": "xor"}
               if args.method == "dp-fedct" else {})
    cfg = RunConfig(method=args.method, dataset="breast_cancer", clients=3, model="dt",
                    rounds=args.rounds, seed=0, options=options)
    read = [0]
    original = Path.read_bytes

    def counted(self: Path) -> bytes:
        data = original(self)
        read[0] += len(data)
        return data

    Path.read_bytes = counted  # type: ignore[method-assign]
    rows: list[tuple[int, float, int]] = []
    with tempfile.TemporaryDirectory() as root:
        prepared, grid = loopback_deployment(cfg, Path(root) / "sites")
        client_app = grid.client_app

        def measured(message: Any, context: Any) -> Any:
            rnd = from_record_dict(message.content)[1].get("round")
            before, cpu = read[0], time.process_time()
            reply = client_app(message, context)
            if isinstance(rnd, int):
                rows.append((rnd, time.process_time() - cpu, read[0] - before))
            return reply

        grid.client_app = measured
        run_server(grid, server_context(prepared.spec))
    last = max(r for r, _, _ in rows)
    for name, lo, hi in (("first", 1, args.window), ("last", last - args.window + 1, last)):
        sel = [(c, b) for r, c, b in rows if lo <= r <= hi]
        print(f"{name} {args.window} rounds ({lo}-{hi}, {len(sel)} messages): median CPU "
              f"{1000 * statistics.median(c for c, _ in sel):.1f} ms a message, "
              f"{statistics.mean(b for _, b in sel):,.0f} bytes read a message")


if __name__ == "__main__":
    main()
