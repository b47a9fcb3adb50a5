"""benchmarks/step_ops.py: aten calls a step, the step by hand against autograd's."""

from __future__ import annotations

import re

import pytest

from conftest import load_benchmark


def test_the_step_by_hand_makes_fewer_calls(capsys):
    script = load_benchmark("step_ops")
    assert script.main(["--clients", "3", "--hidden", "16-8", "--features", "20"]) == 0
    out = capsys.readouterr().out
    before, now, foreach, fused, cuda_before, cuda_now = (
        int(x) for x in re.findall(r"(\d+) -> (?:fused )?(\d+)", out.replace(
            "foreach ", "")) for x in x)
    assert now < before and fused < foreach and cuda_now == now + fused
    assert cuda_before == before + foreach


def test_sizes_below_one_are_refused(capsys):
    with pytest.raises(SystemExit):
        load_benchmark("step_ops").main(["--clients", "0"])
    assert "at least 1" in capsys.readouterr().err
