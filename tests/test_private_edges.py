"""The edges of private files (core.private_files): an existing folder tightened or left,
an append's mode, a key's length, the HMAC's framing."""

from __future__ import annotations

import os
import stat

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
