"""The image mode and deep-image scale every party receives depend on no test image's
pixels: the scale is declared (``image_peak``) or the format's, the mode declared
(``image_mode``) or the files' formats'; and a Flower site reads its own folder as the
simulator reads the same files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError, FedLabelsWarning
from fedlabels.data.images import load_image_folder


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def _pattern(i: int, on: int, dtype: type) -> np.ndarray:
    """A 4x4 image whose pixels spell ``i`` in bits (``on`` where a bit is set): every image
    its own row, whatever the scale."""
    bits = np.array([(i >> j) & 1 for j in range(16)], dtype=np.int64).reshape(4, 4)
    return (bits * on).astype(dtype)


def _mixed_folder(root: Path, count: int = 12) -> None:
    """Two classes, each image alternately a 12-bit value in a 16-bit PNG and an 8-bit
    grey PNG (pixel patterns that tell every image apart)."""
    for k, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(count):
            code = 1 + k * count + i
            arr = _pattern(code, 4000, np.uint16) if i % 2 else _pattern(code, 200, np.uint8)
            Image.fromarray(arr).save(root / name / f"{i:02d}.png")


def _test_files(root: Path, fed: fl.Federation, **read: object) -> list[Path]:
    """The files whose rows are the federation's test rows (found by their pixels)."""
    files = sorted(root.glob("*/*.png"))
    rows = load_image_folder(root, None, **read).pixels  # type: ignore[arg-type]
    test = {r.tobytes() for r in np.rint(fed.X_test * 255).astype(np.uint8)}
    return [f for f, r in zip(files, rows, strict=True) if r.tobytes() in test]


def _others(fed: fl.Federation) -> list[np.ndarray]:
    """What parties other than the evaluator hold: U and every client's rows."""
    return [fed.X_public, *(c.X for c in fed.clients)]


def _load(root: Path, **kwargs: object) -> fl.Federation:
    return fl.load_federation(f"imagefolder:{root}", clients=3, seed=0, **kwargs)  # type: ignore[arg-type]


def test_a_brighter_test_pixel_moves_no_other_partys_pixels(tmp_path: Path) -> None:
    # before: the scale was the full scale of the brightest pixel of every image, so one
    # test pixel of 4,096 made it 8,191 and every client's and U's deep pixels half as bright
    root = tmp_path / "imgs"
    _mixed_folder(root)
    before = _load(root)
    deep = [f for f in _test_files(root, before) if Image.open(f).mode == "I;16"]
    assert deep, "the split puts some 16-bit image in the test set"
    arr = np.asarray(Image.open(deep[0])).astype(np.uint16)
    arr[arr == arr.max()] = 40000
    Image.fromarray(arr).save(deep[0])
    after = _load(root)
    for mine, theirs in zip(_others(before), _others(after), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert after.preprocessing is not None and after.preprocessing.image is not None
    assert after.preprocessing.image["peak"] is None
    assert not np.array_equal(before.X_test, after.X_test)  # the test image did change


def test_one_rgb_test_image_changes_nothing_else_when_the_mode_is_declared(
        tmp_path: Path) -> None:
    root = tmp_path / "imgs"
    _mixed_folder(root)
    before = _load(root, image_mode="grey")
    grey = [f for f in _test_files(root, before, mode="L") if Image.open(f).mode == "L"]
    arr = np.asarray(Image.open(grey[0]))
    Image.fromarray(np.stack([arr, arr // 2, arr // 3], axis=-1)).save(grey[0])  # colour
    after = _load(root, image_mode="grey")
    assert before.info["image_shape"] == after.info["image_shape"] == [1, 4, 4]
    for mine, theirs in zip(_others(before), _others(after), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    # undeclared, U's files decide (before 2026-11-30 every file's: this test image made
    # every party's images RGB); the colour test image is read grey, said once
    with pytest.warns(FedLabelsWarning, match=r"^1 image file\(s\) of the clients or the "
                      r"test set are stored in colour.*--image-mode rgb"):
        undeclared = _load(root)
    assert undeclared.info["image_shape"] == [1, 4, 4]
    for mine, theirs in zip(_others(after), _others(undeclared), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(after.X_test, undeclared.X_test)
    assert _load(root, image_mode="rgb").info["image_shape"] == [3, 4, 4]


def test_image_mode_and_peak_are_refused_where_no_images_are_read() -> None:
    for key, value in (("image_mode", "grey"), ("image_peak", 4095)):
        with pytest.raises(FedLabelsError, match=f"^{key} applies to an imagefolder:"):
            fl.load_federation("iris", **{key: value})  # type: ignore[arg-type]
        with pytest.raises(FedLabelsError, match=f"^{key} applies to an imagefolder:"):
            fl.RunConfig(dataset="iris", **{key: value})  # type: ignore[arg-type]
    with pytest.raises(FedLabelsError, match="image_mode must be one of grey, rgb, got 'rgba'"):
        fl.load_federation("imagefolder:x", image_mode="rgba")
    with pytest.raises(FedLabelsError, match="image_peak must be a positive number"):
        fl.load_federation("imagefolder:x", image_peak=0)


@pytest.mark.parametrize("declared", [[], ["--image-peak", "4095"]])
def test_a_sites_mixed_folder_reads_as_the_simulators(tmp_path: Path,
                                                      declared: list[str]) -> None:
    """8-bit and 16-bit PNGs, grey and RGB: a site's own folder (shared.npz's channels and
    peak) gives the rows the coordinator's reading of the same files gives."""
    from fedlabels.engines.flower.site import load_site

    root = tmp_path / "fed"
    _mixed_folder(root)
    for colour in sorted(root.glob("b/*.png"))[::2]:  # 8-bit RGB files, some of them in U:
        arr = np.asarray(Image.open(colour))           # undeclared, every image is RGB
        Image.fromarray(np.stack([arr, arr, arr // 2], axis=-1)).save(colour)
    assert main(["deploy", "prepare", "--dataset", f"imagefolder:{root}", "--clients", "3",
                 "--model", "dt", "--rounds", "1", *declared,
                 "--out-dir", str(tmp_path / "dep")]) == 0
    shared = np.load(tmp_path / "dep" / "shared.npz")
    assert shared["image_shape"].tolist() == [3, 4, 4]
    assert ("image_peak" in shared) == bool(declared)
    site_root = tmp_path / "site"
    shutil.copytree(root / "b", site_root / "b")
    site = load_site({"partition-id": 0, "data-path": str(site_root),
                      "shared-path": str(tmp_path / "dep" / "shared.npz")})
    peak = 4095.0 if declared else None
    own = load_image_folder(root, None, mode="RGB", peak=peak)
    rows = own.pixels[own.labels == own.classes.index("b")].astype(np.float32) / 255.0
    np.testing.assert_array_equal(site.private.X, rows)  # the same files, in one order


def test_float_images_scale_by_one_unless_a_peak_is_declared(tmp_path: Path) -> None:
    from fedlabels.data.images import read_images

    unit, wide = tmp_path / "unit.tif", tmp_path / "wide.tif"
    Image.fromarray(np.full((2, 2), 0.5, dtype=np.float32)).save(unit)
    Image.fromarray(np.full((2, 2), 3.0, dtype=np.float32)).save(wide)
    assert read_images([unit], None).pixels.tolist() == [[128] * 4]
    with pytest.raises(FedLabelsError, match=r"wide\.tif has a pixel of 3, above 1, its "
                       r"format's full scale.*--image-peak"):
        read_images([unit, wide], None)
    assert read_images([wide], None, peak=4.0).pixels.tolist() == [[round(3 * 255 / 4)] * 4]
