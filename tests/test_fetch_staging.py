"""A fetch killed mid-way (SIGKILL, a power cut) ran no cleanup and left its staging
directory, with the download in it, in the cache for good; the next fetch removes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.downloads.cache import dataset_dir
from fedlabels.downloads.fetch import FASHION_MNIST, fetch_deb_dataset


def test_a_fetch_removes_what_a_killed_fetch_left(tmp_path: Path) -> None:
    parent = dataset_dir("fashion_mnist").parent
    parent.mkdir(parents=True, exist_ok=True)
    killed = parent / ".fashion_mnist-k1ll3d_x"  # tempfile.mkdtemp's name for a staging
    (killed / "unpacked").mkdir(parents=True)
    (killed / "dataset-fashion-mnist_0.deb").write_bytes(b"\0" * 4096)
    others = [parent / ".fashion_mnist_extra-abcdefgh", parent / ".fashion_mnist-notmine"]
    for other in others:  # another entry's staging, and a name mkdtemp does not make
        other.mkdir()
    with pytest.raises(FedLabelsError, match=r"missing\.deb does not exist"):
        fetch_deb_dataset("fashion_mnist", FASHION_MNIST, from_deb=tmp_path / "missing.deb",
                          log=lambda _: None)
    assert not killed.exists()
    assert all(other.is_dir() for other in others)
    assert not dataset_dir("fashion_mnist").exists()
