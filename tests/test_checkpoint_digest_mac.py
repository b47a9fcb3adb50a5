"""A checkpoint's HMAC covers the arrays' SHA-256 digests, those the de-duplication computed
(one pass over the arrays, not two), and a checkpoint written before (formats 2 and 3, the
HMAC over the bytes) still resumes exactly, verified by its rule; every tampering with
either fails the MAC."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fedlabels.core import array_table
from fedlabels.core.array_table import ArrayTable
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs import checkpoint as ckpt_module
from fedlabels.runs.checkpoint import load_checkpoint, write_checkpoint
from test_resume import assert_same_run, fed, interrupt_after, sim  # noqa: F401

KEY = b"k" * 32
ARRAYS = {"a": np.arange(12, dtype=">i4").reshape(3, 4), "b": np.array(2.5),
          "c": np.zeros(0), "d": np.ones((2, 3), bool)[:, ::2],
          "e": np.array(["2026-11-27"], dtype="datetime64[D]")}


def _tag(key: bytes, parts: list[bytes]) -> str:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big") + part)
    return mac.hexdigest()


def _digest_oracle(key: bytes, fmt: str, text: str, arrays: Mapping[str, np.ndarray]) -> str:
    parts = [fmt.encode(), text.encode()]
    for name in sorted(arrays):
        a = arrays[name]
        parts += [name.encode(), a.dtype.str.encode(), repr(a.shape).encode(),
                  hashlib.sha256(a.tobytes()).digest()]
    return _tag(key, parts)


def _bytes_oracle(key: bytes, fmt: str, text: str, arrays: Mapping[str, np.ndarray]) -> str:
    """The rule of formats 2 and 3, as the code before wrote it."""
    parts = [fmt.encode(), text.encode()]
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        parts += [name.encode(), a.dtype.str.encode(), repr(a.shape).encode(), a.tobytes()]
    return _tag(key, parts)


def _entries(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _save(path: Path, entries: Mapping[str, Any]) -> None:
    with open(path, "wb") as fh:
        np.savez(fh, **entries)


def _arrays(entries: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in entries.items() if k not in ("meta", "mac", "key_id")}


def _as_old_format(path: Path, key: bytes) -> None:
    """Rewrite a checkpoint as the code before wrote it: format 2 (one file) or 3 (with a
    journal), its HMAC over the arrays' bytes."""
    entries = _entries(path)
    meta = json.loads(entries["meta"].tobytes().decode())
    meta["format"] = ckpt_module.JOURNALED_3 if "journal" in meta else ckpt_module.FORMAT_2
    text = json.dumps(meta, sort_keys=True)
    entries["meta"] = np.frombuffer(text.encode(), np.uint8)
    entries["mac"] = np.array(_bytes_oracle(key, meta["format"], text, _arrays(entries)))
    _save(path, entries)


