"""``fedlabels run ... --report`` writes the run's HTML report beside its result, as
``fedlabels report X.json -o X.html`` does, and never over a file of the user's."""

from __future__ import annotations

from fedlabels.cli import main

RUN = ["run", "--method", "fedct", "--dataset", "breast_cancer", "--model", "dt",
       "--clients", "3", "--rounds", "1", "--no-progress", "--no-checkpoint"]


def test_run_report_writes_the_page_that_fedlabels_report_writes(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main([*RUN, "-o", str(out), "--report", "--metric", "auroc"]) == 0
    said = capsys.readouterr().out
    page, summary = tmp_path / "run.html", tmp_path / "run.summary.csv"
    assert f"report: {page}  (summary: {summary})" in said
    assert main(["report", str(out), "-o", str(tmp_path / "again.html"),
                 "--metric", "auroc"]) == 0  # the independent way to the same page
    again = (tmp_path / "again.summary.csv").read_text()
    assert summary.read_text() == again
    assert "Headline: <b>AUROC</b>" in page.read_text()
    assert "<p>1 result, 1 configuration. " in page.read_text()  # was '1 results, 1 configurations'


def test_run_report_refuses_an_existing_page_before_the_run(tmp_path, capsys):
    page = tmp_path / "run.html"
    page.write_text("mine")
    assert main([*RUN, "-o", str(tmp_path / "run.json"), "--report"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert page.read_text() == "mine" and not (tmp_path / "run.json").exists()
    assert main([*RUN, "-o", str(tmp_path / "run.json"), "--report", "--overwrite"]) == 0
    assert page.read_text() != "mine" and "fedlabels report" in page.read_text()


def test_a_flag_named_after_another_command_says_it_is_one(capsys):
    """`fedlabels run ... --plot` was answered "did you mean '--report'?", a flag that does
    something else; a flag that names a command says so."""
    for flag, command in (("--plot", "run"), ("--predict", "run"), ("--plot", "report")):
        argv = ["report", "x.json", "-o", "x.html", flag] if command == "report" else \
            [*RUN, flag]
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
        assert code == 2
        name = flag.removeprefix("--")
        err = capsys.readouterr().err
        assert f"({flag} is no flag of {command}: {name} is a command of its own, " \
               f"`fedlabels {name} -h`)" in err
        assert "did you mean" not in err
