"""Data safety: no command destroys a user's file, checks its outputs before any work, and
keeps what a stopped run completed (issue 15)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.config import load_config

BASE = ["run", "--method", "fedct", "--model", "dt", "--rounds", "1", "--no-progress"]


def _one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedlabels: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _fails(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2
    return _one_line_error(capsys, *needles)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if a command loads data or trains (output checks must come first)."""
    import fedlabels.api
    import fedlabels.data
    import fedlabels.demo
    import fedlabels.runs.federation

    def refuse(*args, **kwargs):
        raise AssertionError("data was loaded / a model trained before the outputs were "
                             "checked")

    monkeypatch.setattr(fedlabels.api, "run_config", refuse)
    monkeypatch.setattr(fedlabels.runs.federation, "load_federation", refuse)
    monkeypatch.setattr(fedlabels.data, "load_federation", refuse)
    monkeypatch.setattr(fedlabels.demo, "load_federation", refuse)


@pytest.fixture
def patients(tmp_path) -> Path:
    """A user's table: breast_cancer as CSV with a ``target`` column."""
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    path = tmp_path / "patients.csv"
    frame.to_csv(path, index=False)
    return path


# ---------------------------------------------------------------- inputs are never written


def test_the_input_table_survives_every_output_name(tmp_path, patients, capsys, monkeypatch):
    before = _sha(patients)
    dataset = f"csv:{patients}:target"
    # the issue's report: --output patients.json used to replace patients.csv
    out = tmp_path / "patients.json"
    assert main([*BASE, "--dataset", dataset, "--output", str(out)]) == 0
    assert _sha(patients) == before
    assert (tmp_path / "patients.rounds.csv").is_file() and json.loads(out.read_text())
    capsys.readouterr()
    # a .csv result name is refused, whatever it is
    _fails(capsys, [*BASE, "--dataset", dataset, "--output", str(patients)], ".json")
    _fails(capsys, [*BASE, "--dataset", dataset, "--output", str(tmp_path / "res.csv")],
           "--output", ".json")
    assert _sha(patients) == before
    # a table whose name is one of the run's outputs: refused, even with --overwrite
    table = tmp_path / "data.rounds.csv"
    table.write_bytes(patients.read_bytes())
    _fails(capsys, [*BASE, "--dataset", f"csv:{table}:target", "--overwrite",
                    "--output", str(tmp_path / "data.json")], "dataset file")
    assert _sha(table) == before
    # the same through a symbolic link to the table
    link = tmp_path / "linked.rounds.csv"
    link.symlink_to(patients)
    _fails(capsys, [*BASE, "--dataset", f"csv:{patients}:target", "--overwrite",
                    "--output", str(tmp_path / "linked.json")], "dataset file")
    assert _sha(patients) == before


def test_the_config_file_is_never_an_output(tmp_path, capsys, no_training):
    cfg = tmp_path / "run.json"  # TOML, whatever its name
    cfg.write_text('method = "local"\nrounds = 1\n')
    before = _sha(cfg)
    _fails(capsys, ["run", "--config", str(cfg), "--output", str(cfg), "--overwrite"],
           "config file")
    assert _sha(cfg) == before


def test_outputs_of_one_run_may_not_collide(tmp_path):
    from fedlabels.core.files import check_outputs

    with pytest.raises(FedLabelsError, match="the result and the plot would both"):
        check_outputs({"result": tmp_path / "a.json", "plot": tmp_path / "a.json"})


# ----------------------------------------------------------- existing files and --overwrite


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text("my notes\n")
    _fails(capsys, [*BASE, "--output", str(out)], "exists", "--overwrite")
    assert out.read_text() == "my notes\n"
    assert not (tmp_path / "r.rounds.csv").exists()
    # an existing rounds table (or models file) alone is also protected
    out.unlink()
    (tmp_path / "r.rounds.csv").write_text("keep\n")
    _fails(capsys, [*BASE, "--output", str(out)], "r.rounds.csv", "exists")
    assert (tmp_path / "r.rounds.csv").read_text() == "keep\n"
    assert main([*BASE, "--output", str(out), "--overwrite"]) == 0
    assert json.loads(out.read_text())["method"] == "fedct"
    assert (tmp_path / "r.rounds.csv").read_text().startswith("method,")


