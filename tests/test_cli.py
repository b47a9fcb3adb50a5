import json
import subprocess
import sys

import pytest

from fedlabels.cli import main

BASE = ["run", "--dataset", "breast_cancer", "--clients", "5", "--rounds", "2", "--no-progress"]


def test_run_writes_the_documented_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main([*BASE, "--method", "fedct", "--model", "dt", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in ("method", "dataset", "config", "seed", "wall_seconds", "rounds"):
        assert key in data
    assert len(data["final"]["client_accuracies"]) == 5
    assert 0.5 < data["final"]["mean_accuracy"] <= 1
    comm = data["communication"]
    assert len(comm["bytes_up_per_round"]) == 5 and len(comm["bytes_up_per_round"][0]) == 2
    assert comm["bytes_up_total"] == sum(map(sum, comm["bytes_up_per_round"]))
    assert comm["bytes_down_total"] > 0
    assert (tmp_path / "r.csv").exists()
    assert "fedct" in capsys.readouterr().out


def test_toml_config_with_cli_override(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "fedct"\ndataset = "wine"\nclients = 3\nmodel = "dt"\n'
                   'rounds = 4\nquorum = 0.9\nseed = 3\n')
    out = tmp_path / "r.json"
    assert main(["run", "--config", str(cfg), "--rounds", "2", "--output", str(out),
                 "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["rounds"] == 2 and data["config"]["quorum"] == 0.9
    assert data["dataset"] == "wine" and data["seed"] == 3 and len(data["rounds"]) == 2


@pytest.mark.parametrize("args,message", [
    (["--method", "fedsgd"], "unknown method 'fedsgd'"),
    (["--model", "nonsense"], "unknown model 'nonsense'"),
    (["--dataset", "mnist_hd"], "unknown dataset 'mnist_hd'"),
    (["--clients", "0"], "at least 1"),
    (["--clients", "2"], "at least 3 clients"),
    (["--quorum", "1.2"], "quorum must lie in"),
    (["--unlabeled", "100000"], "n_unlabeled"),
    (["--partition", "shards:x"], "invalid partition"),
    (["--dataset", "fashion_mnist"], "fedlabels fetch fashion_mnist"),
])
def test_bad_input_gives_a_message_not_a_traceback(tmp_path, capsys, args, message):
    code = main([*BASE, "--output", str(tmp_path / "x.json"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err


def test_bad_config_key(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("clients = 5\nrounnds = 3\n")
    assert main(["run", "--config", str(cfg)]) == 2
    assert "unknown config key 'rounnds'" in capsys.readouterr().err


def test_datasets_and_models_listings(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "breast_cancer" in out and "NOT FETCHED" in out  # the test cache is empty
    assert main(["models"]) == 0
    assert "decision_tree (dt, tree)" in capsys.readouterr().out
    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    assert all(m in listed for m in ("fedct", "fedavg", "local", "centralized"))


def test_fetch_errors_are_clear(tmp_path, capsys):
    assert main(["fetch", "fashion_mnist", "--from-deb", str(tmp_path / "none.deb")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["fetch", "breast_cancer"]) == 0
    assert "nothing to fetch" in capsys.readouterr().out


def test_plot_from_results(tmp_path):
    out = tmp_path / "r.json"
    main([*BASE, "--model", "dt", "--output", str(out)])
    png = tmp_path / "p.png"
    assert main(["plot", str(out), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_console_entry_point_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fedlabels", "run", "--rounds", "1",
                           "--method", "local", "--output", str(tmp_path / "o.json"),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "fedlabels", "run", "--method", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown method" in proc.stderr


def test_importing_the_package_does_not_load_torch():
    code = "import sys, fedlabels, fedlabels.cli; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"  # torch loads only when a torch model is used
