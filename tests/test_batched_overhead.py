"""benchmarks/batched_overhead.py: the current batched training against a version of it
given as a file, side by side; against itself the weights agree exactly, and a version
that computes otherwise passes only within ``--max-gap``."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_benchmark

CURRENT = Path(__file__).resolve().parents[1] / "src" / "fedlabels" / "learners" / "batched.py"


@pytest.mark.parametrize("rows", ["shared", "fedct"])
def test_the_current_version_against_itself(capsys, rows):
    module = load_benchmark("batched_overhead")
    assert module.main(["--baseline", str(CURRENT), "--clients", "4", "--calls", "3",
                        "--rows", rows, "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "'max_weight_gap': 0.0" in out and "'clients': 4" in out
    assert f"'rows': '{rows}'" in out and "'steps': 3" in out


def test_a_version_that_rounds_otherwise_passes_within_max_gap(capsys):
    """The training step through autograd (``--baseline autograd``: what the MLP's step
    was before its gradients were written by hand) against the current one, on another
    network and width."""
    module = load_benchmark("batched_overhead")
    before = module.autograd_version()
    assert not before.GRADIENTS_BY_HAND and before.FUSED_ADAM_DEVICES == ()
    from fedlabels.learners import batched

    assert batched.GRADIENTS_BY_HAND and batched.FUSED_ADAM_DEVICES == ("cuda",)
    argv = ["--baseline", "autograd", "--clients", "3", "--calls", "2", "--steps", "12",
            "--model", "mlp(hidden=32-16)", "--features", "40"]
    status = module.main(argv)
    out = capsys.readouterr().out
    gap = float(out.split("'max_weight_gap': ")[1].rstrip("}\n"))
    assert gap < 1e-4 and "'device': 'cpu'" in out
    # bit for bit on some CPUs (an AVX-512 Xeon's kernels round both steps alike), not on
    # others: the exit status follows the gap either way
    assert status == (1 if gap > 0 else 0)
    assert module.main([*argv, "--max-gap", "1e-4"]) == 0


def test_a_gap_beyond_max_gap_fails_and_one_within_passes(capsys, monkeypatch):
    """The exit status against ``--max-gap`` where the versions do differ, whatever this
    CPU's kernels do with the autograd version: the comparison's figures are given."""
    module = load_benchmark("batched_overhead")
    figures = {"clients": 3, "device": "cpu", "max_weight_gap": 3e-6}
    monkeypatch.setattr(module, "compare", lambda *args, **kwargs: dict(figures))
    argv = ["--baseline", "autograd", "--clients", "3", "--calls", "2"]
    assert module.main(argv) == 1  # not bit for bit
    assert "--max-gap" in capsys.readouterr().err
    assert module.main([*argv, "--max-gap", "1e-5"]) == 0
    assert module.main([*argv, "--max-gap", "1e-6"]) == 1


@pytest.mark.parametrize(("argv", "message"), [
    (["--features", "0"], "--features must be at least 1"),
    (["--device", "gpu"], "device must be one of"),
    (["--baseline", "nothing-here.py"], "no such file (or 'autograd')"),
    (["--model", "bogus("], "bogus"), (["--model", "rf"], "one torch classifier"),
    (["--max-gap", "nan"], "--max-gap must be a number >= 0")])
def test_bad_arguments_are_refused(capsys, argv, message):
    module = load_benchmark("batched_overhead")
    with pytest.raises(SystemExit) as stop:
        module.main(["--baseline", str(CURRENT), *argv])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
