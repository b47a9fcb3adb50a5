"""Undeclared, the channels every party is told (grey or RGB) are decided by U's files alone:
a colour file of a client or the test set is read grey beside a grey U (said once), one of U
makes every image RGB; either way the rows equal those of the same channels declared."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fedlabels as fl
from fedlabels.core.errors import FedLabelsWarning
from fedlabels.data.images import load_image_folder


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def _grey_folder(root: Path, count: int = 10) -> list[Path]:
    """Two classes of 4x4 grey PNGs, every image its own pattern; the files, sorted."""
    from test_image_fit import _pattern

    for k, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(_pattern(1 + k * count + i, 200, np.uint8)).save(
                root / name / f"{i:02d}.png")
    return sorted(root.glob("*/*.png"))


def _files_of(rows: np.ndarray, files: list[Path], root: Path) -> list[Path]:
    """The files whose grey rows are ``rows`` (found by their pixels)."""
    grey = load_image_folder(root, None, mode="L").pixels
    held = {r.tobytes() for r in np.rint(rows * 255).astype(np.uint8)}
    return [f for f, r in zip(files, grey, strict=True) if r.tobytes() in held]


def _colour(path: Path) -> None:
    arr = np.asarray(Image.open(path))
    Image.fromarray(np.stack([arr, arr // 2, arr // 3], axis=-1)).save(path)


def _load(dataset: str, **kwargs: object) -> fl.Federation:
    return fl.load_federation(dataset, clients=3, seed=0, **kwargs)  # type: ignore[arg-type]


def _same(a: fl.Federation, b: fl.Federation) -> None:
    for mine, theirs in zip([a.X_public, a.X_test, *(c.X for c in a.clients)],
                            [b.X_public, b.X_test, *(c.X for c in b.clients)], strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert a.feature_names == b.feature_names and a.info["image_shape"] == b.info["image_shape"]


def test_a_colour_file_of_u_makes_every_image_rgb_without_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "imgs"
    files = _grey_folder(root)
    dataset = f"imagefolder:{root}"
    _colour(_files_of(_load(dataset).X_public, files, root)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FedLabelsWarning)
        fed = _load(dataset)
    assert fed.info["image_shape"] == [3, 4, 4]
    assert fed.preprocessing is not None and fed.preprocessing.image is not None
    assert fed.preprocessing.image["shape"] == [3, 4, 4]
    _same(fed, _load(dataset, image_mode="rgb"))


def test_a_clients_colour_file_is_read_grey_beside_a_grey_u(tmp_path: Path) -> None:
    # before: one colour file anywhere made every party's images RGB
    root = tmp_path / "imgs"
    files = _grey_folder(root)
    dataset = f"imagefolder:{root}"
    before = _load(dataset)
    mine = _files_of(before.clients[0].X, files, root)
    for path in mine[:2]:
        _colour(path)
    with pytest.warns(FedLabelsWarning, match=r"^2 image file\(s\) of the clients or the test "
                      r"set are stored in colour, but every file of U is grey: they are read "
                      r"grey.*declare --image-mode rgb \(image_mode\)"):
        fed = _load(dataset)
    assert fed.info["image_shape"] == [1, 4, 4]
    assert fed.preprocessing is not None and fed.preprocessing.image is not None
    assert fed.preprocessing.image["shape"] == [1, 4, 4]
    _same(fed, _load(dataset, image_mode="grey"))
    np.testing.assert_array_equal(fed.X_public, before.X_public)


def test_a_tables_image_column_takes_us_channels_too(tmp_path: Path) -> None:
    root = tmp_path / "imgs"
    files = _grey_folder(root)
    (tmp_path / "t.csv").write_text("file,label\n" + "".join(
        f"{p.relative_to(tmp_path)},{p.parent.name}\n" for p in files))
    dataset = f"csv:{tmp_path / 't.csv'}:label"
    _colour(_files_of(_load(dataset, image_column="file").X_test, files, root)[0])
    with pytest.warns(FedLabelsWarning, match=r"^1 image file\(s\) of the clients or the test"):
        fed = _load(dataset, image_column="file")
    assert fed.info["image_shape"] == [1, 4, 4]
    _same(fed, _load(dataset, image_column="file", image_mode="grey"))


def test_a_sites_colour_files_read_grey_are_said(tmp_path: Path) -> None:
    """A Flower site reads its folder in shared.npz's channels (U's): its colour files
    beside a grey U are read grey, said once with their count."""
    import shutil

    from fedlabels.cli import main
    from fedlabels.engines.flower.site import load_site

    root = tmp_path / "fed"
    _grey_folder(root)
    assert main(["deploy", "prepare", "--dataset", f"imagefolder:{root}", "--clients", "3",
                 "--model", "dt", "--rounds", "1", "--out-dir", str(tmp_path / "dep")]) == 0
    assert np.load(tmp_path / "dep" / "shared.npz")["image_shape"].tolist() == [1, 4, 4]
    site_root = tmp_path / "site"
    shutil.copytree(root / "b", site_root / "b")
    for path in sorted((site_root / "b").glob("*.png"))[:3]:
        _colour(path)
    with pytest.warns(FedLabelsWarning, match=r"3 image file\(s\) of \S+ are stored in colour, "
                      r"but the federation's images are grey \(shared\.npz's image_shape"):
        site = load_site({"partition-id": 0, "data-path": str(site_root),
                          "shared-path": str(tmp_path / "dep" / "shared.npz")})
    grey = load_image_folder(site_root, None, min_classes=1, mode="L").pixels
    np.testing.assert_array_equal(site.private.X, grey.astype(np.float32) / 255)
