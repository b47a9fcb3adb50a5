"""CPU time of ``fl.load_run`` with the models built on first use, against loading and
building them at once (what ``load_run`` did before), side by side in one process (not a
test).

Runs FedAvg with an ``mlp`` and FedCT with an ``rf`` on digits (``--clients`` clients,
``--rounds`` rounds, seed ``--seed``), saves each, then times, taking turns ``--repeats``
times: ``fl.load_run(path)`` (the result, names and preprocessing; no model built) and
``fl.load_run(path).client_models`` (every model built too), and checks that the loaded
models predict as the run's own. Prints, per run, the median CPU seconds
(``time.process_time``) of each and the load average before and after, as JSON.

Usage::

    nice -n 10 .venv/bin/python benchmarks/load_run_lazy.py --clients 10 --rounds 3 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import fedlabels as fl


def _cpu(fn: Any) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    out: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method, model in (("fedavg", "mlp"), ("fedct", "rf")):
            path = Path(tmp) / f"{method}_{model}.json"
            result = fl.run(method, "digits", model=model, clients=args.clients,
                            rounds=args.rounds, seed=args.seed, progress=False)
            result.save(path)
            loaded = fl.load_run(path)
            X = fl.load_federation("digits", clients=args.clients, seed=args.seed).X_test
            for mine, again in zip(result.client_models, loaded.client_models, strict=True):
                assert np.array_equal(mine.predict(X), again.predict(X))
            lazy, built = [], []
            for _ in range(args.repeats):  # taking turns
                lazy.append(_cpu(lambda: fl.load_run(path)))  # noqa: B023
                built.append(_cpu(lambda: fl.load_run(path).client_models))  # noqa: B023
            out[f"{method}/{model}"] = {
                "models_file_bytes": (Path(tmp) / f"{method}_{model}.models.npz").stat().st_size,
                "load_run_cpu_s": statistics.median(lazy),
                "load_run_and_build_cpu_s": statistics.median(built)}
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
