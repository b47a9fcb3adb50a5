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

Add ``--output FILE.json`` to keep the record. Timings need a quiet machine.
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


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(clients: int, private_per_client: int, unlabeled: int, options: dict[str, Any],
        seed: int, threads: int) -> dict[str, Any]:
    import fedlabels as fl
    from fedlabels.data import load_federation

    fed = load_federation("fashion_mnist", clients=clients, seed=seed, unlabeled=unlabeled,
                          private=clients * private_per_client)
    t0, c0 = time.perf_counter(), cpu_seconds()
    result = fl.run("xclp", fed, rounds=1, seed=seed, options=options, progress=False,
                    threads=threads)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    rec = result.to_dict()
    xclp = rec["xclp"]
    return {"clients": clients, "private_per_client": private_per_client, "seed": seed,
            "options": options, "wall_s": wall, "cpu_s": cpu, "n_points": xclp["n_points"],
            "groups": len(xclp.get("groups", [])) or 1, "phase_seconds": xclp["seconds"],
            "bytes_up": rec["communication"]["bytes_up_total"],
            "bytes_down": rec["communication"]["bytes_down_total"],
            "mean_test_accuracy": float(np.mean(rec["rounds"][-1]["accuracies"]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (kNN graph)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    record = run(**PRESETS[args.preset], seed=args.seed, threads=args.threads)
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
