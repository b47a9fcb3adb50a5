"""The run specification: each run parameter declared once, and the CLI flags, TOML keys,
fl.run / load_federation keywords and the docs' table derived from it; the subcommands and
the global flags."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

import fedlabels as fl
from fedlabels.cli import build_parser, main
from fedlabels.cli.run_options import config_from_args, default_output
from fedlabels.core import renamed
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.renamed import RenamedKeywordWarning
from fedlabels.data.federation import FORMER_SIZES, make_federation
from fedlabels.data.loading import load_federation
from fedlabels.runs.config import RunConfig, load_config
from fedlabels.runs.spec import by_name, check_keys, declared, docs_table

ROOT = Path(__file__).resolve().parents[1]


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def test_every_run_parameter_is_declared_once_and_is_a_config_field():
    infos = declared(RunConfig)
    names = [info.name for info in infos]
    assert names == [f.name for f in dataclasses.fields(RunConfig)]
    assert len(names) == len(set(names))
    # a former name never shadows a current one, and belongs to one parameter
    former = [old for info in infos for old in info.renamed_from]
    assert len(former) == len(set(former)) and not set(former) & set(names)
    for info in infos:
        assert info.help and info.help[-1] != "."  # a phrase, completed by the generators
        assert info.default == RunConfig.__dataclass_fields__[info.name].default or (
            info.name == "options" and RunConfig().options == {})


def test_cli_flag_toml_key_and_python_keyword_agree_for_every_parameter():
    run = _flags(_subparser("run"))
    audit = _flags(_subparser("audit"))
    run_params = inspect.signature(fl.run).parameters
    for info in declared(RunConfig):
        assert info.flag[2:].replace("-", "_") == info.toml_key == info.keyword == info.name
        if info.cli:  # one flag, whose value lands under the parameter's own name
            assert run[info.flag].dest == info.name
            # audit takes a simulator-only flag only to refuse it by name
            assert (audit[info.flag].help == argparse.SUPPRESS) == info.simulator_only
        assert info.name in check_keys(RunConfig, {info.name: None}, "config key")  # a TOML key
        if info.python:
            assert info.name in check_keys(RunConfig, {info.name: None}, "run parameter",
                                           python=True)
            assert info.name in run_params or any(
                p.kind is p.VAR_KEYWORD for p in run_params.values())
        else:  # method and dataset are run()'s positional arguments; output is CLI/TOML
            assert info.name in ("method", "dataset", "output") and info.python_note
    assert list(run_params)[:2] == ["method", "federation"]
    # the run's flags are generated, not written beside the declarations a second time
    declared_flags = {f for info in declared(RunConfig) for f in info.flags}
    hand_written = {s for a in _subparser("run")._actions for s in a.option_strings
                    if a.dest in by_name(RunConfig) and s not in declared_flags}
    assert not hand_written


def test_load_federation_takes_exactly_the_parameters_that_build_a_federation():
    sig = inspect.signature(load_federation).parameters
    keywords = {n: p for n, p in sig.items() if p.kind is p.KEYWORD_ONLY}
    building = {info.name: info for info in declared(RunConfig) if info.federation}
    assert set(keywords) == set(building)
    for name, info in building.items():
        assert keywords[name].default == info.default, name
    # a misspelt keyword is refused with a suggestion (a former name's: the new name)
    with pytest.raises(FedLabelsError, match=r"no keyword 'n_client' \(did you mean "
                                             r"'clients'\?\)"):
        load_federation("breast_cancer", n_client=3)
    with pytest.raises(FedLabelsError, match=r"no keyword 'unlabelled' \(did you mean "
                                             r"'unlabeled'\?\); valid: dataset, clients"):
        load_federation("breast_cancer", unlabelled=3)


def test_the_federation_builders_keywords_are_the_run_parameters_names():
    building = {info.name for info in declared(RunConfig) if info.federation}
    former = {old: info.name for info in declared(RunConfig) if info.federation
              for old in info.renamed_from}
    assert former == FORMER_SIZES  # the data layer's aliases are the spec's former names
    sizes = {"clients", "unlabeled", "private", "test"}
    for builder in (make_federation, load_federation):
        names = set(inspect.signature(builder).parameters)
        assert sizes <= names & building, builder.__name__
        assert not names & set(former), builder.__name__
        assert not [n for n in names if n.startswith("n_")], builder.__name__


@pytest.fixture
def warned_afresh(monkeypatch):
    """The once-per-process memory of the renamed-keyword warnings, emptied."""
    monkeypatch.setattr(renamed, "_WARNED", set())


def _same_federation(a: fl.Federation, b: fl.Federation) -> None:
    assert [len(c) for c in a.clients] == [len(c) for c in b.clients]
    for x, y in [(a.X_public, b.X_public), (a.X_test, b.X_test), (a.y_test, b.y_test),
                 *[(c.X, d.X) for c, d in zip(a.clients, b.clients, strict=True)],
                 *[(c.y, d.y) for c, d in zip(a.clients, b.clients, strict=True)]]:
        np.testing.assert_array_equal(x, y)


def test_former_size_keywords_mean_the_new_ones_and_warn_once(warned_afresh):
    X, y = load_digits(return_X_y=True)
    new = dict(clients=4, unlabeled=300, private=500, test=200, partition="quantity:1",
               seed=3)
    old = dict(n_clients=4, n_unlabeled=300, n_private=500, n_test=200,
               partition="quantity:1", seed=3)
    with pytest.warns(RenamedKeywordWarning) as seen:
        before = make_federation(X, y, **old)
    assert sorted(str(w.message).split(" (")[0] for w in seen) == [
        f"make_federation(): n_{n}= is now {n}=" for n in ("clients", "private", "test",
                                                              "unlabeled")]
    assert all(w.filename == __file__ for w in seen)  # points at the caller
    after = make_federation(X, y, **new)
    assert len({len(c) for c in after.clients}) > 1  # unequal clients
    _same_federation(before, after)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _same_federation(make_federation(X, y, **old), after)  # warned once already
    with pytest.warns(RenamedKeywordWarning, match=r"load_federation\(\): n_clients= is now "
                                                   r"clients= .*--clients"):
        loaded = load_federation("breast_cancer", n_clients=3, seed=1)
    _same_federation(loaded, load_federation("breast_cancer", clients=3, seed=1))


@pytest.mark.parametrize("builder", ["make", "load"])
def test_a_size_given_under_both_names_is_refused(builder, warned_afresh):
    X, y = load_digits(return_X_y=True)
    call = (partial(make_federation, X, y) if builder == "make"
            else partial(load_federation, "breast_cancer"))
    with pytest.raises(FedLabelsError, match="give clients or its former name n_clients, "
                                             "not both"):
        call(clients=3, n_clients=3, unlabeled=50)
    with pytest.raises(FedLabelsError, match="give unlabeled or its former name "
                                             "n_unlabeled, not both"):
        call(clients=3, n_unlabeled=50, unlabeled=60)


def test_docs_table_is_the_generated_one():
    text = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert docs_table(RunConfig) in text, ("docs/usage.md's run-parameter table is stale; "
                                           "regenerate it: python -m fedlabels.runs.config")


# one configuration with unequal clients (Dirichlet) and partial participation
ARGV = ["--method", "fedct", "--dataset", "breast_cancer", "--clients", "4", "--model", "dt",
        "--rounds", "3", "--partition", "dirichlet:1,0.1", "--unlabeled", "120",
        "--private-per-client", "30", "--participation", "0.6", "--seed", "2",
        "--quorum", "0.6"]
TOML = """method = "fedct"
dataset = "breast_cancer"
clients = 4
model = "dt"
rounds = 3
partition = "dirichlet:1,0.1"
unlabeled = 120
private-per-client = 30
participation = 0.6
seed = 2

