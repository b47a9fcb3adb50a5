"""``fedlabels plot`` and ``fedlabels report`` import neither pandas nor scikit-learn nor
torch: the plot read its curves from ``RunResult.to_frame()`` and the report wrote its
summary table with ``pandas.DataFrame(rows).to_csv`` (importing pandas took about 0.35 s
of each command's 1.3 to 1.8 s). Their outputs are what they were: the curves are the
points ``to_frame()`` gives, and the table is the text pandas writes (pandas is the oracle
here, in the test's own process)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import fedlabels as fl
from fedlabels.reporting.plots import accuracy_figure
from fedlabels.reporting.rows_csv import rows_csv

SRC = Path(fl.__file__).parents[1]
HEAVY = ("pandas", "sklearn", "torch")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("runs")
    out = {}
    for name, kw in {"fedct": {}, "every3": {"eval_every": 3}}.items():
        result = fl.run("fedct", "breast_cancer", clients=3, model="dt", rounds=4, seed=1,
                        progress=False, **kw)
        out[name] = result.save(folder / f"{name}.json")
    return out


def _heavy_after(argv: list[str]) -> list[str]:
    """The heavy modules a ``fedlabels ARGV`` process has imported when it ends."""
    code = ("import json, runpy, sys\n"
            f"sys.argv = ['fedlabels', *{argv!r}]\n"
            "try:\n"
            "    runpy.run_module('fedlabels', run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    path = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_plot_and_report_import_no_pandas_sklearn_or_torch(runs: dict[str, Path],
                                                           tmp_path: Path) -> None:
    given = [str(p) for p in runs.values()]
    assert _heavy_after(["plot", *given, "-o", str(tmp_path / "x.png")]) == []
    assert (tmp_path / "x.png").stat().st_size > 0
    assert _heavy_after(["report", *given, "-o", str(tmp_path / "report")]) == []
    assert (tmp_path / "report" / "summary.csv").stat().st_size > 0


def test_the_curves_are_the_points_to_frame_gives(runs: dict[str, Path]) -> None:
    results = [fl.load_run(p, models=False) for p in runs.values()]
    fig = accuracy_figure(results)
    curves = [line for line in fig.axes[0].lines if line.get_marker() == "o"]
    assert len(curves) == 2
    for res, line in zip(results, curves, strict=True):
        frame = res.to_frame().dropna(subset=["acc_mean"])
        assert np.array_equal(line.get_xdata(), frame["round"].to_numpy())
        assert np.array_equal(line.get_ydata(), frame["acc_mean"].to_numpy())
    assert len(curves[1].get_xdata()) < len(curves[0].get_xdata())  # rounds not evaluated


def _value(rng: random.Random, kind: str) -> Any:
    return {"int": lambda: rng.randint(-10**12, 10**12),
            "float": lambda: rng.choice([rng.uniform(-1, 1) * 10.0 ** rng.randint(-20, 20),
                                         0.5, 3.0, math.nan, math.inf, -0.0, 1e16, 1e-5]),
            "bool": lambda: rng.random() < 0.5,
            "str": lambda: rng.choice(["a", "a,b", 'q"uote', "line\nbreak", "", " é "]),
            "none": lambda: None,
            "np.float64": lambda: np.float64(rng.random()),
            "np.int64": lambda: np.int64(rng.randint(0, 100)),
            "np.bool_": lambda: np.bool_(rng.random() < 0.5),
            "list": lambda: [1, "x"]}[kind]()


@pytest.mark.parametrize("seed", range(3))
def test_the_summary_table_is_the_text_pandas_writes(seed: int) -> None:
    rng = random.Random(seed)
    kinds = ["int", "float", "bool", "str", "none", "np.float64", "np.int64", "np.bool_",
             "list"]
    for _ in range(500):
        columns = [f"c{i}" for i in range(rng.randint(1, 5))]
        mix = {c: rng.sample(kinds, rng.randint(1, 3)) for c in columns}
        rows = [{c: _value(rng, rng.choice(mix[c])) for c in rng.sample(columns, len(columns))
                 if rng.random() > 0.15} for _ in range(rng.randint(1, 4))]
        if any(rows):
            assert rows_csv(rows) == pd.DataFrame(rows).to_csv(index=False), rows


def test_a_report_s_table_is_the_text_pandas_writes(runs: dict[str, Path]) -> None:
    from fedlabels.reporting.report import group_runs, summary_rows

    rows = summary_rows(group_runs([fl.load_run(p, models=False) for p in runs.values()]))
    assert rows_csv(rows) == pd.DataFrame(rows).to_csv(index=False)
