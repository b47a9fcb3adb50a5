"""Run results: per-round records, the JSON/CSV they are written to, and summary rows.

Files are written atomically (temporary file in the same directory, then ``os.replace``), so an
interrupted write never leaves a truncated result behind.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class RoundRecord:
    """What happened in one communication round."""

    round: int
    local_steps: int | None
    accuracies: list[float] | None
    server: dict[str, float]
    bytes_up: list[int]
    bytes_down: list[int]
    seconds: float

    def accuracy_stats(self) -> dict[str, float] | None:
        if self.accuracies is None:
            return None
        a = np.asarray(self.accuracies)
        return {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()),
                "max": float(a.max())}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["accuracy"] = self.accuracy_stats()
        return out


@dataclass
class RunResult:
    """The outcome of one run of one method."""

    method: str
    dataset: str
    seed: int
    config: dict[str, Any]
    federation: dict[str, Any]
    models: list[str]
    rounds: list[RoundRecord]
    communication: dict[str, Any]
    wall_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    # the clients' final models (in-process runs only; not written to JSON)
    client_models: list[Any] = field(default_factory=list, repr=False, compare=False)
    # the federation's feature names, for inspecting those models (not written to JSON)
    feature_names: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def final_record(self) -> RoundRecord:
        return next(r for r in reversed(self.rounds) if r.accuracies is not None)

    @property
    def final(self) -> dict[str, Any]:
        rec = self.final_record
        stats = rec.accuracy_stats() or {}
        return {"round": rec.round, "mean_accuracy": stats["mean"],
                "std_accuracy": stats["std"], "min_accuracy": stats["min"],
                "max_accuracy": stats["max"], "client_accuracies": list(rec.accuracies or [])}

    def bytes_up_per_round(self) -> list[list[int]]:
        """Protocol bytes uploaded: one list over rounds per client."""
        return [list(col) for col in zip(*(r.bytes_up for r in self.rounds), strict=True)]

    def bytes_down_per_round(self) -> list[list[int]]:
        return [list(col) for col in zip(*(r.bytes_down for r in self.rounds), strict=True)]

    def mean_bytes_up_per_client_round(self) -> float:
        ups = np.asarray([r.bytes_up for r in self.rounds], dtype=float)
        return float(ups.mean()) if ups.size else 0.0

    def to_dict(self) -> dict[str, Any]:
        comm = dict(self.communication)
        comm["bytes_up_per_round"] = self.bytes_up_per_round()
        comm["bytes_down_per_round"] = self.bytes_down_per_round()
        comm["mean_bytes_up_per_client_per_round"] = self.mean_bytes_up_per_client_round()
        return _clean({
            "method": self.method,
            "dataset": self.dataset,
            "seed": self.seed,
            "config": self.config,
            "models": self.models,
            "federation": self.federation,
            "wall_seconds": self.wall_seconds,
            "final": self.final,
            "communication": comm,
            "rounds": [r.to_dict() for r in self.rounds],
            **self.extra,
        })

    def summary_row(self) -> dict[str, Any]:
        f = self.final
        return {"method": self.method, "dataset": self.dataset, "seed": self.seed,
                "mean_acc": f["mean_accuracy"], "min_acc": f["min_accuracy"],
                "max_acc": f["max_accuracy"],
                "bytes_up_per_client_round": self.mean_bytes_up_per_client_round(),
                "wall_s": self.wall_seconds}

    def to_frame(self) -> Any:
        """Per-round records as a pandas DataFrame (one row per round)."""
        import pandas as pd

        rows = []
        for r in self.rounds:
            stats = r.accuracy_stats() or {}
            rows.append({"round": r.round, "local_steps": r.local_steps,
                         **{f"acc_{k}": v for k, v in stats.items()}, **r.server,
                         "bytes_up_mean": float(np.mean(r.bytes_up)),
                         "bytes_down_mean": float(np.mean(r.bytes_down)),
                         "seconds": r.seconds})
        return pd.DataFrame(rows)

    def save_json(self, path: str | Path) -> Path:
        return write_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def save_csv(self, path: str | Path) -> Path:
        return write_atomic(path, self.to_frame().to_csv(index=False))


def _clean(obj: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically, creating parent directories."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of summary rows (method, accuracies, bytes, wall time)."""
    header = f"{'method':<26} {'dataset':<14} {'mean acc':>8} {'min':>6} {'max':>6} " \
             f"{'up B/client/round':>18} {'wall s':>7}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['method'][:26]:<26} {r['dataset'][:14]:<14} {r['mean_acc']:>8.4f} "
                     f"{r['min_acc']:>6.3f} {r['max_acc']:>6.3f} "
                     f"{r['bytes_up_per_client_round']:>18,.0f} {r['wall_s']:>7.1f}")
    return "\n".join(lines)


def load_result(path: str | Path) -> RunResult:
    """Read a result JSON written by :meth:`RunResult.save_json`."""
    data = json.loads(Path(path).read_text())
    rounds = [RoundRecord(round=r["round"], local_steps=r["local_steps"],
                          accuracies=r["accuracies"], server=r["server"],
                          bytes_up=r["bytes_up"], bytes_down=r["bytes_down"],
                          seconds=r["seconds"]) for r in data["rounds"]]
    comm = {k: v for k, v in data["communication"].items()
            if k not in ("bytes_up_per_round", "bytes_down_per_round",
                         "mean_bytes_up_per_client_per_round")}
    known = {"method", "dataset", "seed", "config", "federation", "models", "rounds",
             "communication", "wall_seconds", "final"}
    return RunResult(method=data["method"], dataset=data["dataset"], seed=data["seed"],
                     config=data["config"], federation=data["federation"],
                     models=data["models"], rounds=rounds, communication=comm,
                     wall_seconds=data["wall_seconds"],
                     extra={k: v for k, v in data.items() if k not in known})
