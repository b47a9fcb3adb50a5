"""One name per thing: model aliases resolve to one canonical spec (file names, config
hashes, report rows), `fedlabels methods` advertises only flags that exist, and every name a
user types gets a "did you mean" suggestion."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from fedlabels.cli import build_parser, main
from fedlabels.core.errors import FedLabelsError
from fedlabels.methods import METHODS
from fedlabels.runs.config import RunConfig, load_config


def _run_flags() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {s for a in sub.choices["run"]._actions for s in a.option_strings}


def test_methods_advertise_only_flags_that_exist(capsys):
    flags = _run_flags()
    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    texts = [listed] + [m.description for m in METHODS.values()] + [
        info.help for m in METHODS.values() for info in m.options_class.declared()]
    advertised = {f for t in texts for f in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", t)}
    assert "--mechanism" in advertised
    assert advertised - flags == set()


def test_the_mechanism_flag_sets_the_option(tmp_path):
    out = tmp_path / "r.json"
    assert main(["run", "--method", "dp-fedct", "--mechanism", "kary", "--epsilon", "8",
                 "--rounds", "1", "--no-progress", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["config"]["options"]["mechanism"] == "kary"
    assert data["privacy"]["mechanism"] == "k-ary randomized response"


def test_flag_choices_are_shown_as_typed(capsys):
    """--help and the invalid-choice error list ``none``, not Python's ``None``; both
    spellings still select the default mechanism."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = capsys.readouterr().out
    assert "subsample-aggregate,none}" in help_text and "None}" not in help_text
    with pytest.raises(SystemExit) as exc:
        main(["run", "--method", "dp-fedct", "--mechanism", "bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'none'" in err and "None" not in err
    flags = build_parser().parse_args(["run", "--mechanism", "none"])
    assert vars(flags)["method_option:mechanism"] is None


@pytest.mark.parametrize("alias, canonical", [
    ("dt", "decision_tree"), ("tree", "decision_tree"), ("rf(n_estimators=5)",
                                                         "random_forest(n_estimators=5)"),
    ("lr", "logreg"), ("dt,rf,DT", "decision_tree,random_forest,decision_tree"),
    ("torch_mlp(hidden=8)", "mlp(hidden=8)"),
])
def test_model_aliases_resolve_to_one_spec(alias, canonical):
    assert RunConfig(model=alias).model == canonical
    assert RunConfig(model=alias) == RunConfig(model=canonical)


def test_aliases_give_one_file_name_and_hash(tmp_path, monkeypatch, capsys):
    from fedlabels.cli.run_options import default_output

    monkeypatch.chdir(tmp_path)
    short, long = (default_output(RunConfig(model=m)) for m in ("dt", "decision_tree"))
    assert short == long and "decision_tree" in short.name
    for model in ("dt", "decision_tree"):
        assert main(["run", "--model", model, "--rounds", "1", "--no-progress"]) in (0, 2)
    written = sorted(tmp_path.glob("results/*.json"))
    assert len(written) == 1  # the second run is refused: the same configuration
    assert "exists" in capsys.readouterr().err
    data = json.loads(written[0].read_text())
    assert data["config"]["model"] == "decision_tree"


def test_toml_model_alias_is_canonical(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('model = "rf"\n')
    assert load_config(cfg).model == "random_forest"


@pytest.mark.parametrize("argv, suggestion", [
    (["run", "--method", "dsfl"], "did you mean 'ds-fl'?"),
    (["run", "--method", "FedCT"], "did you mean 'fedct'?"),
    (["run", "--method", "dp_fedct"], "did you mean 'dp-fedct'?"),
    (["run", "--dataset", "breast-cancer"], "did you mean 'breast_cancer'?"),
    (["run", "--dataset", "digit"], "did you mean 'digits'?"),
    (["run", "--model", "decison_tree"], "did you mean 'decision_tree'?"),
    (["run", "--model", "xgbost"], "did you mean 'xgboost'?"),
    (["run", "--opt", "quorom=0.5"], "did you mean 'quorum'?"),
    (["run", "--opt", "robust=reputaton"], "did you mean 'reputation'?"),
    (["run", "--partition", "dirichelt:0.5"], "did you mean 'dirichlet'?"),
    (["run", "--malicious", "1", "--poison", "flp"], "did you mean 'flip'?"),
    (["methods", "dsfl"], "did you mean 'ds-fl'?"),
])
def test_names_get_a_suggestion(argv, suggestion, capsys):
    run = ["--rounds", "1", "--no-progress"] if argv[0] == "run" else []
    assert main([*argv, *run]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert suggestion in err


def test_toml_keys_get_a_suggestion(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "fedct"\nrouns = 3\n')
    with pytest.raises(FedLabelsError, match="did you mean 'rounds'"):
        load_config(cfg)


def test_no_suggestion_for_a_name_unlike_any():
    with pytest.raises(FedLabelsError) as err:
        RunConfig(method="zzzzzz")
    assert "did you mean" not in str(err.value) and "available:" in str(err.value)


METRICS = ["accuracy", "balanced_accuracy", "macro_f1", "auroc"]
NET = ["lr", "weight_decay", "batch_size", "max_steps", "hidden", "depth"]


@pytest.mark.parametrize("name, choices, hint", [
    ("widht", [*NET, "width"], "width"),  # two letters swapped
    ("hiden", NET, "hidden"),  # one left out
    ("mlo", ["mlp", "cnn", "dt"], "mlp"),  # one changed in 3 letters (ratio 0.67)
    ("--rou", ["--rate", "--rounds", "--rounds-of-silence"], "--rounds"),  # begun
    ("Lable", ["label", "file"], "label"),
    ("auc", METRICS, "auroc"),
    ("width", NET, None),  # was 'depth': difflib's ratio 0.6, 3 letters of 5
    ("f1", METRICS, None),
    ("c", ["a", "b", "none"], None),
])
def test_a_suggestion_is_a_likely_misspelling_and_nothing_else(name, choices, hint):
    from fedlabels.core.errors import closest, did_you_mean

    assert closest(name, choices) == hint
    assert did_you_mean(name, choices) == ("" if hint is None else
                                           f" (did you mean {hint!r}?)")


def test_method_options_and_run_keys_suggest_alike():
    """Method options and run keys had difflib's own cutoff (0.6): 'depth' for width."""
    from fedlabels.method.options import unknown_option_message
    from fedlabels.runs.spec import unknown_key_message

    for text in (unknown_option_message("m", "width", NET),
                 unknown_key_message("width", NET, "key")):
        assert "did you mean" not in text
    assert "(did you mean 'hidden'?)" in unknown_option_message("m", "hiden", NET)
    assert "(did you mean 'hidden'?)" in unknown_key_message("Hiden", NET, "key")


@pytest.mark.parametrize("argv, hint", [
    (["run", "--epsilom", "8"], "did you mean '--epsilon'?"),
    (["run", "--modle", "dt"], "did you mean '--model'?"),
    (["rnu"], "did you mean 'run'?"),
    (["run", "--rounds", "1", "--quite"], "did you mean '--quiet'?"),  # global flags too
])
def test_flags_and_subcommands_get_a_hint(argv, hint, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and hint in err