def test_default_names_differ_per_configuration(tmp_path, monkeypatch, capsys):
    from fedlabels.cli.run_options import default_output
    from fedlabels.runs.config import RunConfig

    a = default_output(RunConfig(model="dt"))
    assert a == default_output(RunConfig(model="dt"))  # stable
    assert a.parent == Path("results") and a.name.startswith(
        "fedct_breast_cancer_decision_tree_m5_iid_seed0_")
    others = {default_output(RunConfig(**change)) for change in (
        {"model": "rf"}, {"model": "dt", "clients": 4}, {"model": "dt", "partition": "shards:2"},
        {"model": "dt", "seed": 1}, {"model": "dt", "rounds": 3},
        {"model": "dt", "options": {"quorum": 0.9}})}
    assert len(others) == 6 and a not in others
    csv = default_output(RunConfig(dataset="csv:/data/patients.csv:target",
                                   model="mlp(hidden=64-64)"))
    assert csv.name.startswith("fedct_csv-patients-target_mlp-hidden-64-64_m5_")
    # a long model ends at a separator, never inside a number (hidden-128 read as hidden-12)
    from fedlabels.cli.run_options import _slug
    assert _slug("module:mynets:make_net(hidden=128)") == "module-mynets-make_net-hidden"
    assert _slug("x" * 40) == "x" * 32  # one long word: cut at the limit
    # the README's first and third commands (different models) no longer collide
    monkeypatch.chdir(tmp_path)
    assert main([*BASE, "--model", "dt"]) == 0
    assert main([*BASE, "--model", "rf"]) == 0
    assert len(list((tmp_path / "results").glob("*.json"))) == 2
    capsys.readouterr()
    _fails(capsys, [*BASE, "--model", "dt"], "exists", "--overwrite")  # never silently


# ------------------------------------------------------------ unwritable paths, before work


def _unwritable(monkeypatch, directory: Path) -> None:
    """Make ``directory`` refuse new files (chmod, or for root a refusing probe)."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return
    real = tempfile.NamedTemporaryFile

    def refuse(*args, **kwargs):
        if Path(kwargs.get("dir", "")).resolve() == directory.resolve():
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)


def test_bad_output_paths_fail_before_training(tmp_path, capsys, no_training, monkeypatch):
    folder = tmp_path / "folder.json"
    folder.mkdir()
    _fails(capsys, [*BASE, "--output", str(folder)], "is a directory")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    _fails(capsys, [*BASE, "--output", str(a_file / "r.json")], "is a file")
    _fails(capsys, [*BASE, "--output", str(a_file / "deeper" / "r.json")], "is a file")
    locked = tmp_path / "locked"
    locked.mkdir()
    _unwritable(monkeypatch, locked)
    try:
        _fails(capsys, [*BASE, "--output", str(locked / "r.json")], "not writable")
        # a missing parent that cannot be created
        _fails(capsys, [*BASE, "--output", str(locked / "new" / "r.json")], "not writable")
        _fails(capsys, ["audit", "--method", "fedct", "--output", str(locked / "a.json"),
                        "--no-progress"], "not writable")
    finally:
        locked.chmod(0o755)
    assert not (locked / "new").exists()


def test_a_full_disk_keeps_the_old_file(tmp_path, capsys, monkeypatch):
    from fedlabels.core import files

    old = tmp_path / "r.json"
    old.write_text('{"old": true}\n')

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        files.write_atomic(old, "new text")
    assert old.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary left
    # through the CLI: one line, exit 2, the old result intact
    _fails(capsys, [*BASE, "--output", str(old), "--overwrite"], "could not write",
           "No space left on device")
    assert old.read_text() == '{"old": true}\n'
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_a_failed_write_names_the_file_not_its_temporary(tmp_path):
    """The error of a write through a temporary file beside the target names the target
    (the file the user asked for), not ``.NAME.<random>.tmp``; another file keeps its name."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.core.files import writing

    target = tmp_path / "r.checkpoint.npz"
    temporary = tmp_path / ".r.checkpoint.npz.k2x9.tmp.npz"
    with pytest.raises(FedLabelsError) as err, writing(str(target)):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(temporary))
    assert str(err.value).startswith(f"could not write {target}: No space left on device")
    other = tmp_path / "elsewhere.json"
    with pytest.raises(FedLabelsError, match=f"could not write {other}"), writing(str(target)):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(other))


