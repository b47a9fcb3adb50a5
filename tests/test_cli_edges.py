"""The edges of the command line: contradicting flags, a flag's bounds, the exit status of
a refusal (2)."""

from __future__ import annotations

import pytest

from fedlabels.cli import main


def _refused(capsys, argv: list[str], needle: str) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedlabels: error: ") and needle in err[0], err


def test_quiet_and_verbose_together_are_refused(capsys):
    _refused(capsys, ["-q", "-v", "methods"], "-q/--quiet and -v/--verbose contradict")


@pytest.mark.parametrize("threads", ["0", "4097"])
def test_threads_outside_their_bounds_are_refused(capsys, threads):
    _refused(capsys, ["--threads", threads, "methods"],
             f"--threads must lie in [1, 4096], got {threads}.")



def test_an_abbreviated_flag_is_refused(capsys, tmp_path):
    # `--rou 3` ran 3 rounds; a flag added later must not change what it means
    _refused(capsys, ["run", "--method", "local", "--rou", "3", "--output",
                      str(tmp_path / "r.json")], "unrecognized arguments: --rou 3")
    assert not any(tmp_path.iterdir())
