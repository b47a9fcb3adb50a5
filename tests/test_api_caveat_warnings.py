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


def test_a_delta_not_below_one_over_n_is_a_caveat():
    """δ ≥ 1/n allows publishing one of the n units in the clear: said, for the units the
    neighbouring relation counts (records of the smallest client; clients)."""
    from fedlabels.results.caveats import delta_warning

    fed = {"client_sizes": [40, 29, 35], "n_clients": 3}
    record = {"guarantee": "formal", "neighbouring": "record-level: one record", "delta": 0.04}
    assert "1/n = 1/29 (29 records of the smallest client)" in delta_warning(record, fed)
    assert delta_warning({**record, "delta": 0.03}, fed) is None  # 0.03 · 29 < 1
    client = {**record, "neighbouring": "client-level under replacement", "delta": 0.34}
    assert "1/n = 1/3 (3 clients)" in delta_warning(client, fed)
    assert delta_warning({**client, "delta": 0.3}, fed) is None
    assert delta_warning({**client, "guarantee": "none"}, fed) is None
    with pytest.warns(fl.RunCaveatWarning, match=r"δ = 0.5 is not below 1/n = 1/3 \(3 clients"):
        fl.run("dp-fedct", "breast_cancer", clients=3, rounds=1, progress=False,
               options={"epsilon": 8, "delta": 0.5, "mechanism": "xor"})


def test_run_config_writes_the_output_it_names(tmp_path):
    """A RunConfig's ``output`` is written by ``fl.run_config`` as ``fedlabels run`` writes
    it (it was ignored); an existing file is refused before the run, replaced only with
    ``overwrite=True``; ``save=False`` writes nothing."""
    import numpy as np

    from fedlabels.core.errors import FedLabelsError

    out = tmp_path / "r.json"
    cfg = RunConfig.from_mapping({"method": "fedct", "dataset": "breast_cancer", "model": "dt",
                                  "clients": 3, "rounds": 1, "seed": 0, "output": str(out)})
    result = fl.run_config(cfg, progress=False)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["r.json", "r.models.npz", "r.rounds.csv"]
    loaded = fl.load_run(out)
    x = fl.load_federation("breast_cancer", clients=3).X_test[:20]
    assert np.array_equal(loaded.predict(x), result.predict(x))
    before = out.stat().st_mtime_ns
    with pytest.raises(FedLabelsError, match=r"r\.json exists; pass overwrite=True"):
        fl.run_config(cfg, progress=False)
    assert out.stat().st_mtime_ns == before
    fl.run_config(cfg.replace(rounds=2), progress=False, overwrite=True)
    assert fl.load_run(out, models=False).config["rounds"] == 2
    unsaved = tmp_path / "unsaved.json"
    fl.run_config(cfg.replace(output=str(unsaved)), progress=False, save=False)
    assert not unsaved.exists()
    with pytest.raises(FedLabelsError, match=r"ending in \.json"):
        fl.run_config(cfg.replace(output=str(tmp_path / "r.csv")), progress=False)
