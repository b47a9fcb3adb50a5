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
the preset's workers (``paillier5x2000``: one per client), else the simulator's default
(one per core, at most one per client), unless ``--workers N`` says otherwise; ``cpu_s``
splits the CPU seconds into the simulator's process and its workers, and ``timeline``
summarises when the workers were busy (see ``benchmarks/workers_speedup.py``).

As it runs, the script prints one JSON line to stderr per XCLP phase of the server and per
SecureHamming step of each client (``t``: seconds since the start; ``wall_s`` and
``cpu_s``: the step's wall and CPU seconds in its process, every thread counted;
``load``: the 1-minute load average), so a run stopped by a timeout still says where it was
and where its time went; ``steps`` in the record sums them per step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable
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
    # one worker process per client (one big-integer thread each on 2 cores): every
    # SecureHamming step has equal work per process and no thread waits for the GIL
    "paillier5x2000": {"clients": 5, "private_per_client": 1800, "unlabeled": 100,
                       "options": {"secure": "paillier", "lsh_bits": 1024, "key_bits": 2048,
                                   "test_points": 200}, "workers": 5},
}


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


_T0 = time.time()
STEPS: list[dict[str, Any]] = []  # the simulator's own phase lines


def _log(**fields: Any) -> dict[str, Any]:
    line = {"t": round(time.time() - _T0, 2), "pid": os.getpid(), **fields,
            "load": round(os.getloadavg()[0], 2)}
    # one write per line: the worker processes share stderr, and print's two writes (text,
    # newline) on an unbuffered stream let another process's line fall between them
    sys.stderr.write(json.dumps(line) + "\n")
    sys.stderr.flush()
    return line


def _timed(fn: Callable[..., Any], label: Callable[..., dict[str, Any]],
           keep: bool) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        fields = label(*args, **kwargs)
        _log(event="start", **fields)
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        line = _log(event="end", **fields, wall_s=round(time.perf_counter() - w0, 2),
                    cpu_s=round(time.process_time() - c0, 2),
                    maxrss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
        if keep:
            STEPS.append(line)
        return out
    return wrapper


def trace() -> None:
    """Log every server phase and every client's SecureHamming step as it happens (the
    workers are forked from this process, so they inherit the wrappers)."""
    from fedlabels.methods.xclp.server import XCLPServerCore
    from fedlabels.secure.hamming_protocol import HammingParty

    for phase in ("setup", "seed", "hamming", "graph_and_solve", "influence", "rowsums",
                  "result"):
        setattr(XCLPServerCore, phase,
                _timed(getattr(XCLPServerCore, phase),
                       lambda self, *a, phase=phase, **k: {"phase": phase}, keep=True))
    HammingParty.step = _timed(  # type: ignore[method-assign]
        HammingParty.step,
        lambda self, step, *a, **k: {"client": self.cid, "step": step}, keep=False)


def step_summary(path: Path) -> dict[str, Any]:
    """Per SecureHamming step, from the trace lines in ``path``: wall s of the step (first
    start to last end), the clients' CPU s each and in all."""
    out: dict[str, Any] = {}
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if "step" not in line:
            continue
        s = out.setdefault(str(line["step"]), {"first_start": None, "last_end": 0.0,
                                               "cpu_s": {}, "wall_s": {}})
        if line["event"] == "start":
            s["first_start"] = min(s["first_start"] or line["t"], line["t"])
        else:
            s["last_end"] = max(s["last_end"], line["t"])
            s["cpu_s"][str(line["client"])] = line["cpu_s"]
            s["wall_s"][str(line["client"])] = line["wall_s"]
    for s in out.values():
        s["span_s"] = round(s["last_end"] - (s["first_start"] or 0.0), 2)
        s["cpu_s_total"] = round(sum(s["cpu_s"].values()), 2)
    return out


def run(clients: int, private_per_client: int, unlabeled: int, options: dict[str, Any],
        seed: int, threads: int, workers: int | None = None) -> dict[str, Any]:
    import fedlabels as fl
    from fedlabels.data import load_federation
    from fedlabels.engines import inprocess
    from workers_speedup import _RecordedGrid, summarise_timeline

    inprocess.WorkerGrid = _RecordedGrid  # type: ignore[misc]  # keep the run's timeline
    fed = load_federation("fashion_mnist", clients=clients, seed=seed, unlabeled=unlabeled,
                          private=clients * private_per_client)
    load = os.getloadavg()[0]
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
            "options": options, "wall_s": wall, "load_at_start": load,
            "load_at_end": os.getloadavg()[0],
            "cpu_s": {"simulator": cpu, "workers": workers_cpu},
            "workers": rec["provenance"]["workers"], "timeline": timeline,
            "n_points": xclp["n_points"],
            "groups": len(xclp.get("groups", [])) or 1, "phase_seconds": xclp["seconds"],
            "bytes_up": rec["communication"]["bytes_up_total"],
            "bytes_down": rec["communication"]["bytes_down_total"],
            "mean_test_accuracy": float(np.mean(rec["rounds"][-1]["accuracies"])),
            "phases": STEPS, "crypto_threads": big_integer_threads(
                rec["provenance"]["workers"])}


def big_integer_threads(workers: int) -> int:
    """The big-integer threads each client's process used (:mod:`fedlabels.secure.parallel`)."""
    from fedlabels.core.threads import CRYPTO_ENV_VAR, crypto_threads
    from fedlabels.engines.workers import crypto_threads_per_worker

    if workers == 1 or CRYPTO_ENV_VAR in os.environ:
        return crypto_threads()
    return crypto_threads_per_worker(workers)


class _Tee:
    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (kNN graph)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: the preset's, else one per core, "
                             "at most one per client)")
    parser.add_argument("--private-per-client", type=int, default=None,
                        help="override the preset's private images per client (a scaled run)")
    parser.add_argument("--output", default=None)
    parser.add_argument("--trace-file", default=None,
                        help="also write the trace lines to this file and sum them per "
                             "SecureHamming step in the record (\"steps\")")
    args = parser.parse_args()
    for given, flag in ((args.output, "--output"), (args.trace_file, "--trace-file")):
        if given and Path(given).exists():
            raise SystemExit(f"{given} exists; remove it or choose another {flag}.")
    if args.trace_file:  # the workers inherit stderr: tee it to the file, line-buffered
        tee = open(args.trace_file, "w", buffering=1)  # noqa: SIM115 (kept for the run)
        sys.stderr = _Tee(sys.stderr, tee)  # type: ignore[assignment]
    trace()
    preset = dict(PRESETS[args.preset])
    if args.private_per_client is not None:
        preset["private_per_client"] = args.private_per_client
    workers = preset.pop("workers", None)
    record = run(**preset, seed=args.seed, threads=args.threads,
                 workers=args.workers if args.workers is not None else workers)
    record["preset"] = args.preset
    if args.trace_file:
        record["steps"] = step_summary(Path(args.trace_file))
    text = json.dumps(record, indent=2)
    print(text)
    if args.output:
        path = Path(args.output)
        if path.exists():
            raise SystemExit(f"{path} exists; remove it or choose another --output.")
        path.write_text(text + "\n")


if __name__ == "__main__":
    main()
