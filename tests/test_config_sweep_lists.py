"""A config file is one run: a list where a run takes one value (``seed = [0, 1, 2]``, an
option's ``epsilon = [1, 4]``) is refused with the sweep to run instead."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.config import load_config


@pytest.mark.parametrize("toml, loop", [
    ("seed = [0, 1, 2]\n", "for v in 0 1 2; do fedlabels run --config {} --seed $v; done"),
    ('[run]\npartition = ["iid", "dirichlet:0.5"]\n',
     "for v in iid dirichlet:0.5; do fedlabels run --config {} --partition $v; done"),
    ('method = "dp-fedct"\n[options]\nepsilon = [1, 4]\n',
     "for v in 1 4; do fedlabels run --config {} --opt epsilon=$v; done"),
])
def test_a_list_for_one_value_names_the_sweep_to_run(toml, loop, tmp_path, capsys,
                                                      monkeypatch, no_data):
    """'seed must be an integer >= 0, got [0, 1, 2]' said nothing of how to sweep."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "sweep.toml"
    path.write_text(toml)
    assert main(["run", "--config", str(path), "--no-progress", "-o", "out.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fedlabels: error: config file {path}: ")
    suggested = loop.format(shlex.quote(str(path)))
    assert suggested in err[0] and "fedlabels report" in err[0]
    syntax = subprocess.run(["bash", "-n", "-c", suggested], capture_output=True)
    assert syntax.returncode == 0, syntax.stderr  # a loop a shell runs as written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.toml"]  # nothing written


def test_a_key_that_takes_a_list_still_takes_one(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('features = ["a", "b"]\n')
    assert load_config(path).features == ["a", "b"]
    path.write_text("seed = [0, 1]\n")
    with pytest.raises(FedLabelsError, match="seed takes one value"):
        load_config(path)
