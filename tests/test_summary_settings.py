"""``summary.csv`` names each configuration's settings in columns of their own (partition,
rounds, the method options changed), so that rows of one sweep can be joined and pivoted
without parsing the configuration's label."""

from __future__ import annotations

import csv

from fedlabels.reporting.report import write_report
from fedlabels.results import RoundRecord, RunResult


def _run(method: str, seed: int, partition: str, options: dict, acc: float) -> RunResult:
    record = RoundRecord(round=1, local_steps=None, accuracies=[acc] * 2, server={},
                         bytes_up=[10] * 2, bytes_down=[5] * 2, seconds=0.1)
    config = {"method": method, "rounds": 1, "seed": seed, "partition": partition,
              "options": options}
    return RunResult(method=method, dataset="toy", seed=seed, config=config,
                     federation={"n_clients": 2}, models=["dt"] * 2, rounds=[record],
                     communication={"bytes_up_total": 20, "bytes_down_total": 10},
                     wall_seconds=1.0)


def test_summary_rows_name_partition_rounds_and_changed_options(tmp_path):
    sweep = {(method, partition, eps): 0.5 + 0.01 * i
             for i, (method, partition, eps) in enumerate(
                 (m, p, e) for m, eps in (("fedct", [None]), ("dp-fedct", [1.0, 4.0]))
                 for p in ("iid", "dirichlet:0.5") for e in eps)}
    runs = [_run(m, seed, p, {} if e is None else {"epsilon": e}, acc + 0.001 * seed)
            for (m, p, e), acc in sweep.items() for seed in (0, 1)]
    files, _ = write_report(runs, tmp_path / "sweep.html")
    with open(files["summary table"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(sweep)
    assert {"partition", "rounds", "options.epsilon"} <= set(rows[0])
    got = {(r["method"], r["partition"], float(r["options.epsilon"]) if r["options.epsilon"]
            else None): float(r["accuracy_mean"]) for r in rows}
    assert got.keys() == sweep.keys()  # each configuration found by its settings alone
    for key, acc in sweep.items():
        assert abs(got[key] - (acc + 0.0005)) < 1e-12
    assert {r["rounds"] for r in rows} == {"1"}