# ------------------------------------------------------------------- interrupted runs


_CHILD = """
import sys, time
import fedlabels.engines.inprocess as ip
from fedlabels.cli import main

real = ip.run_rounds

def slow(*args, on_round=None, **kwargs):
    def hook(record):
        if on_round is not None:
            on_round(record)
        print(f"ROUND {record.round}", file=sys.stderr, flush=True)
        time.sleep(0.3)
    return real(*args, on_round=hook, **kwargs)

ip.run_rounds = slow
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_saves_the_completed_rounds(tmp_path):
    out = tmp_path / "term.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "run", "--method", "fedct", "--model", "dt",
         "--rounds", "100", "--no-progress", "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("ROUND 1"):
            proc.send_signal(signal.SIGTERM)
            break
    _, rest = proc.communicate(timeout=120)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted after round" in err
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and 1 <= len(data["rounds"]) < 100
    assert data["final"]["round"] == data["rounds"][-1]["round"]
    assert (tmp_path / "term.rounds.csv").is_file()


def _interrupt(monkeypatch, *, in_exchange: bool) -> None:
    """Ctrl-C after round 1 (``in_exchange=False``) or inside round 1's first exchange."""
    import fedlabels.engines.inprocess as ip

    real = ip.run_rounds

    def stop(*args, **kwargs):
        grid = args[1]
        if in_exchange:
            def exchange(*a, **k):
                raise KeyboardInterrupt
            grid.exchange = exchange
            grid.broadcast = exchange
        else:
            def hook(record):
                raise KeyboardInterrupt
            kwargs["on_round"] = hook
        return real(*args, **kwargs)

    monkeypatch.setattr(ip, "run_rounds", stop)


@pytest.mark.parametrize("in_exchange", [False, True])
def test_an_interrupt_before_the_first_evaluation_still_writes(tmp_path, capsys, monkeypatch,
                                                               in_exchange):
    _interrupt(monkeypatch, in_exchange=in_exchange)
    out = tmp_path / "early.json"
    assert main(["run", "--method", "fedct", "--model", "dt", "--rounds", "10",
                 "--eval-every", "5", "--no-progress", "--output", str(out)]) == 130
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "no evaluation yet" in captured.out
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and data["final"] is None
    assert len(data["rounds"]) == (0 if in_exchange else 1)
    if in_exchange:
        assert "before the first round completed" in captured.err
    else:
        assert data["rounds"][0]["accuracies"] is None and "none evaluated" in captured.err
    # such a result still loads and plots
    pdf = tmp_path / "early.pdf"
    assert main(["plot", str(out), "-o", str(pdf)]) == 0
    assert pdf.read_bytes()[:4] == b"%PDF"


# ------------------------------------------------------------------------------- TOML


