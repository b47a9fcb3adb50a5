"""A benchmark that resumes from its --out file keeps the runs already there and does not
rerun them; it says so for each, so a documented command run in a checkout (whose committed
results file holds every run) does not look as if it measured anything."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import load_benchmark


def test_a_kept_run_is_named_with_how_to_measure_it_again(tmp_path, monkeypatch, capsys):
    script = load_benchmark("fedct_label_ceiling")
    out = tmp_path / "ceiling.jsonl"
    labellers = {name: {"label_acc_on_U": 0.5, "student_acc": 0.5}
                 for name in script.LABELLERS}
    row = {"setting": "fashion", "seed": 0, "steps": 7, "local_acc": 0.5,
           "pooled_test_acc": 0.5, "labellers": labellers}
    out.write_text(json.dumps(row) + "\n")
    monkeypatch.setattr(script, "one_seed", lambda *a: pytest.fail("reran a kept run"))
    monkeypatch.setattr(sys, "argv", ["fedct_label_ceiling.py", "--setting", "fashion",
                                      "--seeds", "0", "--steps", "7", "--out", str(out)])
    script.main()
    err = capsys.readouterr().err
    assert f"fashion seed 0 steps 7: kept from {out}, not rerun" in err
    assert "give --out NEW to measure it again" in err