def _flip_an_array_byte(path: Path) -> None:
    entries = _entries(path)
    name = max(_arrays(entries), key=lambda n: entries[n].nbytes)
    raw = bytearray(entries[name].tobytes())
    raw[len(raw) // 2] ^= 0x01
    entries[name] = np.frombuffer(bytes(raw), entries[name].dtype).reshape(entries[name].shape)
    _save(path, entries)


def test_the_mac_covers_each_arrays_digest_computed_once(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The MAC is an HMAC over each array's name, dtype, shape and SHA-256 of its bytes;
    the writer takes the digests the de-duplication computed, so the MAC itself reads far
    fewer bytes than the arrays hold (it read them all before)."""
    assert ckpt_module._mac(KEY, "meta", ARRAYS) == _digest_oracle(KEY, ckpt_module.FORMAT,
                                                                   "meta", ARRAYS)
    table = ArrayTable()
    for a in ARRAYS.values():
        table.add(a)
    assert [table.digests[f"a{i}"] for i in range(len(ARRAYS))] == \
        [hashlib.sha256(a.tobytes()).digest() for a in ARRAYS.values()]

    read: list[int] = []  # bytes hashed: by SHA-256 (array_table) and by the HMAC
    real_tag = ckpt_module.tag
    monkeypatch.setattr(ckpt_module, "tag", lambda key, *parts: (
        read.append(sum(len(p) for p in parts)), real_tag(key, *parts))[1])
    monkeypatch.setattr(array_table, "hashlib", SimpleNamespace(sha256=lambda raw: (
        read.append(len(raw)), hashlib.sha256(raw))[1]))
    weights = {c: {"w": np.full(50_000, float(c)), "step": np.array(c)} for c in range(3)}
    path = write_checkpoint(tmp_path / "x.checkpoint.npz", {"rounds": 1}, {}, weights,
                            key=KEY)
    assert 3 * 50_000 * 8 <= sum(read) < 1.1 * 3 * 50_000 * 8  # each array once
    monkeypatch.undo()
    entries = _entries(path)
    text = entries["meta"].tobytes().decode()
    assert str(entries["mac"]) == _digest_oracle(KEY, ckpt_module.FORMAT, text,
                                                 _arrays(entries))
    assert load_checkpoint(path, KEY).clients[2]["w"][0] == 2.0


def test_a_checkpoint_of_either_rule_with_a_changed_array_is_refused(tmp_path: Path) -> None:
    """A changed byte of an array fails the MAC, of a checkpoint of this format and of one
    written before; so does an old format's label on a file MACed by the new rule (and the
    reverse): each rule verifies only its own formats."""
    state = {0: {"w": np.linspace(0, 1, 1000), "v": np.arange(7)}}
    for old in (False, True):
        path = write_checkpoint(tmp_path / f"{old}.checkpoint.npz", {"rounds": 1},
                                {"s": np.ones(3)}, state, key=KEY)
        if old:
            _as_old_format(path, KEY)
        assert load_checkpoint(path, KEY).clients[0]["v"][6] == 6
        _flip_an_array_byte(path)
        with pytest.raises(FedLabelsError, match="changed after it was written") as refused:
            load_checkpoint(path, KEY)
        assert "\n" not in str(refused.value)
    path = write_checkpoint(tmp_path / "relabelled.checkpoint.npz", {"rounds": 1}, {}, state,
                            key=KEY)
    entries = _entries(path)
    meta = json.loads(entries["meta"].tobytes().decode())
    for fmt, rule in ((ckpt_module.FORMAT_2, _digest_oracle),
                      (ckpt_module.FORMAT, _bytes_oracle)):
        text = json.dumps({**meta, "format": fmt}, sort_keys=True)
        entries["meta"] = np.frombuffer(text.encode(), np.uint8)
        entries["mac"] = np.array(rule(KEY, fmt, text, _arrays(entries)))
        _save(path, entries)
        with pytest.raises(FedLabelsError, match="changed after it was written"):
            load_checkpoint(path, KEY)


@pytest.mark.parametrize("method", ["dp-fedct", "fedavg"])
def test_a_checkpoint_written_before_resumes_exactly(method: str, fed: Any,  # noqa: F811
                                                     tmp_path: Path) -> None:
    """A run's checkpoint in format 3 (a journal, the HMAC over the arrays' bytes) resumes to
    the uninterrupted run, and the resumed run goes on in this format."""
    full = sim(method, fed)
    path = tmp_path / "run.checkpoint.npz"
    sim(method, fed, checkpoint=path, on_round=interrupt_after(1))
    _as_old_format(path, ckpt_module.checkpoint_key())
    assert json.loads(_entries(path)["meta"].tobytes().decode())["format"] == \
        ckpt_module.JOURNALED_3
    resumed = sim(method, fed, resume=path)
    assert_same_run(full, resumed, fed.X_test)
    assert json.loads(_entries(path)["meta"].tobytes().decode())["format"] == \
        ckpt_module.JOURNALED
    assert len(load_checkpoint(path).records) == len(full.rounds)
