import json
import subprocess
import sys
from pathlib import Path

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
    assert (tmp_path / "r.rounds.csv").exists() and not (tmp_path / "r.csv").exists()
    assert "fedct" in capsys.readouterr().out


def test_toml_config_with_cli_override(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "fedct"\ndataset = "wine"\nclients = 3\nmodel = "dt"\n'
                   'rounds = 4\nseed = 3\n\n[options]\nquorum = 0.9\n')
    out = tmp_path / "r.json"
    assert main(["run", "--config", str(cfg), "--rounds", "2", "--output", str(out),
                 "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["rounds"] == 2 and data["config"]["options"]["quorum"] == 0.9
    assert data["dataset"] == "wine" and data["seed"] == 3 and len(data["rounds"]) == 2


@pytest.mark.parametrize("args,message", [
    (["--method", "fedsgd"], "unknown method 'fedsgd'"),
    (["--model", "nonsense"], "unknown model 'nonsense'"),
    (["--dataset", "mnist_hd"], "unknown dataset 'mnist_hd'"),
    (["--clients", "0"], "clients must be an integer >= 1"),
    (["--clients", "2"], "at least 3 clients"),
    (["--quorum", "1.2"], "quorum must lie in"),
    (["--unlabeled", "100000"], "set --unlabeled between"),
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
    cfg.write_text("clients = 5\nquorum = 0.9\n")  # a method option belongs in [options]
    assert main(["run", "--config", str(cfg)]) == 2
    assert "'quorum' is a method option: put it in the [options] table" in \
        capsys.readouterr().err


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
    assert "none.deb does not exist" in capsys.readouterr().err
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


@pytest.mark.parametrize("method, options", [
    ("fedct", {}),
    # DP-FedCT's server asked whether DP-SGD could train the learners (for a refusal's
    # wording), importing torch (5 s) for trees
    ("dp-fedct", {"mechanism": "kary", "epsilon_per_round": 4}),
])
def test_a_run_of_trees_does_not_load_torch(method, options):
    code = (f"import sys, fedlabels as fl; fl.run({method!r}, 'wine', clients=3, model='dt', "
            f"rounds=1, progress=False, options={options!r}); print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# --- method options: generated flags, --opt, and errors before any data is loaded ---------

def _exit_code(argv):
    """``main``'s exit status, also for argparse usage errors (which raise SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def _one_line_error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedlabels: error: "), err
    return lines[0]


@pytest.mark.parametrize("args, names", [
    (["--method", "fedct", "--epsilon", "1"], "--epsilon"),
    (["--opt", "qorum=0.5"], "did you mean 'quorum'"),
    (["--method", "pate", "--opt", "querries=10"], "querries"),
    (["--clip", "1", "--method", "fedct"], "--clip"),
    (["--opt", "quorum"], "use KEY=VALUE"),
])
def test_option_errors_exit_2_in_one_line(no_data, capsys, args, names):
    assert _exit_code(["run", "--no-progress", *args]) == 2
    assert names in _one_line_error(capsys)


def _flags():
    from fedlabels.cli.method_flags import method_flags

    return method_flags()


@pytest.mark.parametrize("name", sorted(_flags()))
def test_a_flag_of_another_method_is_rejected_by_name(no_data, capsys, name):
    from fedlabels.methods import METHODS

    users = [method for method, _ in _flags()[name].users]
    other = next(m for m in sorted(METHODS) if m not in users)
    flag = "--" + name.replace("_", "-")
    info = _flags()[name].users[0][1]
    value = "none" if info.default is None else str(info.default).lower()
    assert _exit_code(["run", "--method", other, flag, value]) == 2
    line = _one_line_error(capsys)
    assert f"{flag} does not apply to method {other!r}" in line
    assert all(u in line for u in users)


def test_generated_flags_match_the_declarations():
    import argparse

    from fedlabels.cli.method_flags import method_options
    from fedlabels.cli.run_options import add_run_options
    from fedlabels.methods import METHODS

    parser = argparse.ArgumentParser()
    add_run_options(parser)
    declared = {info.name for m in METHODS.values() for info in m.options_class.declared()
                if info.flag}
    assert set(_flags()) == declared
    for name in declared:
        flag = "--" + name.replace("_", "-")
        assert flag in parser._option_string_actions  # one argument per option name
        info = _flags()[name].users[0][1]
        text = "none" if info.default is None else str(info.default).lower()
        _, flagged = method_options(parser.parse_args([flag, text]))
        assert flagged == {name: info.default}


def test_a_generated_flag_reaches_the_method(tmp_path):
    out = tmp_path / "r.json"
    assert main([*BASE, "--method", "fedct", "--model", "dt", "--quorum", "0.9",
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["options"]["quorum"] == 0.9


def test_methods_lists_every_method_and_option(capsys):
    from fedlabels.methods import METHODS

    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name, method in METHODS.items():
        assert f"\n{name} " in f"\n{out}"
        for info in method.options_class.declared():
            assert f"    {info.name}" in out
    assert main(["methods", "fedct"]) == 0
    one = capsys.readouterr().out
    assert one.startswith("fedct ") and "quorum (--quorum)" in one and "fedavg" not in one
    assert main(["methods", "fedsgd"]) == 2
    assert "unknown method 'fedsgd'" in capsys.readouterr().err


def test_run_help_mentions_every_method(capsys):
    from fedlabels.methods import METHODS

    assert _exit_code(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in METHODS)
    assert "fedlabels methods NAME" in out


def test_methods_listing_shows_default_model_and_threat_model(capsys):
    assert main(["methods", "fedavg", "fedct"]) == 0
    out = capsys.readouterr().out
    assert "default model: mlp\n    threat model: parameters, guarantee none\n" in out
    assert "default model: decision_tree\n    threat model: hard-labels-on-queries" in out
    assert "capabilities: requires_weights, uses_public=False, supports_regression, " \
           "canary_view=final-model" in out  # fedavg's declared Capabilities
    # a formal guarantee says against whom, and where it stops
    assert main(["methods", "fredy", "xclp"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "guarantee formal against anyone who sees the released labels" in out
    assert "not the server, which receives the weights and the votes in the clear" in out
    assert "default model: none (it trains no model)" in out


def test_methods_listing_names_the_relation_and_what_a_conditional_guarantee_needs(capsys):
    """`fedlabels methods dp-fedct` said `guarantee conditional` and nothing on what it is
    conditional on (that the default --sensitivity worst makes it formal) nor what one
    protected individual is; dp-fedavg's listing did not say its unit was a whole client."""
    from fedlabels.methods import get_method

    assert main(["methods", "dp-fedct", "dp-fedavg"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for name in ("dp-fedct", "dp-fedavg"):
        declared = get_method(name).threat_model.privacy()
        assert f"neighbouring: {declared['neighbouring']}" in out
    conditional = get_method("dp-fedct").threat_model.privacy()["conditional_on"]
    assert "proven for sensitivity worst" in conditional  # the oracle says when it is formal
    assert f"conditional on: {conditional}" in out


def test_ctrl_c_while_the_cli_starts_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C in the first second (the subcommands' modules being imported) was a
    traceback ending in KeyboardInterrupt; it is one line and exit status 130, as later."""
    import fedlabels.cli as cli

    def interrupted(**kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["datasets"]) == 130
    assert capsys.readouterr().err == "fedlabels: interrupted\n"


def test_suggested_commands_name_a_path_with_spaces_as_one_argument(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The commands a message tells you to run are pasted into a shell: a path with spaces
    (or quotes) was written bare, so `fedlabels resume my runs/r.json` resumed `my`."""
    import re
    import shlex

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.core.private_files import check_private

    out = tmp_path / "my runs" / "r é's.json"
    assert main(["run", "--method", "fedct", "--dataset", "breast_cancer", "--clients", "3",
                 "--rounds", "1", "--model", "dt", "--no-progress", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    command = re.search(r"`(fedlabels resume .*?)` can extend", said)
    assert command and shlex.split(command.group(1)) == [
        "fedlabels", "resume", str(out), "--rounds", "N"]
    out.chmod(0o644)
    with pytest.raises(FedLabelsError) as info:
        check_private(out, "the file")
    chmod = re.search(r"`(chmod 600 .*)`", str(info.value))
    assert chmod and shlex.split(chmod.group(1)) == ["chmod", "600", str(out)]


@pytest.mark.parametrize("flags", [[], ["--no-checkpoint"]])
def test_a_refused_run_leaves_no_empty_output_directories(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    """A run refused once its options meet the data (DP-FedCT's default mechanism would be
    noise at this ε) left the new directories of its --output behind, empty."""
    out = tmp_path / "new" / "sub" / "a.json"
    assert main(["run", "--method", "dp-fedct", "--epsilon", "8", "--dataset",
                 "breast_cancer", "--clients", "3", "--rounds", "6", "--no-progress",
                 "-o", str(out), *flags]) == 2
    assert "would flip each label bit" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