@pytest.mark.parametrize("text, needle", [
    ('method = "local"\n[run]\nrounds = 2\n', "'method'"),
    ('[run]\nrounds = 2\n[optoins]\nquorum = 0.9\n', "'optoins'"),
    ('rounds = 2\n[optoins]\nquorum = 0.9\n', "[optoins]"),
    ('[run]\nrounds = 2\n[run.extra]\nx = 1\n', "[extra]"),
    ('run = 3\n', "'run' must be a table"),
    ('[run]\nrounds = 2\n[run.options]\nquorum = 0.9\n[options]\nquorum = 0.8\n',
     "options given twice"),
])
def test_toml_layouts_are_checked(tmp_path, capsys, no_training, text, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(FedLabelsError, match=r"valid layouts|options given twice") as exc:
        load_config(cfg)
    assert needle in str(exc.value)
    _fails(capsys, ["run", "--config", str(cfg), "--output", str(tmp_path / "x.json")], needle)


@pytest.mark.parametrize("text", [
    'method = "local"\nrounds = 2\n[options]\n',
    '[run]\nmethod = "fedct"\nrounds = 2\n[options]\nquorum = 0.9\n',
    'method = "fedct"\n[options]\nquorum = 0.9\n',
])
def test_valid_toml_layouts(tmp_path, text):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    loaded = load_config(cfg)
    assert loaded.method in ("local", "fedct")


def test_a_non_utf8_config_is_one_line(tmp_path, capsys, no_training):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b'method = "\xff"\n')
    _fails(capsys, ["run", "--config", str(cfg)], "config file")


# ------------------------------------------------------------------------------- plot


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    """Results on two datasets, same method and model."""
    d = tmp_path_factory.mktemp("plots")
    paths = []
    for dataset in ("breast_cancer", "wine"):
        out = d / f"{dataset}.json"
        assert main(["run", "--method", "local", "--model", "dt", "--clients", "3",
                     "--rounds", "2", "--dataset", dataset, "--no-progress",
                     "--output", str(out)]) == 0
        paths.append(out)
    return paths


def test_plot_errors_are_one_line(tmp_path, capsys, two_datasets):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    out = str(tmp_path / "p.png")
    _fails(capsys, ["plot", str(tmp_path / "missing.json"), "-o", out], "missing.json")
    _fails(capsys, ["plot", str(bad_json), "-o", out], "not a fedlabels result")
    _fails(capsys, ["plot", str(binary), "-o", out], "not a fedlabels result")
    _fails(capsys, ["plot", str(other), "-o", out], "not a fedlabels result")
    _fails(capsys, ["plot", str(two_datasets[0]), "-o", str(tmp_path / "p.docx")],
           "plot format", ".pdf")
    _fails(capsys, ["plot", str(two_datasets[0]), "-o", str(tmp_path / "noext")],
           "plot format")
    # the plot may not replace its input, nor an existing file without --overwrite
    before = _sha(two_datasets[0])
    _fails(capsys, ["plot", str(two_datasets[0]), "-o", str(two_datasets[0]), "--overwrite"],
           "plot format")
    disguised = tmp_path / "result.pdf"  # a result JSON under an image name
    disguised.write_bytes(two_datasets[0].read_bytes())
    _fails(capsys, ["plot", str(disguised), "-o", str(disguised), "--overwrite"],
           "refusing to write the plot")
    assert disguised.read_bytes() == two_datasets[0].read_bytes()
    svg = tmp_path / "p.svg"
    svg.write_text("mine")
    _fails(capsys, ["plot", str(two_datasets[0]), "-o", str(svg)], "exists")
    assert svg.read_text() == "mine" and _sha(two_datasets[0]) == before
    assert main(["plot", str(two_datasets[0]), "-o", str(svg), "--overwrite"]) == 0
    assert "<svg" in svg.read_text()


def test_plot_writes_a_real_pdf_with_distinct_labels(tmp_path, two_datasets):
    from fedlabels.reporting.plots import legend_labels
    from fedlabels.results import load_result

    pdf = tmp_path / "x.pdf"
    assert main(["plot", *map(str, two_datasets), "-o", str(pdf)]) == 0
    assert pdf.read_bytes()[:5] == b"%PDF-"
    results = [load_result(p) for p in two_datasets]
    labels, title = legend_labels(results)
    assert len(set(labels)) == 2 and "breast_cancer" in labels[0] and "wine" in labels[1]
    assert "breast_cancer" not in title and "wine" not in title
    labels, title = legend_labels([results[0], results[0]])  # identical runs: numbered
    assert labels[0] != labels[1]
    assert title == f"breast_cancer, m = 3, R = {results[0].config['rounds']}, seed 0"


# ------------------------------------------------------------------------ demo, deploy