[options]
quorum = 0.6
"""
PY = {"clients": 4, "model": "dt", "rounds": 3, "partition": "dirichlet:1,0.1",
      "unlabeled": 120, "private_per_client": 30, "participation": 0.6, "seed": 2,
      "quorum": 0.6}


def test_cli_toml_and_fl_run_give_the_same_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from_cli = config_from_args(build_parser().parse_args(["run", *ARGV]), simulator=True)
    (tmp_path / "run.toml").write_text(TOML)
    from_toml = config_from_args(build_parser().parse_args(
        ["run", "--config", "run.toml"]), simulator=True)
    assert from_toml == from_cli == load_config(tmp_path / "run.toml")
    assert default_output(from_cli) == default_output(from_toml)

    assert main(["run", *ARGV, "--output", "cli.json", "--no-progress"]) == 0
    assert main(["run", "--config", "run.toml", "--output", "toml.json",
                 "--no-progress"]) == 0
    result = fl.run("fedct", "breast_cancer", progress=False, **PY)
    cli, toml = (json.loads(Path(f).read_text()) for f in ("cli.json", "toml.json"))
    python = json.loads(json.dumps(result.to_dict(), default=str))
    for data in (cli, toml, python):
        data["config"].pop("output")
    assert cli["config"] == toml["config"] == python["config"]
    # the same run: same participants per round, same accuracy
    rounds = [[r.get("participants") for r in d["rounds"]] for d in (cli, toml, python)]
    assert rounds[0] == rounds[1] == rounds[2] and len(set(map(str, rounds[0]))) > 1
    assert cli["final"]["client_accuracies"] == toml["final"]["client_accuracies"] == \
        python["final"]["client_accuracies"]
    sizes = python["federation"]["client_sizes"]
    assert len(set(sizes)) > 1  # the Dirichlet split gave clients unequal sizes


def test_a_renamed_parameter_keeps_the_file_name_and_is_read_under_its_former_name():
    old = RunConfig.from_mapping({"method": "fedct", "malicious": 1, "attack": "random"})
    new = RunConfig(method="fedct", malicious=1, poison="random")
    assert old == new and "attack" not in new.to_dict()
    # the hash is over the first name: a configuration written before keeps its file name
    assert default_output(new).name.endswith("_seed0_" + _digest_as_before(new) + ".json")


def test_a_parameter_added_later_leaves_the_hash_alone_at_its_default():
    from fedlabels.runs.spec import hashed_settings, param

    @dataclasses.dataclass
    class Config:
        rounds: int = param(20, "rounds", kind=int)
        device: str = param("cpu", "where", kind=str, hashed_at_default=False)
        poison: str | None = param(None, "what", kind=str, hashed_as="attack")

    assert hashed_settings(Config, {"rounds": 3, "device": "cpu", "poison": "flip"}) == \
        {"rounds": 3, "attack": "flip"}
    assert hashed_settings(Config, {"rounds": 3, "device": "cuda", "poison": None}) == \
        {"rounds": 3, "device": "cuda", "attack": None}


@pytest.mark.parametrize("changes", [{}, {"options": {"quorum": 0.8}, "rounds": 3},
                                     {"malicious": 1, "poison": "random"}])
def test_file_names_are_those_of_the_configuration_before_the_run_spec(changes):
    cfg = RunConfig(**changes)
    assert default_output(cfg).stem.endswith("_" + _digest_as_before(cfg))


def _digest_as_before(cfg: RunConfig) -> str:
    """The former formula: every key but output (poisoning under its former name
    ``attack``; the parameters added later left out at their defaults)."""
    import hashlib

    later = {"device": "cpu", "precision": "fp32", "batch_clients": "auto", "offload": "auto",
             "cuda_graphs": "off",
             "image_size": None, "image_column": None, "workers": None, "public": None,
             "engine": "simulator", "missing": None, "classes": None,
             "image_mode": None, "image_peak": None}
    settings = {("attack" if k == "poison" else k): v for k, v in cfg.to_dict().items()
                if k != "output" and not (k in later and v == later[k])}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str)
                          .encode()).hexdigest()[:6]


@pytest.mark.parametrize("data, message", [
    ({"rounnds": 3}, r"unknown config key 'rounnds' \(did you mean 'rounds'\?\); valid: "),
    ({"n_client": 3}, r"did you mean 'clients'\?"),
    ({"quorum": 0.5}, r"'quorum' is a method option: put it in the \[options\] table"),
    ({"rounds": 0}, r"rounds must be an integer in \[1, 1000000\], got 0\."),
    ({"unlabeled_shift": 2}, r"unlabeled_shift must be a number in \[0, 1\]"),
    ({"task": "ranking"}, r"task must be one of classification, regression, got 'ranking'"),
    ({"insecure_reproducible_noise": "yes"}, r"must be true or false"),
    ({"features": ["a", 1]}, "features must be a name or a list of names"),
])
def test_unknown_or_bad_keys_are_one_line_errors(data, message):
    with pytest.raises(FedLabelsError, match=message) as err:
        RunConfig.from_mapping(data)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("params, message", [
    ({"n_clientz": 3}, r"unknown run parameter 'n_clientz' \(did you mean 'n_clients'|"
                       r"unknown run parameter 'n_clientz' \(did you mean 'clients'"),
    ({"quorom": 0.5}, r"Did you mean the method option 'quorum' \(in options=\{'quorum'"),
    ({"epsilon": 1.0}, r"'epsilon' is a method option: put it in options=\{'epsilon'"),
    ({"output": "x.json"}, r"'output' is not a keyword of run\(\): save the result with "
                           r"result.save\(PATH\)"),
    ({"dataset": "digits"}, r"'dataset' is not a keyword of run\(\): pass the dataset as "
                            r"run\(\)'s second argument"),
    ({"clients": 0}, r"clients must be an integer >= 1, got 0"),
])
def test_fl_run_refuses_what_the_cli_refuses_before_loading_data(params, message, no_data):
    with pytest.raises(FedLabelsError, match=message):
        fl.run("fedct", "breast_cancer", **params)


def test_fl_run_sets_the_number_of_clients_and_refuses_it_for_a_built_federation():
    result = fl.run("fedct", "wine", clients=3, rounds=1, model="dt", progress=False)
    assert result.config["clients"] == 3 and len(result.final["client_accuracies"]) == 3
    fed = load_federation("wine", clients=3)
    with pytest.raises(FedLabelsError,
                       match="clients, partition apply when the federation is built"):
        fl.run("fedct", fed, clients=4, partition="iid")


@pytest.mark.parametrize("argv, message", [
    (["run", "--resume", "x.json"], "fedlabels resume RESULT.json"),
    (["run", "--audit"], "fedlabels audit"),
    (["run", "--attack", "flip"], "--poison"),
    (["audit", "--attacks", "loss"], "--mia-attacks"),
    (["audit", "--poison", "flip"], "--poison: a simulator setting that only `fedlabels run` "
                                    "takes"),
    (["-q", "run", "-v"], "-q/--quiet and -v/--verbose contradict"),
    (["run", "--clinets", "3"], "unrecognized arguments: --clinets 3 (did you mean '--clients'?)"
                                " (see `fedlabels run -h`)"),
    (["resume", "r.json", "--seed", "3"], "--metric only: the checkpoint holds the run's "
                                          "configuration"),
])
def test_former_modes_and_flags_name_their_replacement(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_audit_and_deploy_refuse_simulator_settings_from_a_config_file(tmp_path):
    (tmp_path / "run.toml").write_text('poison = "flip"\nmalicious = 1\n')
    for argv in (["audit"], ["deploy", "local"], ["deploy", "prepare", "--out-dir", "sites"]):
        args = build_parser().parse_args([*argv, "--config", str(tmp_path / "run.toml")])
        with pytest.raises(FedLabelsError, match=r"malicious, poison: simulator settings "
                                                 r"that only `fedlabels run` takes"):
            config_from_args(args)


@pytest.mark.parametrize("flag", [["--participation", "0.5"], ["--dropout", "0.2"],
                                  ["--malicious", "1"], ["--workers", "2"]])
@pytest.mark.parametrize("command", [["audit"], ["deploy", "local"]])
def test_audit_and_deploy_refuse_simulator_flags_by_name(command, flag, capsys):
    """Not "did you mean '--partition'?" for --participation: it is run's, and said so."""
    with pytest.raises(SystemExit) as exc:
        main([*command, "--method", "fedct", *flag])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{flag[0]}: a simulator setting that only `fedlabels run` takes" in err
    assert "did you mean" not in err


