"""Simulator speed with 1 and N worker processes, side by side (not a test).

Each case loads its federation once, then runs with ``--workers 1`` and ``--workers N``
alternately (1, N, N, 1, ...), ``--repeats`` times each, in this one process (fresh
workers every run); the records of the two must be equal. It prints and writes the
wall seconds of each ``fl.run`` call (below), the CPU seconds of the
simulator's process and of its workers, the ratio of medians, the load average before and
after each run, and an idle-machine estimate from the CPU seconds (Amdahl: the simulator's
own seconds are serial, the workers' split as the clients do, against the one-process
run's CPU seconds). On a shared machine the measured ratio is pessimistic: other
processes take the cores the workers would use, and under ``nice`` the workers only get
what the others leave.

For each multi-worker run it records the workers' timeline (``WorkerGrid.timeline``:
wall-clock start and end of every message a worker handled, and when the simulator
dispatched and collected each exchange) and summarises it under ``timeline``: the seconds
in which at least one worker was busy, the seconds in which two or more were busy
(``overlap``: their fraction), ``parallelism`` (the workers' busy seconds over the seconds
any was busy: 1.0 one after the other, N side by side), each worker's busy seconds, and
the simulator's own seconds between exchanges (``between_exchanges_s``). These do not
depend on the machine's load the way the wall-clock ratio does: a worker waiting for the
simulator shows up as no overlap even on an idle machine. Per exchange (``exchanges``) it
lists each worker's busy seconds and how long it stood idle at the exchange's end waiting
for the other (``idle_at_end_s``; summed in ``idle_at_end_s_per_worker``).

Each client's handling time is recorded in both runs (the one-process run through a timed
in-process grid), so ``handle_s`` compares the same work done in one process and spread
over the workers (``worker_overhead``: the workers' seconds over the one process's;
``worker_cpu_overhead``: the same in CPU seconds of the handling thread, which a loaded
machine inflates less than the wall clock).

Before a case is measured it runs once for one round with one worker, untimed: the
imports (torch, its compiler's modules that Adam loads, scikit-learn) and first-use costs
are then paid before either measured run, not by whichever runs first. ``wall_s`` is the
wall-clock time of the whole ``fl.run`` call (what a user waits, the final clinical
metrics included); ``result_wall_s`` is the run's own ``RunResult.wall_seconds``, which in
one process stops before the final test-set predictions of the clinical metrics and with
workers includes them (the workers make them in ``finish``).

First (``--probe``) it runs one client's kind of work (the MLP's training, a random
forest's fit) alone in one process and then in two processes at once, and records the CPU
seconds of each (``contention``): if two at once take more CPU seconds each, the cores slow
each other down and no split of the clients recovers that.

Usage::

    nice -n 10 .venv/bin/python benchmarks/workers_speedup.py --workers 2 \
        --cases fedct-rf,fedavg-mlp,xclp-paillier --output results/workers_speedup.json

Cases (Fashion-MNIST, ``fedlabels fetch fashion_mnist`` first; seed 0):

* ``fedct-rf``: FedCT, random forests, m = 10, 200 private images each, |U| = 1,000,
  3 rounds;
* ``fedavg-mlp``: FedAvg, ``mlp(hidden=256-128)``, m = 10, 500 images each, 5 rounds × 200
  steps;
* ``xclp-paillier``: secure XCLP with Paillier (2048-bit keys), 5 clients × 300 images
  (10 % labelled) + 100 test points each, L = 1024, k = 10 (``--xclp-size`` sets 300).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any, ClassVar

import fedlabels as fl
from fedlabels.core.threads import torch_threads
from fedlabels.engines import inprocess
from fedlabels.engines import workers as workers_engine


def _cases(xclp_size: int) -> dict[str, dict[str, Any]]:
    """Per case: the federation (``load_federation`` keywords) and the run (``fl.run``)."""
    return {
        "fedct-rf": {"data": dict(clients=10, private_per_client=200, unlabeled=1000),
                     "run": dict(method="fedct", model="rf", rounds=3)},
        "fedavg-mlp": {"data": dict(clients=10, private_per_client=500, unlabeled=100),
                       "run": dict(method="fedavg", model="mlp(hidden=256-128)", rounds=5,
                                   period=200)},
        # for a 16-core machine (docs/engines.md): 32 clients, so 16 workers hold 2 each
        # (ceiling 16x), and 2 rounds to keep the one-process run near a minute
        "fedct-rf-32": {"data": dict(clients=32, private_per_client=200, unlabeled=1000),
                        "run": dict(method="fedct", model="rf", rounds=2)},
        "fedavg-mlp-32": {"data": dict(clients=32, private_per_client=500, unlabeled=100),
                          "run": dict(method="fedavg", model="mlp(hidden=256-128)", rounds=2,
                                      period=100)},
        "xclp-paillier": {
            "data": dict(clients=5, private_per_client=xclp_size, unlabeled=100),
            "run": dict(method="xclp", rounds=1,
                        options={"secure": "paillier", "lsh_bits": 1024, "knn": 10,
                                 "labeled_fraction": 0.1, "test_points": 100})},
    }


def _records(result: fl.RunResult) -> list[Any]:
    return [(r.accuracies, r.bytes_up, r.bytes_down) for r in result.rounds]


class _TimedInProcessGrid(inprocess.InProcessGrid):
    """The one-process grid, timing each client's message (one exchange per client, in
    client order: the same messages, bytes and records)."""

    made: ClassVar[list[_TimedInProcessGrid]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handle_s: dict[int, float] = {}
        self.handle_cpu_s: dict[int, float] = {}
        _TimedInProcessGrid.made.append(self)

    def exchange(self, messages: Any, rnd: int) -> dict[int, Any]:
        replies = {}
        for cid in sorted(messages):
            start, cpu = time.perf_counter(), time.thread_time()
            replies.update(super().exchange({cid: messages[cid]}, rnd))
            self.handle_s[cid] = self.handle_s.get(cid, 0.0) + time.perf_counter() - start
            self.handle_cpu_s[cid] = self.handle_cpu_s.get(cid, 0.0) + time.thread_time() - cpu
        return replies


class _RecordedGrid(workers_engine.WorkerGrid):
    """The simulator's worker grid, kept for its timeline after the run."""

    made: ClassVar[list[workers_engine.WorkerGrid]] = []
    record_timeline = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _RecordedGrid.made.append(self)