def test_demo_refuses_to_replace_an_earlier_demo(tmp_path, capsys, no_training):
    (tmp_path / "summary.csv").write_text("earlier\n")
    _fails(capsys, ["demo", "--output-dir", str(tmp_path), "--no-progress"], "summary.csv",
           "--overwrite")
    assert (tmp_path / "summary.csv").read_text() == "earlier\n"


def test_deploy_prepare_refuses_a_non_empty_directory(tmp_path, capsys, no_training):
    pytest.importorskip("flwr")
    (tmp_path / "keep.txt").write_text("x")
    _fails(capsys, ["deploy", "prepare", "--out-dir", str(tmp_path), "--method", "fedct"],
           "not empty", "--overwrite")
    _fails(capsys, ["deploy", "prepare", "--out-dir", str(tmp_path / "keep.txt"),
                    "--method", "fedct"], "is a file")


def test_deploy_prepare_refuses_a_result_path_that_exists(tmp_path, capsys, no_training):
    """The ServerApp writes the result to ``-o`` after every round, replacing what is there:
    ``deploy prepare -o existing.json`` was accepted, without --overwrite."""
    pytest.importorskip("flwr")
    (tmp_path / "keep.json").write_text("precious\n")
    _fails(capsys, ["deploy", "prepare", "--out-dir", str(tmp_path / "app"), "--method",
                    "fedct", "-o", str(tmp_path / "keep.json")], "keep.json exists",
           "--overwrite")
    assert (tmp_path / "keep.json").read_text() == "precious\n"
    assert not (tmp_path / "app").exists()


# ------------------------------------------------------------------ a run's own files


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "r.json"
    assert main([*BASE, "--rounds", "2", "--output", str(out)]) == 0
    assert (out.parent / "r.checkpoint.npz").is_file()
    return out


@pytest.mark.parametrize("name", ["r.checkpoint.npz", "r.rounds.csv", "r.json",
                                  "r.models.npz"])
def test_predict_never_writes_over_the_runs_own_files(finished_run, tmp_path, capsys, name):
    rows = tmp_path / "rows.csv"
    rows.write_text("a\n1\n")
    target = finished_run.parent / name
    before = _sha(target)
    if name.endswith(".csv"):
        _fails(capsys, ["predict", str(finished_run), str(rows), "-o", str(target),
                        "--overwrite"], "refusing to write the predictions", "not an output")
    else:
        _fails(capsys, ["predict", str(finished_run), str(rows), "-o", str(target),
                        "--overwrite"], "the predictions are CSV")
    assert _sha(target) == before


@pytest.mark.parametrize("more", [[], ["--rounds", "2"]])
def test_resuming_a_finished_run_leaves_its_files_alone(finished_run, capsys, more):
    """Without --rounds, or with its planned 2 (nothing to extend), the run is finished."""
    files = sorted(finished_run.parent.iterdir())
    before = {p.name: _sha(p) for p in files}
    _fails(capsys, ["resume", str(finished_run), *more], "is a finished run (2 round(s)",
           "--rounds N")
    assert {p.name: _sha(p) for p in sorted(finished_run.parent.iterdir())} == before


def test_resume_of_a_finished_run_in_python_is_refused(finished_run):
    import fedlabels as fl

    wall = json.loads(finished_run.read_text())["wall_seconds"]
    with pytest.raises(FedLabelsError, match="finished"):
        fl.resume(finished_run)
    with pytest.raises(FedLabelsError, match="finished"):
        fl.resume(finished_run, rounds=2)
    assert json.loads(finished_run.read_text())["wall_seconds"] == wall


@pytest.fixture
def loop(tmp_path) -> Path:
    a, b = tmp_path / "loop.json", tmp_path / "other.json"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


@pytest.mark.parametrize("argv", [
    lambda loop: [*BASE, "--output", str(loop)],
    lambda loop: [*BASE, "--dataset", f"csv:{loop}:y", "--output",
                  str(loop.parent / "x.json")],
    lambda loop: ["run", "--config", str(loop)],
    lambda loop: ["predict", str(loop), str(loop), "-o", str(loop.parent / "p.csv")],
    lambda loop: ["plot", str(loop), "-o", str(loop.parent / "p.png")],
])
def test_a_symbolic_link_loop_is_one_line(loop, capsys, argv):
    _fails(capsys, argv(loop), "loop of symbolic links")


