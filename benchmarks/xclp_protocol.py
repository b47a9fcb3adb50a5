"""Time the XCLP *protocol* end to end (setup, Hamming, graph, S_L solve, row sums, results).

``benchmarks/xclp_scale.py --part a`` times central label propagation (LSH, kNN graph and a
C-column solve); the protocol instead solves for one column per labelled point (S_L, n × l),
ships S_L to the clients and runs SecureRowSums over n × C values per client. This script
runs ``fedlabels.run("xclp", ...)`` in the in-process simulator (every message serialized)
and reports wall and CPU seconds, the phase timings, protocol bytes and accuracy.

    # 60 clients x 998 Fashion-MNIST images in groups of 5 (the issue's acceptance run;
    # 60 x 1,000 private images plus U do not fit Fashion-MNIST's 60,000 training images)
    .venv/bin/python benchmarks/xclp_protocol.py --preset grouped60
    # 10 clients x 998 (+167 test images each) in groups of 5, and as one joint graph
    .venv/bin/python benchmarks/xclp_protocol.py --preset grouped10
    .venv/bin/python benchmarks/xclp_protocol.py --preset ungrouped10
    # secure XCLP, Paillier with 2048-bit keys, L = 1024, 5 clients x 2,000 points
    .venv/bin/python benchmarks/xclp_protocol.py --preset paillier5x2000

Add ``--output FILE.json`` to keep the record. Timings need a quiet machine. The run uses
the simulator's default workers (one per core, at most one per client) unless ``--workers N``
says otherwise; ``cpu_s`` splits the CPU seconds into the simulator's process and its
workers, and ``timeline`` summarises when the workers were busy (see
``benchmarks/workers_speedup.py``).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

PRESETS: dict[str, dict[str, Any]] = {
    "grouped60": {"clients": 60, "private_per_client": 998, "unlabeled": 100,
                  "options": {"secure": "none", "group_size": 5}},
    # the first two groups' worth of clients, grouped and as one joint graph (each client
    # labels 167 test images, as in grouped60)
    "grouped10": {"clients": 10, "private_per_client": 998, "unlabeled": 100,
                  "options": {"secure": "none", "group_size": 5, "test_points": 167}},
    "ungrouped10": {"clients": 10, "private_per_client": 998, "unlabeled": 100,
                    "options": {"secure": "none", "test_points": 167}},
    "paillier5x2000": {"clients": 5, "private_per_client": 1800, "unlabeled": 100,
                       "options": {"secure": "paillier", "lsh_bits": 1024, "key_bits": 2048,
                                   "test_points": 200}},
}


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run(clients: int, private_per_client: int, unlabeled: int, options: dict[str, Any],
        seed: int, threads: int, workers: int | None = None) -> dict[str, Any]:
    import fedlabels as fl
    from fedlabels.data import load_federation
    from fedlabels.engines import inprocess
    from workers_speedup import _RecordedGrid, summarise_timeline

    inprocess.WorkerGrid = _RecordedGrid  # type: ignore[misc]  # keep the run's timeline
    fed = load_federation("fashion_mnist", clients=clients, seed=seed, unlabeled=unlabeled,
                          private=clients * private_per_client)
    t0, c0 = time.perf_counter(), cpu_seconds()
    w0 = cpu_seconds(resource.RUSAGE_CHILDREN)
    result = fl.run("xclp", fed, rounds=1, seed=seed, options=options, progress=False,
                    threads=threads, workers=workers)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    workers_cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - w0
    rec = result.to_dict()
    xclp = rec["xclp"]
    grids = _RecordedGrid.made
    timeline = summarise_timeline(getattr(grids[-1], "timeline", [])) if grids else {}
    return {"clients": clients, "private_per_client": private_per_client, "seed": seed,
            "options": options, "wall_s": wall,
            "cpu_s": {"simulator": cpu, "workers": workers_cpu},
            "workers": rec["provenance"]["workers"], "timeline": timeline,
            "n_points": xclp["n_points"],
            "groups": len(xclp.get("groups", [])) or 1, "phase_seconds": xclp["seconds"],
            "bytes_up": rec["communication"]["bytes_up_total"],
            "bytes_down": rec["communication"]["bytes_down_total"],
            "mean_test_accuracy": float(np.mean(rec["rounds"][-1]["accuracies"]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (kNN graph)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: one per core, at most one per client)")
    parser.add_argument("--private-per-client", type=int, default=None,
                        help="override the preset's private images per client (a scaled run)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    preset = dict(PRESETS[args.preset])
    if args.private_per_client is not None:
        preset["private_per_client"] = args.private_per_client
    record = run(**preset, seed=args.seed, threads=args.threads, workers=args.workers)
    record["preset"] = args.preset
    text = json.dumps(record, indent=2)
    print(text)
    if args.output:
        path = Path(args.output)
        if path.exists():
            raise SystemExit(f"{path} exists; remove it or choose another --output.")
        path.write_text(text + "\n")


if __name__ == "__main__":
    main()
