"""The edges of private files (core.private_files): an existing folder tightened or left,
an append's mode, a key's length, the HMAC's framing."""

from __future__ import annotations

import os
import stat

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.private_files import private_dir


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_an_existing_folder_is_tightened_to_0700_unless_told_not_to(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    keys.chmod(0o755)
    private_dir(keys)
    assert _mode(keys) == 0o700
    results = tmp_path / "results"  # a user's own results folder: left as it is
    results.mkdir()
    results.chmod(0o755)
    private_dir(results, tighten=False)
    assert _mode(results) == 0o755
    made = private_dir(tmp_path / "new" / "deeper", tighten=False)
    assert _mode(made) == 0o700


def test_an_append_makes_an_open_file_0600_and_keeps_its_bytes(tmp_path):
    from fedlabels.core.private_files import append_private

    ledger = tmp_path / "site" / "ledger.jsonl"
    ledger.parent.mkdir()
    ledger.write_bytes(b"first\n")
    ledger.chmod(0o644)
    append_private(ledger, b"second\n")
    assert _mode(ledger) == 0o600
    assert ledger.read_bytes() == b"first\nsecond\n"


def test_a_short_append_is_cut_off_again(tmp_path, monkeypatch):
    # a full disk mid-entry: the ledger keeps what it held, never a torn entry
    from fedlabels.core import private_files

    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(b"first\n")
    real_write = os.write
    calls = []

    def short_write(fd, data):
        calls.append(len(data))
        return real_write(fd, bytes(data[:3])) if len(calls) == 1 else 0

    monkeypatch.setattr(private_files.os, "write", short_write)
    with pytest.raises(FedLabelsError, match=r"could not append to .*ledger\.jsonl: wrote 3 of "
                                             r"13 bytes; it was left as it was before"):
        private_files.append_private(ledger, b'{"eps": 1.0}\n')
    monkeypatch.undo()
    assert ledger.read_bytes() == b"first\n"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_key_others_can_read_is_refused(tmp_path, mode):
    from fedlabels.core.private_files import KEY_BYTES, read_key

    key = tmp_path / "checkpoint.key"
    key.write_bytes(b"k" * KEY_BYTES)
    key.chmod(mode)
    with pytest.raises(FedLabelsError, match=f"is accessible by others \\(mode {mode:o}\\)"):
        read_key(key, "checkpoint key", "make a new one.")
    key.chmod(0o600)
    assert read_key(key, "checkpoint key", "make a new one.") == b"k" * KEY_BYTES


@pytest.mark.parametrize("size", [31, 33, 64])
def test_a_key_of_another_length_is_refused(tmp_path, size):
    from fedlabels.core.private_files import read_key

    key = tmp_path / "checkpoint.key"
    key.write_bytes(b"k" * size)
    key.chmod(0o600)
    with pytest.raises(FedLabelsError, match=f"has {size} bytes, not 32; make a new one."):
        read_key(key, "checkpoint key", "make a new one.")


def test_a_tag_matches_only_in_full():
    from fedlabels.core.private_files import same_tag, tag

    key = b"k" * 32
    expected = tag(key, b"meta", b"arrays")
    last = "0" if expected[-1] != "0" else "1"
    assert same_tag(expected, expected)
    assert not same_tag(expected[:-1] + last, expected)  # one hex digit changed, at the end
    assert not same_tag(expected.encode(), expected)  # bytes, not the stored text
    assert tag(key, b"ab", b"c") != tag(key, b"a", b"bc")  # the parts' lengths are framed


def test_a_checkpoint_leaves_the_users_results_folder_as_it_is(tmp_path):
    # the checkpoint is 0600; the folder it is written into is the user's (tighten=False)
    from fedlabels.runs.checkpoint import load_checkpoint, write_checkpoint

    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o755)
    key = b"k" * 32
    path = write_checkpoint(results / "run.checkpoint.npz", {"records": []}, {}, {}, key=key)
    assert _mode(results) == 0o755 and _mode(path) == 0o600
    assert load_checkpoint(path, key=key).meta["records"] == []
