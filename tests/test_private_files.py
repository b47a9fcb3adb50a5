"""Checkpoints, ledgers and site state: 0600 files in 0700 directories, authenticated.

A checkpoint whose metadata was edited (``rounds_planned``, to resume a refused extension
beyond the budget) or that was written under another user's key is refused in one line; the
files of a Flower site (its ledger, message record and snapshots) are its owner's only.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedlabels.api import load_federation
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import Federation
from fedlabels.engines.flower.loopback import loopback_deployment, server_context
from fedlabels.engines.flower.server_app import run_server
from fedlabels.engines.flower.site_privacy import open_site_ledger
from fedlabels.engines.flower.site_state import site_key
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import METHODS
from fedlabels.runs.checkpoint import load_checkpoint
from fedlabels.runs.config import RunConfig


@pytest.fixture(scope="module")
def fed() -> Federation:
    return load_federation("breast_cancer", clients=3, seed=1, partition="dirichlet:1.0,1.0")


@pytest.fixture(autouse=True)
def own_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    keys = tmp_path / "keys"
    monkeypatch.setenv("FEDLABELS_KEY_DIR", str(keys))
    return keys


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _dp_fedct(fed: Federation, rounds: int, **kw: Any) -> Any:
    return simulate(METHODS["dp-fedct"], fed, as_models("dt"), rounds=rounds, period=4,
                    seed=1, progress=False, options={"epsilon": 1.0, "mechanism": "xor"}, **kw)


def _rewrite_meta(path: Path, change: Any) -> None:
    with np.load(path, allow_pickle=False) as npz:
        entries = {k: npz[k] for k in npz.files}
    meta = json.loads(entries["meta"].tobytes().decode())
    change(meta)
    entries["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **entries)


def test_checkpoint_and_key_are_the_owners_only(fed: Federation, tmp_path: Path,
                                                own_keys: Path) -> None:
    path = tmp_path / "out" / "run.checkpoint.npz"
    _dp_fedct(fed, 2, checkpoint=path)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700  # a directory the checkpoint made
    assert _mode(own_keys / "checkpoint.key") == 0o600 and _mode(own_keys) == 0o700
    assert load_checkpoint(path).rounds_planned == 2


def test_an_edited_rounds_planned_cannot_resume_beyond_the_budget(fed: Federation,
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "run.checkpoint.npz"
    _dp_fedct(fed, 2, checkpoint=path)
    with pytest.raises(FedLabelsError, match="cannot extend"):  # the honest refusal
        _dp_fedct(fed, 6, resume=path)
    _rewrite_meta(path, lambda meta: meta.update(rounds_planned=6))
    with pytest.raises(FedLabelsError, match="changed after it was written") as err:
        _dp_fedct(fed, 6, resume=path)
    assert "\n" not in str(err.value)


def test_a_foreign_checkpoint_is_refused(fed: Federation, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.checkpoint.npz"
    _dp_fedct(fed, 2, checkpoint=path)
    monkeypatch.setenv("FEDLABELS_KEY_DIR", str(tmp_path / "another-user"))
    with pytest.raises(FedLabelsError, match="another key") as err:
        load_checkpoint(path)
    # said once, as a sentence (it was wrapped as "cannot read checkpoint ...: ... run)..")
    assert str(err.value).startswith("refusing checkpoint") and not str(err.value).endswith("..")
    # and how to resume it on another machine: the key, and both files of the checkpoint
    assert "FEDLABELS_KEY_DIR" in str(err.value) and "checkpoint.key" in str(err.value)
    assert "run.checkpoint.npz and run.checkpoint.journal" in str(err.value)
    with pytest.raises(FedLabelsError, match="another key"):
        _dp_fedct(fed, 2, resume=path)


def test_a_key_others_can_read_is_refused(fed: Federation, tmp_path: Path,
                                          own_keys: Path) -> None:
    path = tmp_path / "run.checkpoint.npz"
    _dp_fedct(fed, 1, checkpoint=path)
    (own_keys / "checkpoint.key").chmod(0o644)
    with pytest.raises(FedLabelsError, match="chmod 600"):
        load_checkpoint(path)


def test_a_sites_files_are_its_owners_only_and_its_ledger_cannot_be_forged(
        tmp_path: Path) -> None:
    cfg = RunConfig(method="dp-fedct", dataset="breast_cancer", clients=3, model="dt",
                    rounds=2, seed=0, options={"epsilon": 1.0, "mechanism": "xor"})
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    assert run_server(grid, server_context(prepared.spec)) is not None
    node = grid.contexts[1001].node_config
    private = [p for key in ("ledger-dir", "state-dir") for p in Path(node[key]).rglob("*")]
    files = [p for p in private if p.is_file()]
    assert {p.name for p in files} >= {"ledger.jsonl"} and any(
        p.suffix == ".json" for p in files) and any(p.name.endswith(".npz") for p in files)
    assert all(_mode(p) == 0o600 for p in files), [(p, oct(_mode(p))) for p in files]
    assert all(_mode(p) == 0o700 for p in private if p.is_dir())

    ledger = next(Path(node["ledger-dir"]).glob("*/ledger.jsonl"))
    honest = ledger.read_text().splitlines()
    for forge in ("event", "plan_budget"):  # a cheaper-looking release; a larger budget
        lines = list(honest)
        i = next(i for i, line in enumerate(lines) if f'"{forge}"' in line)
        entry = json.loads(lines[i])
        if forge == "event":
            entry["entry"]["event"]["flip_probability"] = 0.49
        else:
            entry["entry"]["plan_budget"] *= 10
        lines[i] = json.dumps(entry)
        ledger.write_text("\n".join(lines) + "\n")
        with np.load(prepared.client_paths[0]) as data:
            site = open_site_ledger(node, site_key(Path(node["state-key"])), data["X"],
                                    data["y"])
        with pytest.raises(FedLabelsError, match=f"integrity check at entry {i}"):
            site.spent()


@pytest.mark.parametrize("make", ["checkpoint key", "site key"])
def test_a_key_being_made_is_never_read_empty(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              make: str) -> None:
    """Two processes making the key at once (runs started together on a new machine): one
    that reads it while the other is making it gets the whole key, not an empty file (the
    maker's key bytes are drawn, and this second caller reads, at the same moment); both
    end with one key, and no temporary file is left."""
    import secrets as secrets_module

    from fedlabels.core import private_files

    path = tmp_path / "keys" / "the.key"
    get = ((lambda: private_files.private_key(path, "checkpoint key")) if make == "checkpoint key"
           else (lambda: site_key(path)))
    real, inner = secrets_module.token_bytes, []

    def drawn_while_another_reads(n: int) -> bytes:
        if not inner:  # the first maker, mid-way: the other process asks for the key now
            inner.append(None)
            inner.append(get())
        return real(n)

    monkeypatch.setattr(private_files.secrets, "token_bytes", drawn_while_another_reads)
    outer = get()
    assert len(outer) == 32 and inner[1] == outer == path.read_bytes()
    assert sorted(p.name for p in path.parent.iterdir()) == ["the.key"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_key_is_made_where_the_file_system_has_no_hard_links(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedlabels.core import private_files

    def no_links(src: Any, dst: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(private_files.os, "link", no_links)
    path = tmp_path / "the.key"
    key = private_files.private_key(path)
    assert len(key) == 32 and path.read_bytes() == key == private_files.private_key(path)
    assert [p.name for p in tmp_path.iterdir()] == ["the.key"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
