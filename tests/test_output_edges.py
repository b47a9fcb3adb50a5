"""The edges of the output checks and atomic writes (core.files): a dangling link, an empty
folder, the mode of what is written, a result name's suffix."""

from __future__ import annotations

import os

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.files import check_output_dir, check_outputs


def test_a_dangling_link_at_an_output_is_refused_and_kept(tmp_path):
    # the link is the user's (its target may be on a volume not mounted now)
    link = tmp_path / "run.json"
    link.symlink_to(tmp_path / "elsewhere" / "run.json")
    with pytest.raises(FedLabelsError, match=r"run\.json exists; pass --overwrite"):
        check_outputs({"result": link})
    assert link.is_symlink() and os.readlink(link) == str(tmp_path / "elsewhere" / "run.json")
    check_outputs({"result": link}, overwrite=True)  # asked for: allowed


def test_an_empty_output_folder_needs_no_overwrite(tmp_path):
    folder = tmp_path / "deploy"
    folder.mkdir()
    check_output_dir(folder, "deployment files")  # nothing in it to replace
    (folder / "site1.toml").write_text("x = 1\n")
    with pytest.raises(FedLabelsError, match="is not empty; pass --overwrite"):
        check_output_dir(folder, "deployment files")
    check_output_dir(folder, "deployment files", overwrite=True)
    assert (folder / "site1.toml").read_text() == "x = 1\n"


def test_a_result_name_ends_in_json_in_any_case(tmp_path):
    from fedlabels.core.files import result_path, run_outputs

    given = tmp_path / "Run.JSON"
    assert result_path(given) == given
    assert run_outputs(given)["rounds table"] == tmp_path / "Run.rounds.csv"
    for bad in ("run.csv", "run.json.bak"):
        with pytest.raises(FedLabelsError, match="the result is JSON, give a path ending in "
                                                 r"\.json"):
            result_path(tmp_path / bad)


def test_a_device_or_a_pipe_is_refused_before_it_is_read(tmp_path):
    # a named pipe hung the reader and /dev/zero filled memory; /dev/null reads as empty
    from fedlabels.core.files import refuse_special_file
    from fedlabels.results.run_result import load_result

    pipe = tmp_path / "rows.csv"
    os.mkfifo(pipe)
    with pytest.raises(FedLabelsError, match=r"data .*rows\.csv is not a regular file"):
        refuse_special_file(pipe, "data")
    with pytest.raises(FedLabelsError, match=r"^result /dev/null is not a regular file"):
        load_result("/dev/null")
    refuse_special_file(tmp_path / "absent.csv", "data")  # missing: the caller says so
    refuse_special_file(tmp_path, "data")  # a folder: the caller's to handle too
