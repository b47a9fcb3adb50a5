"""How deep images are scaled where nothing is declared, and what a models file of an
earlier version meant by its recorded peak."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fedlabels as fl
from fedlabels.core.errors import FedLabelsError
from fedlabels.data.images import new_image_rows


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def _flat(path: Path, value: int, dtype: type, mode: str) -> Path:
    """A 4 x 6 image of ``value`` in ``dtype``, which Pillow stores as ``mode``."""
    Image.fromarray(np.full((4, 6), value, dtype=dtype)).save(path)
    assert Image.open(path).mode == mode
    return path


def _sixteen_bit(path: Path, value: int) -> Path:
    return _flat(path, value, np.uint16, "I;16")


def test_an_earlier_models_files_peak_of_255_reads_as_undeclared(tmp_path: Path) -> None:
    # before: the 255 an 8-bit run recorded (the value that became 255, as fitted before
    # 2026-11-30) read as a declared --image-peak 255, so a 16-bit image was refused
    new = _sixteen_bit(tmp_path / "new.png", 3000)
    by_format = np.full((1, 24), round(3000 * 255 / 65535) / 255, dtype=np.float32)
    old = {"shape": [1, 4, 6], "size": None, "peak": 255.0, "column": None}
    np.testing.assert_array_equal(new_image_rows(old, [new]), by_format)
    # an earlier deep run's fitted scale scaled its images: new ones alike
    fitted = {**old, "peak": 4095.0}
    np.testing.assert_allclose(new_image_rows(fitted, [new]), round(3000 * 255 / 4095) / 255)
    declared = {**old, "peak_from": "image_peak"}  # today's record of a declared 255
    with pytest.raises(FedLabelsError, match=r"pixel of 3000, above 255"):
        new_image_rows(declared, [new])


def test_a_run_predicts_from_a_models_file_in_the_earlier_layout(tmp_path: Path) -> None:
    from fedlabels.results.model_format import read_models_file, write_models_file

    root = tmp_path / "imgs"
    rng = np.random.default_rng(0)
    for k, name in enumerate(("dark", "light")):
        (root / name).mkdir(parents=True)
        for i in range(8):
            arr = np.clip(rng.normal(60 + 120 * k, 10, (4, 6)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(root / name / f"{i}.png")
    result = fl.run("local", f"imagefolder:{root}", model="dt", clients=2, rounds=1, seed=0)
    out = tmp_path / "run.json"
    result.save(out)
    models = out.with_name("run.models.npz")
    payload = read_models_file(models)
    image = payload["preprocessing"]["image"]
    payload["preprocessing"]["image"] = {"shape": image["shape"], "size": image["size"],
                                         "peak": 255.0, "column": image["column"]}
    write_models_file(models, payload)  # as fedlabels wrote it before 2026-11-30
    assert "peak_from" not in json.dumps(read_models_file(models)["preprocessing"])
    loaded = fl.load_run(out)
    deep = _sixteen_bit(tmp_path / "deep.png", 60000)  # light: 233 of 255
    eight = tmp_path / "eight.png"
    Image.fromarray(np.full((4, 6), 233, dtype=np.uint8)).save(eight)
    assert list(loaded.predict([deep])) == list(loaded.predict([eight]))


def test_a_pixel_above_the_scale_is_said_as_such_not_as_a_corrupt_file(tmp_path: Path) -> None:
    from fedlabels.data.images import read_images

    # before: "image X is corrupt or truncated (image X has a pixel of 3000, ...)"
    new = _sixteen_bit(tmp_path / "new.png", 3000)
    with pytest.raises(FedLabelsError) as caught:
        read_images([new], None, peak=2000.0)
    assert str(caught.value).startswith(f"image {new} has a pixel of 3000, above 2000, the "
                                        "declared image_peak")
    assert "corrupt" not in str(caught.value)


def _int32(path: Path, value: int) -> Path:
    return _flat(path, value, np.int32, "I")


def test_undeclared_32_bit_integer_images_are_refused_naming_the_file(tmp_path: Path) -> None:
    from fedlabels.data.images import read_images

    # before: scaled by 2**31 - 1, every pixel below 8,421,505 read 0 (black), without a word
    wide = _int32(tmp_path / "wide.tif", 3000)
    with pytest.raises(FedLabelsError, match=r"^image \S*wide\.tif holds 32-bit integers, "
                       r"whose format's full scale \(2,147,483,647\) would read its pixels "
                       r"black; declare .* with --image-peak \(image_peak\)\.$"):
        read_images([wide], None)
    assert read_images([wide], None, peak=4095.0).pixels.tolist() == [
        [round(3000 * 255 / 4095)] * 24]
    spec = {"shape": [1, 4, 6], "size": None, "peak": None, "peak_from": "format"}
    with pytest.raises(FedLabelsError, match=r"32-bit integers.*the run declared no "
                       r"--image-peak.*train again"):
        new_image_rows(spec, [wide])  # predict cannot declare it: the run can


def test_negative_deep_pixels_are_read_as_zero_and_said_once(tmp_path: Path) -> None:
    import warnings

    from fedlabels.core.errors import FedLabelsWarning

    # before: clipped to 0 without a word
    root = tmp_path / "imgs"
    for k, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(6):
            arr = np.full((4, 6), 0.25 + 0.5 * k, dtype=np.float32)
            if name == "b" and i < 2:
                arr[0, :3] = -0.5  # two images hold negative pixels
            Image.fromarray(arr).save(root / name / f"{i}.tif")
    first = root / "b" / "0.tif"
    said = (rf"^2 deep image\(s\) hold pixels below 0, the first {first}: they are read as "
            r"0 \(black\)")
    for _ in range(2):  # read, then from the cache: said each time
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fl.load_federation(f"imagefolder:{root}", clients=2, seed=0)
        lines = [str(w.message) for w in caught if issubclass(w.category, FedLabelsWarning)]
        assert len(lines) == 1 and re.match(said, lines[0]), lines
    spec = {"shape": [1, 4, 6], "size": None, "peak": None, "peak_from": "format"}
    with pytest.warns(FedLabelsWarning, match=r"^1 deep image\(s\) hold pixels below 0"):
        rows = new_image_rows(spec, [first])
    expected = np.rint(np.clip(np.asarray(Image.open(first)), 0, None) * 255) / 255
    np.testing.assert_allclose(rows.reshape(4, 6), expected, atol=1e-7)


def test_a_pixel_at_the_declared_peak_is_255_and_one_above_it_is_refused(tmp_path: Path) -> None:
    """The declared peak is the value that becomes 255: a pixel equal to it reads as 1.0,
    one a unit above it is an error naming the file (no clipping unseen)."""
    spec = {"shape": [1, 4, 6], "size": None, "peak": 4095.0, "peak_from": "image_peak",
            "column": None}
    at = _sixteen_bit(tmp_path / "at.png", 4095)
    np.testing.assert_array_equal(new_image_rows(spec, [at]), np.ones((1, 24), np.float32))
    above = _sixteen_bit(tmp_path / "above.png", 4096)
    with pytest.raises(FedLabelsError, match=r"above.png has a pixel of 4096, above 4095"):
        new_image_rows(spec, [above])
