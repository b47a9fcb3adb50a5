"""benchmarks/batched_kinds.py: every kind of batched step timed one by one and together,
the record written once (never over an existing file), bad arguments refused."""

from __future__ import annotations

import json

import pytest

from conftest import load_benchmark


def load():
    return load_benchmark("batched_kinds")


def test_every_kind_is_timed_and_recorded(tmp_path, capsys):
    script = load()
    out = tmp_path / "kinds.json"
    assert script.main(["--clients", "3", "--hidden", "8", "--steps", "1",
                        "--noise-threads", "2", "--output", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [r["kind"] for r in record["rows"]] == ["train", "distill", "dpsgd", "noise"]
    assert record["noise_threads"] == 2
    for row in record["rows"]:
        assert row["one_by_one_s"] > 0 and row["together_s"] > 0
        assert row["ratio"] == pytest.approx(row["one_by_one_s"] / row["together_s"])
    assert record["clients"] == 3 and record["device"] == "cpu"
    assert "dpsgd" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # an existing record is never overwritten
        script.main(["--clients", "3", "--hidden", "8", "--output", str(out)])
    with pytest.raises(SystemExit):
        script.main(["--kinds", "train,fedprox"])