def test_resume_subcommand_extends_a_run_to_the_longer_runs_result(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = ["--dataset", "wine", "--clients", "3", "--model", "dt", "--partition",
            "dirichlet:1,0.1", "--participation", "2", "--no-progress"]
    assert main(["run", *base, "--rounds", "2", "--output", "r.json"]) == 0
    assert main(["resume", "r.json", "--rounds", "4", "--no-progress"]) == 0
    assert main(["run", *base, "--rounds", "4", "--output", "full.json"]) == 0
    resumed, full = (json.loads(Path(f).read_text()) for f in ("r.json", "full.json"))
    assert resumed["provenance"]["resumed"][0]["from_round"] == 2
    assert resumed["final"]["client_accuracies"] == full["final"]["client_accuracies"]
    assert len(resumed["rounds"]) == 4


def test_global_flags_after_the_subcommand(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--dataset", "wine", "--clients", "3", "--model", "dt", "--rounds", "1",
            "--no-progress"]
    assert main(["run", *argv, "--output", "a.json", "-q"]) == 0
    quiet = capsys.readouterr().out
    assert main(["run", *argv, "--output", "b.json"]) == 0
    loud = capsys.readouterr().out
    assert "result:" in loud and "result:" not in quiet  # -q after `run` took effect
    assert main(["run", *argv, "--output", "c.json", "--threads", "0"]) == 2
    assert "--threads must lie in [1, 4096]" in capsys.readouterr().err
    # every subcommand, nested ones included, takes them; after the subcommand wins
    for sub in (["methods"], ["deploy", "local"], ["datasets"],
                ["report", "r.json", "-o", "out"]):
        args = build_parser().parse_args(["--threads", "2", *sub, "-v", "--threads", "3"])
        assert args.verbose and not args.quiet and args.threads == 3
        args = build_parser().parse_args(["-q", *sub])
        assert args.quiet and args.threads is None


def test_help_of_run_lists_each_parameter_with_its_default():
    text = _subparser("run").format_help()
    for info in declared(RunConfig):
        if info.cli:
            assert info.flag in text
    assert re.search(r"--rounds N\s+communication rounds R \(default: 20\)", text)
    # a user with an image folder finds its spec where they look first (it was left out)
    for command in ("run", "audit"):
        help_text = " ".join(_subparser(command).format_help().split())
        assert "csv:PATH:TARGET or imagefolder:PATH" in help_text


def test_run_takes_o_for_its_output_as_plot_report_and_predict_do():
    args = build_parser().parse_args(["run", "-o", "x.json"])
    assert args.output == "x.json"
    assert build_parser().parse_args(["audit", "-o", "a.json"]).output == "a.json"


@pytest.mark.parametrize("key,flag", [("metric", "--metric"), ("threads", "--threads"),
                                      ("no_progress", "--no-progress")])
def test_a_command_flag_in_a_toml_file_is_named_as_one(tmp_path, key, flag):
    """`metric = "auroc"` in a TOML file was answered "Did you mean the method option
    'trim'", and `threads = 2` "'threshold'"."""
    path = tmp_path / "run.toml"
    path.write_text(f'method = "fedct"\n{key} = 1\n')
    with pytest.raises(FedLabelsError, match=rf"{flag} is a flag of the command, not a run "
                                             r"parameter: give it on the command line"):
        load_config(path)


def test_abbreviated_flags_are_refused(capsys):
    """argparse took `--rou 3` for --rounds and `--text` for --text-column."""
    from fedlabels.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "--rou", "3"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --rou 3 (did you mean '--rounds'?)" in capsys.readouterr().err


@pytest.mark.parametrize("toml, flags, names", [
    ('rounds = "ten"\n', ["--rounds", "1"], "rounds must be an integer in [1, 1000000], got 'ten'"),
    ('[run]\nclients = 2.5\n', ["--clients", "3"], "clients must be an integer >= 1, got 2.5"),
    ('device = "gpu7"\n', ["--device", "cpu"], "device must be one of auto, cpu"),
    ('batch_clients = 3\n', ["--batch-clients", "off"], "batch_clients must be"),
    ('model = "mlp(hidden=abc)"\n', ["--model", "dt"], "hidden must be layer widths"),
    ('method = "fedctt"\n', ["--method", "fedct"], "unknown method 'fedctt'"),
    ('[options]\nquorum = "high"\n', ["--quorum", "0.5"],
     "fedct option quorum must be a number or none, got 'high'"),
    ('options = 3\n', ["--opt", "quorum=0.5"], "options must be a table"),  # a traceback
])
def test_a_wrong_value_in_a_config_file_is_refused_even_where_a_flag_overrides_it(
        toml, flags, names, tmp_path, capsys, monkeypatch, no_data):
    """`rounds = "ten"` in the file and `--rounds 3` on the command line ran 3 rounds
    without a word about the file: a wrong value the user wrote is an error, one line that
    names the file and the key, before any data is loaded."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "x.toml"
    path.write_text(toml)
    assert main(["run", "--config", str(path), "--dataset", "wine", "--clients", "3",
                 "--rounds", "1", "--model", "dt", *flags, "--no-progress",
                 "-o", "out.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith(f"fedlabels: error: config file {path}: ")
    assert names in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.toml"]  # nothing written


def test_load_config_checks_the_files_values_under_its_overrides(tmp_path):
    """fl.load_config as the CLI: the override is used, a valid file value it replaces is
    fine, a wrong one an error naming the file."""
    path = tmp_path / "run.toml"
    path.write_text('rounds = 5\nmodel = "dt"\n[options]\nquorum = 0.5\n')
    cfg = load_config(path, rounds=2, options={"quorum": 0.6})
    assert (cfg.rounds, cfg.options) == (2, {"quorum": 0.6})
    cfg = load_config(path, options=None)  # None keeps the file's value, as for other keys
    assert (cfg.rounds, cfg.options) == (5, {"quorum": 0.5})
    path.write_text('rounds = -1\n')
    with pytest.raises(FedLabelsError, match=rf"config file {re.escape(str(path))}: rounds "
                                             r"must be an integer in \[1, 1000000\], got -1\."):
        load_config(path, rounds=2)


@pytest.mark.parametrize(("given", "said"), [
    ({"participation": "0.6"}, "participation must be a number, got '0.6'."),
    ({"features": 3}, "features must be a name or a list of names, got 3."),
])
def test_a_wrong_type_is_said_in_words_not_as_a_type_union(given, said):
    """'participation must be a float | int' read as code, not as what to give."""
    import fedlabels as fl

    with pytest.raises(FedLabelsError) as caught:
        fl.run("fedct", "wine", **given)
    assert str(caught.value) == said
