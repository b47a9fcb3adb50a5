"""benchmarks/xclp_table.py's grid reproduces the figures docs/xclp.md quotes for it."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import load_benchmark
from fedlabels.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "xclp.md"


def test_grid_run_gives_the_documented_per_seed_figure(tmp_path, capsys):
    """The balance table's digits XCLP, balance=class, seed 0 (the docs' per-seed line)
    comes back from the grid's own command line; with the default features=raw it was
    0.9600, not the 0.9133 measured with features=federation."""
    line = re.search(r"digits xclp: [0-9.]+ → ([0-9.]+),", DOC.read_text(encoding="utf-8"))
    assert line, "docs/xclp.md lost its per-seed line of the balance table"
    runs = dict(load_benchmark("xclp_table").grid("full", "one-shot"))
    args = runs["digits_xclp_class_seed0"]
    out = tmp_path / "run.json"
    assert main(["-q", "run", *args, "--output", str(out)]) == 0
    import json

    accuracy = json.loads(out.read_text())["final"]["mean_accuracy"]
    assert f"{accuracy:.4f}" == line.group(1)
