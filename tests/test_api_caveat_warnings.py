"""Every Python entry point that returns a run warns its caveats as ``fl.run`` does, and the
CLI, which prints them under its table, does not repeat them as Python warnings."""

from __future__ import annotations

import warnings

import pytest

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.runs.config import RunConfig

EXTENDED = "extended from 1 to 2 rounds"


def _one_round(tmp_path) -> tuple[RunConfig, object]:
    cfg = RunConfig.from_mapping({"method": "fedct", "dataset": "breast_cancer",
                                  "model": "dt", "clients": 3, "rounds": 1, "seed": 0})
    ckpt = tmp_path / "run.checkpoint.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.RunCaveatWarning)  # a plain run: nothing to say
        fl.run_config(cfg, progress=False, checkpoint=ckpt)
    return cfg, ckpt


def test_resume_warns_that_the_run_was_extended(tmp_path):
    _, ckpt = _one_round(tmp_path)
    with pytest.warns(fl.RunCaveatWarning, match=EXTENDED) as caught:
        fl.resume(ckpt, rounds=2, progress=False)
    assert [str(w.message) for w in caught].count(str(caught[0].message)) == 1  # once


def test_run_config_warns_its_caveats(tmp_path):
    cfg, ckpt = _one_round(tmp_path)
    with pytest.warns(fl.RunCaveatWarning, match=EXTENDED):
        fl.run_config(cfg.replace(rounds=2), progress=False, checkpoint=ckpt, resume=ckpt)


def test_the_cli_prints_a_caveat_once_and_warns_nothing(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--model", "dt",
                 "--clients", "3", "--rounds", "1", "--no-progress", "-o", str(out)]) == 0
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["resume", str(out), "--rounds", "2", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count(EXTENDED) == 1, err
    assert not [w for w in caught if issubclass(w.category, fl.RunCaveatWarning)]