def test_a_device_is_not_called_missing(capsys, tmp_path):
    _fails(capsys, [*BASE, "--dataset", "csv:/dev/null:y", "--output",
                    str(tmp_path / "x.json")], "/dev/null is not a regular file")
    _fails(capsys, ["inspect", str(tmp_path / "nope.json")], "nope.json does not exist")


def test_predict_never_writes_over_the_rows_it_reads(finished_run, tmp_path, capsys):
    rows = tmp_path / "scans.csv"
    rows.write_text("a\n1\n")
    before = _sha(rows)
    line = _fails(capsys, ["predict", str(finished_run), str(rows), "-o", str(rows),
                           "--overwrite"], "refusing to write the predictions",
                  "that is the data file, not an output")
    assert "of this run" not in line and _sha(rows) == before


@pytest.mark.parametrize(("data_mode", "expected"), [(0o600, 0o600), (0o640, 0o640),
                                                    (0o644, 0o644)])
def test_predictions_are_readable_by_no_more_than_the_rows_they_copy(
        finished_run, tmp_path, capsys, data_mode, expected):
    """The output holds the data file's rows: under the usual umask (022) it was 0644 even
    for rows only their owner may read (0600); it now takes no more than the data file."""
    import os

    import pandas as pd

    import fedlabels as fl

    names = fl.load_run(finished_run).feature_names
    rows = tmp_path / "rows.csv"
    pd.DataFrame([[1.0] * len(names)] * 3, columns=names).to_csv(rows, index=False)
    os.chmod(rows, data_mode)
    out = tmp_path / "p.csv"
    umask = os.umask(0o022)
    try:
        assert main(["predict", str(finished_run), str(rows), "-o", str(out)]) == 0
    finally:
        os.umask(umask)
    capsys.readouterr()
    assert out.stat().st_mode & 0o777 == expected


def test_an_interrupted_run_says_how_to_continue_it(tmp_path, capsys, monkeypatch):
    # the line said the rounds were saved, and nothing of `fedlabels resume` (the line a
    # finished run prints about its checkpoint is left out for an interrupted one)
    import fedlabels.engines.inprocess as ip

    real = ip.run_rounds

    def stop_at_round_3(*args, **kwargs):
        inner = kwargs.get("on_round")

        def hook(record):  # after the run's own (its checkpoint writer)
            if inner is not None:
                inner(record)
            if record.round == 3:
                raise KeyboardInterrupt
        return real(*args, **{**kwargs, "on_round": hook})

    monkeypatch.setattr(ip, "run_rounds", stop_at_round_3)
    out = tmp_path / "cut short.json"
    assert main(["run", "--method", "fedct", "--model", "dt", "--rounds", "4",
                 "--no-progress", "--output", str(out)]) == 130
    err = capsys.readouterr().err
    assert (tmp_path / "cut short.checkpoint.npz").is_file()
    line = next(x for x in err.splitlines() if "interrupted after round 3;" in x)
    # "...; `fedlabels resume R` continues it", or, where the paced checkpoint is older,
    # "...; its checkpoint holds round 1, where `fedlabels resume R` continues"
    assert f"`fedlabels resume '{out}'` continues" in line, line
    monkeypatch.undo()
    assert main(["resume", str(out), "--no-progress"]) == 0  # the command it names
    assert len(json.loads(out.read_text())["rounds"]) == 4
    # without a checkpoint there is nothing to continue: no command is named
    _interrupt(monkeypatch, in_exchange=False)
    assert main(["run", "--method", "fedct", "--model", "dt", "--rounds", "4", "--no-progress",
                 "--no-checkpoint", "--output", str(tmp_path / "b.json")]) == 130
    assert "fedlabels resume" not in capsys.readouterr().err
