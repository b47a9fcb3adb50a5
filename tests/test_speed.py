"""Issue 15, speed for everyone: lazy imports, torch threads, progress only on a terminal."""

import io
import json
import subprocess
import sys

import pytest
import torch

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.core.threads import ENV_VAR, torch_threads
from fedlabels.results import RoundRecord
from fedlabels.runs.progress import (
    NORMAL,
    QUIET,
    VERBOSE,
    RoundProgress,
    progress_mode,
    set_verbosity,
)

HEAVY = ("sklearn", "scipy", "pandas", "torch", "tqdm", "matplotlib")
BAR_MARKS = ("\r", "█", "round/s", "s/round", "%|")


# --- lazy imports -----------------------------------------------------------------------

@pytest.mark.parametrize("code", [
    "import fedlabels; fedlabels.__version__",
    "from fedlabels.cli import build_parser; build_parser()",
    "from fedlabels.cli import main\ntry:\n    main(['run', '--help'])\n"
    "except SystemExit:\n    pass",
])
def test_package_and_cli_parser_do_not_import_heavy_libraries(code):
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("argv", [
    ["--help"], ["--version"], ["plot", "--help"], ["report", "--help"], ["inspect", "--help"],
    ["fetch", "--help"], ["bound", "convergence", "--help"], ["deploy", "certs", "--help"],
    ["datasets"], ["models"]])
