"""No pickle is loaded from a file fedlabels is handed: a checkpoint's arrays are read before its
key and HMAC are checked, a Flower site's data file and an image cache entry come from disk,
so allowing pickle there would run the code of a file anyone could put in their place. An
object array is refused (or the entry read again), and the code it carries never runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import RunsCode
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.checkpoint import FORMAT, load_checkpoint


@pytest.mark.parametrize("member", ["meta", "w0"])
def test_a_checkpoint_carrying_a_pickle_is_refused_and_its_code_never_runs(
        tmp_path: Path, member: str) -> None:
    marker = tmp_path / "ran"
    evil = np.array([RunsCode(marker)], dtype=object)
    meta = np.frombuffer(json.dumps({"format": FORMAT}).encode(), dtype=np.uint8)
    members = {"meta": meta, "key_id": np.array("x"), "mac": np.array("y")}
    members[member] = evil
    path = tmp_path / "run.checkpoint.npz"
    np.savez(path, **members)  # type: ignore[arg-type]
    with pytest.raises(FedLabelsError, match=r"^cannot read checkpoint .*Object arrays"):
        load_checkpoint(path, key=b"k" * 32)
    assert not marker.exists()


def test_a_sites_file_and_an_image_cache_entry_carrying_a_pickle_never_run_it(
        tmp_path: Path) -> None:
    """The other readers of .npz files a user or a disk hands fedlabels: a Flower site's
    data file (a one-line refusal) and an image cache entry (read again from the images)."""
    from fedlabels.data.images import _read_cache
    from fedlabels.engines.flower.site import _load_npz

    marker = tmp_path / "ran"
    path = tmp_path / "site.npz"
    np.savez(path, X=np.array([RunsCode(marker)], dtype=object), y=np.zeros(1))
    with pytest.raises(FedLabelsError, match=r"^site 0: cannot read .* as an \.npz file"):
        _load_npz(path, "site 0", ("X", "y"))
    entry = tmp_path / "cache.npz"
    np.savez(entry, pixels=np.array([RunsCode(marker)], dtype=object), shape=np.array([1, 1, 1]),
             sha256=np.array("x"), peak=np.array(np.nan), colour=np.zeros(1),
             negative=np.zeros(1))
    assert _read_cache(entry) is None
    assert not marker.exists()
