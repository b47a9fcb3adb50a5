"""Record every method's result JSON, or compare two such recordings.

A refactoring that moves code must not change results. ``record DIR`` runs every registered
method on breast_cancer and digits (seed 0, small settings that still exercise each method,
the method's default model, reproducible noise) and three methods over the Flower loopback
grid (the real ServerApp loop and ClientApp), and writes one JSON per run into ``DIR``.
``--compare A B`` reports every field that differs between the files of two recordings,
ignoring provenance and timing (wall seconds, versions, host, dates, paths)::

    nice python benchmarks/compare_results.py record /tmp/before     # on the old code
    nice python benchmarks/compare_results.py record /tmp/after      # on the new code
    python benchmarks/compare_results.py --compare /tmp/before /tmp/after

Exit status 0 when the recordings are equal, 1 when a field or a file differs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

DATASETS = ("breast_cancer", "digits")
SEED, CLIENTS, ROUNDS, PERIOD = 0, 3, 2, 5
XCLP_SMALL = {"lsh_bits": 32, "knn": 3, "labeled_fraction": 0.3, "key_bits": 512,
              "insecure_small_keys": True}
#: options a method needs to run at this size (one run per entry); others run with none
OPTIONS: dict[str, list[dict[str, Any]]] = {
    "dp-fedct": [{"epsilon": 1.0, "mechanism": "xor"},
                 {"epsilon": 8.0, "mechanism": "subsample-aggregate", "teachers": 3,
                  "label_queries": 40, "data_dependent": True},
                 {"epsilon": 8.0, "mechanism": "dpsgd", "example_rate": 0.1}],
    "dp-fedavg": [{"epsilon": 8.0}],
    "dp-pate": [{"epsilon": 2.0}],
    "fredy": [{"epsilon": 1.0, "queries": 40}],
    "xclp": [{**XCLP_SMALL, "test_points": 20, "secure": "ot"}],
    "fedavg-xclp": [{**XCLP_SMALL, "warmup_rounds": 1, "secure": "none"}],
}
#: methods whose default model cannot run a given option set
MODELS = {("dp-fedct", "dpsgd"): "mlp(hidden=8)"}
FLOWER_METHODS = ("fedct", "fedavg", "dp-fedct")
#: keys whose values are provenance or timing, wherever they occur
IGNORED = {"provenance", "wall_seconds", "seconds", "wall_s", "output", "started_utc",
           "ended_utc", "checkpoint", "setup_seconds"}


def _runs() -> list[tuple[str, str, dict[str, Any]]]:
    from fedlabels.methods import METHODS

    out = []
    for dataset in DATASETS:
        for name in sorted(METHODS):
            for options in OPTIONS.get(name, [{}]):
                out.append((dataset, name, options))
    return out


def _tag(dataset: str, method: str, options: dict[str, Any], engine: str = "sim") -> str:
    extra = "".join(f"_{v}" for k, v in sorted(options.items())
                    if k in ("mechanism", "secure"))
    return f"{engine}_{dataset}_{method}{extra}"


def _config(dataset: str, method: str, options: dict[str, Any]) -> Any:
    from fedlabels.runs.config import RunConfig

    model = MODELS.get((method, str(options.get("mechanism"))))
    return RunConfig(method=method, dataset=dataset, clients=CLIENTS, model=model,
                     rounds=ROUNDS, period=PERIOD, seed=SEED, options=dict(options),
                     insecure_reproducible_noise=True)


def record(directory: Path) -> None:
    from fedlabels.api import run_config
    from fedlabels.core.randomness import reproducible

    directory.mkdir(parents=True, exist_ok=True)
    for dataset, method, options in _runs():
        tag = _tag(dataset, method, options)
        with reproducible(SEED):
            result = run_config(_config(dataset, method, options), progress=False)
        result.save_json(directory / f"{tag}.json")
        print(tag, (result.final or {}).get("mean_accuracy"), flush=True)
    _record_flower(directory)


def _record_flower(directory: Path) -> None:
    import tempfile

    from fedlabels.core.randomness import reproducible
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server

    for method in FLOWER_METHODS:
        options = OPTIONS.get(method, [{}])[0]
        cfg = _config("breast_cancer", method, options).replace(
            insecure_reproducible_noise=False)  # the simulator only
        with tempfile.TemporaryDirectory() as sites, reproducible(SEED):
            prepared, grid = loopback_deployment(cfg, Path(sites), reply_timeout=60.0)
            result = run_server(grid, server_context(prepared.spec))
        assert result is not None
        tag = _tag("breast_cancer", method, options, engine="flower")
        result.save_json(directory / f"{tag}.json")
        print(tag, (result.final or {}).get("mean_accuracy"), flush=True)


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every path at which ``a`` and ``b`` differ, ignoring :data:`IGNORED` keys."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key in IGNORED:
                continue
            where = f"{path}.{key}" if path else key
            if key not in a or key not in b:
                out.append(f"{where}: only in {'B' if key not in a else 'A'}")
            else:
                out.extend(differences(a[key], b[key], where))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def compare(first: Path, second: Path) -> int:
    names_a = {p.name for p in first.glob("*.json")}
    names_b = {p.name for p in second.glob("*.json")}
    problems = [f"{n}: only in {first}" for n in sorted(names_a - names_b)]
    problems += [f"{n}: only in {second}" for n in sorted(names_b - names_a)]
    for name in sorted(names_a & names_b):
        a = json.loads((first / name).read_text())
        b = json.loads((second / name).read_text())
        problems += [f"{name}: {d}" for d in differences(a, b)]
    for line in problems:
        print(line)
    print(f"{len(names_a & names_b)} results compared, {len(problems)} differences")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), type=Path,
                        help="compare two recordings instead of recording")
    parser.add_argument("command", nargs="?", choices=["record"])
    parser.add_argument("directory", nargs="?", type=Path)
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.command != "record" or args.directory is None:
        parser.error("give 'record DIR' or '--compare A B'")
    record(args.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