def summarise_timeline(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Busy seconds, overlap and parallelism of the workers from a grid's timeline."""
    spans = [(e["start"], e["end"], e["worker"]) for e in events if e["event"] == "handle"]
    if not spans:
        return {}
    edges = sorted([(a, 1) for a, _, _ in spans] + [(b, -1) for _, b, _ in spans])
    any_busy = two_busy = 0.0
    busy, last = 0, edges[0][0]
    for when, step in edges:
        if busy >= 1:
            any_busy += when - last
        if busy >= 2:
            two_busy += when - last
        busy, last = busy + step, when
    per_worker: dict[int, float] = {}
    for a, b, w in spans:
        per_worker[w] = per_worker.get(w, 0.0) + b - a
    marks = [e for e in events if e["event"] in ("dispatch", "collected")]
    between = sum(b["time"] - a["time"] for a, b in itertools.pairwise(marks)
                  if a["event"] == "collected" and b["event"] == "dispatch")
    exchanges, idle_total = _per_exchange(events), dict.fromkeys(per_worker, 0.0)
    for x in exchanges:
        for w, idle in x["idle_at_end_s"].items():
            idle_total[int(w)] += idle
    per_client: dict[int, float] = {}
    per_client_cpu: dict[int, float] = {}
    for e in events:
        if e["event"] == "handle":
            per_client[e["client"]] = per_client.get(e["client"], 0.0) + e["end"] - e["start"]
            per_client_cpu[e["client"]] = per_client_cpu.get(e["client"], 0.0) + e["cpu"]
    return {"any_busy_s": round(any_busy, 2), "two_or_more_busy_s": round(two_busy, 2),
            "overlap": round(two_busy / any_busy, 3) if any_busy else None,
            "parallelism": round(sum(per_worker.values()) / any_busy, 3) if any_busy else None,
            "busy_s_per_worker": {str(w): round(v, 2) for w, v in sorted(per_worker.items())},
            "idle_at_end_s_per_worker": {str(w): round(v, 2)
                                         for w, v in sorted(idle_total.items())},
            "between_exchanges_s": round(between, 2),
            "handle_s": {str(c): round(v, 3) for c, v in sorted(per_client.items())},
            "handle_cpu_s": {str(c): round(v, 3) for c, v in sorted(per_client_cpu.items())},
            "exchanges": exchanges}


def _per_exchange(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per exchange: its span, each worker's busy seconds and its idle seconds at the end
    (from its last finished message to the exchange's last)."""
    out: list[dict[str, Any]] = []
    current: list[dict[str, Any]] = []
    for e in events:
        if e["event"] == "dispatch":
            current, start = [], e["time"]
        elif e["event"] == "handle":
            current.append(e)
        elif e["event"] == "collected" and current:
            last = {w: max(h["end"] for h in current if h["worker"] == w)
                    for w in {h["worker"] for h in current}}
            busy = {w: sum(h["end"] - h["start"] for h in current if h["worker"] == w)
                    for w in last}
            end = max(last.values())
            out.append({"round": e["round"], "span_s": round(e["time"] - start, 3),
                        "busy_s": {str(w): round(v, 3) for w, v in sorted(busy.items())},
                        "idle_at_end_s": {str(w): round(end - t, 3)
                                          for w, t in sorted(last.items())}})
    return out


def _children_cpu() -> float:
    """CPU seconds of the finished worker processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(name: str, case: dict[str, Any], workers: int, repeats: int) -> dict[str, Any]:
    fed = fl.load_federation("fashion_mnist", seed=0, **case["data"])
    settings = dict(case["run"])
    method = settings.pop("method")
    runs: dict[int, list[dict[str, Any]]] = {1: [], workers: []}
    records: dict[int, Any] = {}
    warm = time.perf_counter()  # imports and first-use costs, paid by neither measured run
    fl.run(method, fed, seed=0, progress=False, workers=1, **{**settings, "rounds": 1})
    warmup_s = round(time.perf_counter() - warm, 2)
    for i in range(repeats):
        for n in (1, workers) if i % 2 == 0 else (workers, 1):  # drift cancels out
            load_before = os.getloadavg()[0]
            cpu, workers_cpu = time.process_time(), _children_cpu()
            _RecordedGrid.made.clear()
            _TimedInProcessGrid.made.clear()
            wall = time.perf_counter()
            result = fl.run(method, fed, seed=0, progress=False, workers=n, **settings)
            wall = time.perf_counter() - wall
            cpu, workers_cpu = time.process_time() - cpu, _children_cpu() - workers_cpu
            timeline = summarise_timeline(getattr(_RecordedGrid.made[0], "timeline", [])) \
                if _RecordedGrid.made else {}
            if n == 1 and _TimedInProcessGrid.made:
                timed = _TimedInProcessGrid.made[0]
                timeline = {"handle_s": {str(c): round(v, 3)
                                         for c, v in sorted(timed.handle_s.items())},
                            "handle_cpu_s": {str(c): round(v, 3)
                                             for c, v in sorted(timed.handle_cpu_s.items())}}
            runs[n].append({"wall_s": round(wall, 2),
                            "result_wall_s": round(result.wall_seconds, 2),
                            "cpu_s": {"simulator": round(cpu, 2),
                                      "workers": round(workers_cpu, 2)},
                            "load_before": load_before, "load_after": os.getloadavg()[0],
                            **({"timeline": timeline} if timeline else {})})
            records.setdefault(n, _records(result))
            print(f"{name} workers={n}: {wall:.1f} s, CPU s {cpu:.1f} in the "
                  f"simulator + {workers_cpu:.1f} in workers (load {load_before:.1f} -> "
                  f"{os.getloadavg()[0]:.1f})" + (
                      f"; workers busy {timeline['any_busy_s']} s, overlap "
                      f"{timeline['overlap']}, parallelism {timeline['parallelism']}, idle "
                      f"at exchanges' ends {timeline['idle_at_end_s_per_worker']} s"
                      if "overlap" in timeline else ""), flush=True)
    if method != "xclp":  # xclp draws secret keys and masks: not comparable
        assert records[1] == records[workers], f"{name}: workers changed the records"
    one = statistics.median(r["wall_s"] for r in runs[1])
    handled = {n: statistics.median(sum(r["timeline"]["handle_s"].values()) for r in runs[n])
               for n in runs}
    handled_cpu = {n: statistics.median(sum(r["timeline"]["handle_cpu_s"].values())
                                        for r in runs[n]) for n in runs}
    many = statistics.median(r["wall_s"] for r in runs[workers])
    # Amdahl from CPU seconds: the simulator's own part is serial, the workers' part splits
    # as the clients do (equal clients: the busiest worker holds ceil(m / N) of m)
    # against the one-process run's CPU seconds (its wall time on an idle machine)
    m = case["data"]["clients"]
    busiest = -(-m // workers) / m
    alone = statistics.median(r["cpu_s"]["simulator"] for r in runs[1])
    serial = statistics.median(r["cpu_s"]["simulator"] for r in runs[workers])
    parallel = statistics.median(r["cpu_s"]["workers"] for r in runs[workers])
    return {"data": case["data"], "run": case["run"], "runs": {str(k): v for k, v in runs.items()},
            "median_wall_s": {"1": one, str(workers): many},
            "warmup_s": warmup_s, "speedup": round(one / many, 2),
            "handled_s": {str(n): round(v, 2) for n, v in handled.items()},
            "handled_cpu_s": {str(n): round(v, 2) for n, v in handled_cpu.items()},
            "worker_overhead": round(handled[workers] / handled[1], 3),
            "worker_cpu_overhead": round(handled_cpu[workers] / handled_cpu[1], 3),
            "idle_estimate": round(alone / (serial + parallel * busiest), 2)}


def _workload(kind: str) -> None:
    """One client's kind of work on fixed synthetic data: ``torch-mlp`` (the fedavg-mlp
    case's MLP, 200 Adam steps of 64 on 500 rows), ``sklearn-rf`` (a random forest on 1,200
    rows, as a fedct-rf client fits each round)."""
    import numpy as np

    rng = np.random.default_rng(0)
    if kind == "torch-mlp":
        import torch

        torch.set_num_threads(1)
        X, y = torch.randn(500, 784), torch.randint(0, 10, (500,))
        net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                  torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                  torch.nn.Linear(128, 10))
        opt = torch.optim.Adam(net.parameters())
        for _ in range(200):
            i = torch.from_numpy(rng.integers(0, 500, 64))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(X[i]), y[i]).backward()
            opt.step()
    else:
        from sklearn.ensemble import RandomForestClassifier

        rows, labels = rng.random((1200, 784), dtype=np.float32), rng.integers(0, 10, 1200)
        RandomForestClassifier(random_state=0).fit(rows, labels)


def _timed_workload(kind: str, repeats: int, conn: Any) -> None:
    start = time.thread_time()
    for _ in range(repeats):
        _workload(kind)
    conn.send(time.thread_time() - start)


def contention(kind: str, repeats: int = 3) -> dict[str, float]:
    """CPU seconds of a workload run alone in one forked process, then in two at once:
    ``slowdown`` above 1 means the cores slow each other down (shared caches, memory
    bandwidth, a host's sibling threads), which no split of the clients can recover; the
    workers' speed-up is at most 2 / slowdown on 2 cores."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    _workload(kind)  # imports and first use, before the fork
    out: dict[str, float] = {}
    for label, copies in (("alone_cpu_s", 1), ("two_at_once_cpu_s", 2)):
        pipes = [ctx.Pipe() for _ in range(copies)]
        procs = [ctx.Process(target=_timed_workload, args=(kind, repeats, child))
                 for _, child in pipes]
        for proc in procs:
            proc.start()
        out[label] = round(statistics.mean(parent.recv() for parent, _ in pipes), 3)
        for proc in procs:
            proc.join()
    out["slowdown"] = round(out["two_at_once_cpu_s"] / out["alone_cpu_s"], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--cases", default="fedct-rf,fedavg-mlp,xclp-paillier")
    p.add_argument("--xclp-size", type=int, default=300)
    p.add_argument("--output", default="results/workers_speedup.json")
    p.add_argument("--probe", default="torch-mlp,sklearn-rf",
                   help="workloads run alone and two at once (CPU seconds); '' for none")
    args = p.parse_args()
    inprocess.WorkerGrid = _RecordedGrid  # type: ignore[misc]  # keep each run's timeline
    inprocess.InProcessGrid = _TimedInProcessGrid  # type: ignore[misc]  # time each client
    cases = _cases(args.xclp_size)
    out: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)),
                           "torch_threads": torch_threads(), "workers": args.workers,
                           "cases": {}}
    out["contention"] = {}
    for kind in filter(None, args.probe.split(",")):
        out["contention"][kind] = {"load_before": os.getloadavg()[0], **contention(kind)}
        print(f"contention {kind}: {out['contention'][kind]}", flush=True)
    for name in args.cases.split(","):
        out["cases"][name] = measure(name, cases[name], args.workers, args.repeats)
        print(f"{name}: {out['cases'][name]['speedup']}x with {args.workers} workers "
              f"(idle-machine estimate from CPU seconds: "
              f"{out['cases'][name]['idle_estimate']}x; the workers handled the clients' "
              f"messages in {out['cases'][name]['worker_overhead']}x the one process's "
              f"seconds, {out['cases'][name]['worker_cpu_overhead']}x its CPU seconds)",
              flush=True)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
