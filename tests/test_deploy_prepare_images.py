"""`fedlabels deploy prepare` on a table whose image column holds the pictures: U is pixels
in [0, 1] (no standardisation to ship), as `fedlabels run` reads the same table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedlabels.api import load_federation
from fedlabels.cli import main


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def test_prepare_reads_a_tables_image_column(tmp_path: Path) -> None:
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs", sizes=(12, 15, 18))
    rows = sorted((tmp_path / "imgs").glob("*/*.png"))
    (tmp_path / "t.csv").write_text("file,label\n" + "".join(
        f"{p.relative_to(tmp_path)},{p.parent.name}\n" for p in rows))
    dataset = f"csv:{tmp_path / 't.csv'}:label"
    # before: the table was read again without its image column to standardise U, and the
    # path column was refused as an identifier, after the sites' files were written
    code = main(["deploy", "prepare", "--dataset", dataset, "--image-column", "file",
                 "--clients", "3", "--model", "cnn(arch=small)", "--rounds", "1",
                 "--out-dir", str(tmp_path / "dep")])
    assert code == 0
    shared = np.load(tmp_path / "dep" / "shared.npz")
    assert "scale_mean" not in shared and shared["image_shape"].tolist() == [3, 12, 10]
    fed = load_federation(dataset, clients=3, image_column="file", seed=0)
    assert np.array_equal(shared["X_public"], fed.X_public)  # the simulator's U, unscaled
    assert shared["X_public"].min() >= 0.0 and shared["X_public"].max() <= 1.0


def _deep_folder(root: Path, values: dict[str, int], count: int = 10) -> None:
    """16-bit grey 6x6 PNGs, one class folder per ``values`` key, each image that value
    (the first pixel of each image a little darker, so no two images are equal)."""
    from PIL import Image

    for name, value in values.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = np.full((6, 6), value, dtype=np.uint16)
            pixels[0, 0] = value - i
            Image.fromarray(pixels).save(root / name / f"{i}.png")


def test_a_sites_deep_images_are_scaled_as_the_federations(tmp_path: Path) -> None:
    """A site's own 16-bit images were scaled by their own brightest pixel (values up to
    3,000: 12 bits, so 4,095 became 255), while U's were scaled by the federation's (up to
    40,000: 65,535 became 255): the same value read 16 times brighter at the site."""
    from fedlabels.data.images import load_image_folder
    from fedlabels.engines.flower.site import load_site

    _deep_folder(tmp_path / "fed", {"a": 40000, "b": 3000})
    assert main(["deploy", "prepare", "--dataset", f"imagefolder:{tmp_path / 'fed'}",
                 "--clients", "3", "--model", "dt", "--rounds", "1",
                 "--out-dir", str(tmp_path / "dep")]) == 0
    _deep_folder(tmp_path / "site", {"b": 3000})
    site = load_site({"partition-id": 0, "data-path": str(tmp_path / "site"),
                      "shared-path": str(tmp_path / "dep" / "shared.npz")})
    # the oracle: the federation's own reading of the same images (the 16-bit format's
    # full scale, 65,535, as the site's; no peak declared, so none in shared.npz)
    fed = load_image_folder(tmp_path / "fed", None)
    assert fed.peak is None and "image_peak" not in np.load(tmp_path / "dep" / "shared.npz")
    own = fed.pixels[fed.labels == fed.classes.index("b")].astype(np.float32) / 255.0
    np.testing.assert_array_equal(np.sort(site.private.X, axis=0), np.sort(own, axis=0))


def test_shared_npz_holds_an_images_pixel_names_as_their_shape(tmp_path: Path) -> None:
    """shared.npz held a string per pixel (27 million for 3 x 3000 x 3000 images); it holds
    their (C, H, W), read back as the federation's names; a file written the old way (the
    strings) still reads."""
    from fedlabels.data.pixel_names import PixelNames
    from fedlabels.engines.flower.site import shared_feature_names

    _deep_folder(tmp_path / "fed", {"a": 40000, "b": 3000})
    assert main(["deploy", "prepare", "--dataset", f"imagefolder:{tmp_path / 'fed'}",
                 "--clients", "3", "--model", "dt", "--rounds", "1",
                 "--out-dir", str(tmp_path / "dep")]) == 0
    shared = dict(np.load(tmp_path / "dep" / "shared.npz"))
    assert "feature_names" not in shared and shared["pixel_names"].tolist() == [1, 6, 6]
    names = shared_feature_names(shared)
    want = [f"row{y}_col{x}" for y in range(6) for x in range(6)]
    assert isinstance(names, PixelNames) and list(names) == want
    old = {k: v for k, v in shared.items() if k != "pixel_names"}
    old["feature_names"] = np.array(want, dtype=str)  # as prepare wrote it before
    assert shared_feature_names(old) == want