def test_commands_that_use_no_method_import_none(argv):
    """``run``'s method flags are generated from every method's declarations: a command
    that uses no method does not build them (it imported all 16 methods and numpy for
    ``fedlabels --help``), nor import torch or Flower; a help imports no numpy either."""
    heavy = ("torch", "flwr", "sklearn", "matplotlib", "pandas",
             *(("numpy",) if "--help" in argv or "--version" in argv else ()))
    probe = (f"from fedlabels.cli import main\ntry:\n    main({argv!r})\n"
             "except SystemExit:\n    pass\nimport sys\nprint(sorted(m for m in sys.modules if "
             "m.startswith('fedlabels.methods.') and m != 'fedlabels.methods.registry' or "
             f"m in {heavy!r}))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_a_run_on_trees_imports_neither_torch_flower_nor_matplotlib():
    """``fl.run`` loads what the run uses: a FedCT run of decision trees imports no torch
    (a neural model's), Flower (a deployment's) or matplotlib (a plot's), nor does building
    the CLI's complete parser. A guard: no fix was needed when it was written."""
    code = ("import sys, fedlabels as fl, fedlabels.cli\n"
            "fedlabels.cli.build_parser()\n"
            "fl.run('fedct', 'breast_cancer', model='dt', clients=3, rounds=1, progress=False)\n"
            "print(sorted(m for m in ('torch', 'flwr', 'ray', 'matplotlib', 'tqdm') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def _choices(parser):
    """A parser's subcommands by name (empty for a leaf)."""
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subs[0].choices if subs else {}


def _leaf_paths(parser, path=()):
    choices = _choices(parser)
    return [p for name, child in choices.items() for p in _leaf_paths(child, (*path, name))
            ] if choices else [path]


def test_a_subcommand_built_on_first_use_is_the_complete_one(capsys, monkeypatch):
    """``main`` builds a subcommand's arguments when it is chosen; its help (flags, their
    order, defaults, the methods' epilog) is that of the complete parser, which the docs'
    tests read."""
    import contextlib

    from fedlabels.cli import build_parser

    monkeypatch.setenv("COLUMNS", "100")
    complete = build_parser()
    paths = _leaf_paths(complete)
    assert ("run",) in paths and ("deploy", "local") in paths and len(paths) > 12
    for path in paths:
        expected = complete
        for name in path:
            expected = _choices(expected)[name]
        with contextlib.suppress(SystemExit):
            main([*path, "--help"])
        assert capsys.readouterr().out == expected.format_help(), path


def test_public_names_load_on_first_use():
    assert sorted(fl.__all__) == sorted(fl._LAZY)
    for name in fl.__all__:
        assert getattr(fl, name) is not None
        assert name in dir(fl)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(dir(fl))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fl.nope  # noqa: B018
    code = "import fedlabels; print(fedlabels.engines.simulate.__name__)"  # subpackages too
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "simulate", proc.stderr


# --- progress -----------------------------------------------------------------------------

class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def verbosity():
    yield set_verbosity
    set_verbosity(NORMAL)


@pytest.mark.parametrize("level,progress,tty,mode", [
    (NORMAL, None, True, "bar"), (NORMAL, None, False, "off"),
    (NORMAL, True, True, "bar"), (NORMAL, True, False, "evaluations"),
    (NORMAL, False, True, "off"), (QUIET, True, True, "off"), (QUIET, True, False, "off"),
    (VERBOSE, True, True, "rounds"), (VERBOSE, None, False, "rounds"),
    (VERBOSE, False, True, "off"),
])
def test_progress_mode(verbosity, level, progress, tty, mode):
    verbosity(level)
    assert progress_mode(progress, _Stream(tty)) == mode


def _record(rnd, acc):
    return RoundRecord(round=rnd, local_steps=None, accuracies=acc, server={},
                       bytes_up=[100, 300], bytes_down=[10, 10], seconds=0.5)


def test_lines_when_redirected_one_per_evaluation(verbosity):
    stream = _Stream(tty=False)
    with RoundProgress(3, "fedct on wine", True, stream) as shown:
        for rnd, acc in ((1, None), (2, [0.9, 0.8]), (3, [1.0, 1.0])):
            shown.update(_record(rnd, acc))
    assert stream.getvalue().splitlines() == ["fedct on wine: round 2/3: mean accuracy 0.850",
                                              "fedct on wine: round 3/3: mean accuracy 1.000"]
    verbosity(VERBOSE)  # a line per round, also on a terminal
    stream = _Stream(tty=True)
    with RoundProgress(3, "fedct on wine", True, stream) as shown:
        shown.update(_record(1, None))
    assert stream.getvalue() == "fedct on wine: round 1/3 (0.50 s, 200 B up per client)\n"


def test_a_long_run_prints_a_line_every_line_seconds_with_the_time_left(verbosity,
                                                                        monkeypatch):
    """3,000 rounds of 30 ms (FedCT with dt, eval_every 1) printed 3,000 lines to a log:
    now the first evaluation, one per line_seconds and the last, each saying the time left."""
    import fedlabels.runs.progress as progress_module

    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    stream = _Stream(tty=False)
    with RoundProgress(3000, "fedct on wine", True, stream) as shown:
        for rnd in range(1, 3001):
            clock[0] += 0.03
            shown.update(_record(rnd, [0.9, 0.8]))
    lines = stream.getvalue().splitlines()
    assert 9 <= len(lines) <= 11  # 90 s of rounds: about one line per 10 s
    assert lines[0] == "fedct on wine: round 1/3000: mean accuracy 0.850"  # nothing timed
    assert all(line.endswith(" s left)") for line in lines[1:-1])
    assert lines[1].endswith(f"(about {0.03 * (3000 - 335):.0f} s left)")  # 10 s on
    assert lines[-1] == "fedct on wine: round 3000/3000: mean accuracy 0.850"
    # a resumed run's first round also refits the models: not timed into what is left
    clock[0], stream = 0.0, _Stream(tty=False)
    with RoundProgress(300, "fedct on wine", True, stream) as shown:
        for rnd in range(201, 301):
            clock[0] += 20.0 if rnd == 201 else 0.25
            shown.update(_record(rnd, [0.9, 0.8]))
    assert stream.getvalue().splitlines()[1].endswith(f"(about {0.25 * (300 - 241):.0f} s left)")


def test_a_long_round_shows_its_steps(monkeypatch):
    """A round that shows nothing for quiet_seconds says which exchange it is in (a one-round
    XCLP on hundreds of clients printed nothing for minutes); a short one adds no line."""
    stream = _Stream(tty=False)
    with RoundProgress(1, "xclp on letter", True, stream) as shown:
        shown.step("xclp.setup", 0, 300)  # inside quiet_seconds: no line
        monkeypatch.setattr(RoundProgress, "quiet_seconds", 0.0)
        shown.step("xclp.hamming", 0, 300)
        shown.update(_record(1, [0.9, 0.8]))
    assert stream.getvalue().splitlines() == [
        "xclp on letter: round 1/1: xclp.hamming to 300 clients (0 s into the round)",
        "xclp on letter: round 1/1: mean accuracy 0.850"]
    bar = _Stream(tty=True)
    with RoundProgress(2, "xclp on letter", None, bar) as shown:
        shown.step("xclp.rowsums", 0, 300)
    assert "round 1: xclp.rowsums" in bar.getvalue()


def test_a_simulated_run_tells_its_progress_each_exchange(monkeypatch):
    """The simulator's grid reports every exchange to the progress display, in order."""
    seen: list[tuple[str, int, int]] = []
    monkeypatch.setattr(RoundProgress, "step",
                        lambda self, kinds, rnd, n: seen.append((kinds, rnd, n)))
    import fedlabels as fl

    fed = fl.load_federation("wine", clients=3, seed=0)
    fl.run("fedct", fed, model="dt", rounds=2, progress=False)
    assert [rnd for _, rnd, _ in seen] == sorted(rnd for _, rnd, _ in seen)
    assert {rnd for _, rnd, _ in seen} == {0, 1} and all(n == 3 for _, _, n in seen)
    assert any(kinds.startswith("fedct.") for kinds, _, _ in seen)


def test_bar_only_on_a_terminal():
    stream = _Stream(tty=True)
    with RoundProgress(2, "fedct on wine", None, stream) as shown:
        shown.update(_record(1, [0.5]))
    assert "1/2" in stream.getvalue()  # tqdm drew a bar


def test_cli_run_without_terminal_logs_lines_no_bar(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "fedlabels", "run", "--dataset", "wine",
                           "--clients", "3", "--model", "dt", "--rounds", "3",
                           "--output", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "round" in ln]
    assert len(lines) == 3 and lines[-1].startswith("fedct on wine: round 3/3: mean accuracy")
    assert not any(mark in proc.stderr + proc.stdout for mark in BAR_MARKS)


def test_quiet_prints_only_the_table(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["-q", "run", "--dataset", "wine", "--clients", "3", "--model", "dt",
                 "--rounds", "2", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.strip().splitlines()
    assert lines[0].startswith("method") and lines[1].startswith("---") and len(lines) == 3
    assert out.exists()


def test_quiet_demo_prints_only_the_table(tmp_path, capsys, monkeypatch):
    import fedlabels.demo

    monkeypatch.setattr(fedlabels.demo, "DEMO_RUNS", [
        ("fedct", "dt", 2, 1), ("local", "dt", 1, 1), ("centralized", "dt", 1, 1),
        ("fedavg", "mlp(hidden=8)", 2, 2), ("local", "mlp(hidden=8)", 2, 2),
        ("centralized", "mlp(hidden=8)", 2, 2)])
    assert main(["-q", "demo", "--output-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    # no progress on stderr; only the honest warnings (these tiny runs are near chance)
    warned = captured.err.strip().splitlines()
    assert all(line.startswith("fedlabels: warning: ") for line in warned)
    said = [line.removeprefix("fedlabels: warning: ") for line in warned]
    # fl.run's caveat warnings are not said twice (the demo names the run in its own)
    assert not any(a != b and a in b for a in said for b in said) and len(said) == len(set(said))
    lines = captured.out.strip().splitlines()
    assert lines[0].startswith("method") and len(lines) == 2 + 6
    assert (tmp_path / "summary.csv").exists()
    # each run's models are saved, so `fedlabels predict` works on the demo's results
    assert (tmp_path / "fedct_dt.models.npz").is_file()
    new = tmp_path / "new.csv"
    import sklearn.datasets
    sklearn.datasets.load_breast_cancer(as_frame=True).data.head(4).to_csv(new, index=False)
    assert main(["predict", str(tmp_path / "fedct_dt.json"), str(new),
                 "-o", str(tmp_path / "p.csv")]) == 0
    assert len((tmp_path / "p.csv").read_text().strip().splitlines()) == 5


def test_verbose_prints_every_round(tmp_path, capsys):
    assert main(["-v", "run", "--dataset", "wine", "--clients", "3", "--model", "dt",
                 "--rounds", "3", "--eval-every", "2", "--output", str(tmp_path / "r.json")]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("fedct on")]
    assert [ln.split(": ")[1].split(" (")[0] for ln in lines] == [
        "round 1/3", "round 2/3", "round 3/3"]
    assert "mean accuracy" not in lines[0] and "mean accuracy" in lines[1]


def test_quiet_and_verbose_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["-q", "-v", "methods"])
    assert exc.value.code == 2


# --- threads ------------------------------------------------------------------------------

@pytest.fixture
def threads_restored(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")  # restored (to unset) after the test
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_one_torch_thread_by_default(threads_restored, monkeypatch):
    monkeypatch.delenv(ENV_VAR)
    assert torch_threads() == 1
    torch.set_num_threads(2)
    res = fl.run("fedavg", "wine", model="mlp(hidden=8)", rounds=1, period=2)
    assert torch.get_num_threads() == 1 and res.extra["provenance"]["torch_threads"] == 1
    assert "threads" not in res.config  # a process setting, not the run's identity


def test_run_threads_argument(threads_restored):
    res = fl.run("fedavg", "wine", model="mlp(hidden=8)", rounds=1, period=2, threads=2)
    assert torch.get_num_threads() == 2 and res.extra["provenance"]["torch_threads"] == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_thread_count_fails_before_loading_data(threads_restored, bad):
    with pytest.raises(FedLabelsError, match="threads must be an integer >= 1"):
        fl.run("fedct", "no_such_dataset", threads=bad)


def test_cli_threads_flag_and_environment(tmp_path, threads_restored, monkeypatch, capsys):
    out = tmp_path / "r.json"
    assert main(["--threads", "2", "-q", "run", "--method", "fedavg", "--dataset", "wine",
                 "--clients", "3", "--model", "mlp(hidden=8)", "--rounds", "1", "--period", "2",
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["provenance"]["torch_threads"] == 2
    capsys.readouterr()  # one round of a tiny MLP may warn that it is near chance
    monkeypatch.setenv(ENV_VAR, "many")
    assert main(["-q", "run", "--dataset", "wine", "--output", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "FEDLABELS_THREADS must be an integer" in err
