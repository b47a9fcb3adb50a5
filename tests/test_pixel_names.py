"""Image features' names are made when read (a (C, H, W) shape, not a string per pixel):
equal to the list they stand for, and kept as a shape through the federation, the run, its
models file and back."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fedlabels as fl
from fedlabels.data.images import pixel_names
from fedlabels.data.pixel_names import PixelNames, names_of_record, names_record


def _listed(shape: tuple[int, int, int]) -> list[str]:
    """The names as a list, written out as fedlabels built them before 2026-11-30."""
    c, h, w = shape
    cells = [f"row{y}_col{x}" for y in range(h) for x in range(w)]
    return cells if c == 1 else [f"ch{k}_{cell}" for k in range(c) for cell in cells]


@pytest.mark.parametrize("shape", [(1, 3, 4), (3, 2, 5), (2, 1, 1)])
def test_pixel_names_equal_the_list_they_stand_for(shape: tuple[int, int, int]) -> None:
    names, listed = pixel_names(shape), _listed(shape)
    assert names == listed and listed == names and list(names) == listed
    assert len(names) == len(listed) and names[:] == listed and names[1:5:2] == listed[1:5:2]
    assert [names[i] for i in range(-len(listed), len(listed))] == listed + listed
    assert all(name in names and names.index(name) == i for i, name in enumerate(listed))
    assert "row0_col0x" not in names and f"ch{shape[0]}_row0_col0" not in names
    assert "row01_col0" not in names and 5 not in names
    with pytest.raises(IndexError):
        names[len(listed)]
    assert names_of_record(names_record(names)) == listed


def test_large_images_names_take_no_memory() -> None:
    # before: a str per pixel, 750,000 of them here (1.7 GB at 3 x 3000 x 3000)
    import pandas  # noqa: F401  (imported by Preprocessing: its memory is not the names')

    from fedlabels.data.lazy_rows import LazyRows
    from fedlabels.data.preprocessing import Preprocessing

    pixels = np.zeros((2, 750_000), dtype=np.uint8)
    tracemalloc.start()
    try:
        names = pixel_names((3, 500, 500))
        rows = LazyRows(pixels, lambda a: a, names=names)
        prep = Preprocessing.of(rows, names, ["a", "b"], None, None)
        record = prep.to_dict()["feature_names"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak  # nothing per name (750,000 names took 73 MB)
    assert record == {"pixels": [3, 500, 500]} and len(prep.feature_names) == 750_000
    huge = PixelNames((3, 3000, 3000))
    assert len(huge) == 27_000_000 and huge[-1] == "ch2_row2999_col2999"
    assert huge.index("ch1_row1500_col7") == 9_000_000 + 1500 * 3000 + 7


def test_data_sha256_is_the_lists_digest() -> None:
    from fedlabels.data.federation import data_sha256

    arrays = {"X": np.arange(12, dtype=np.uint8).reshape(2, 6)}
    for shape in ((1, 2, 3), (3, 1, 2)):
        assert data_sha256(arrays, {"features": pixel_names(shape), "classes": ["a"]}) == \
            data_sha256(arrays, {"features": _listed(shape), "classes": ["a"]})


def test_an_image_runs_models_file_records_the_shape_and_reads_the_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedlabels.results.model_format import read_models_file

    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    for k, name in enumerate(("dark", "light")):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(8):
            arr = np.clip(rng.normal(60 + 120 * k, 10, (4, 6, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(tmp_path / "imgs" / name / f"{i}.png")
    result = fl.run("local", f"imagefolder:{tmp_path / 'imgs'}", model="dt", clients=2,
                    rounds=1, seed=0)
    assert result.feature_names == _listed((3, 4, 6))
    out = tmp_path / "run.json"
    result.save(out)
    payload = read_models_file(out.with_name("run.models.npz"))
    assert payload["feature_names"] == {"pixels": [3, 4, 6]}
    assert payload["preprocessing"]["feature_names"] == {"pixels": [3, 4, 6]}
    loaded = fl.load_run(out)
    assert loaded.feature_names == _listed((3, 4, 6))
    assert loaded.preprocessing is not None
    assert loaded.preprocessing.feature_names == _listed((3, 4, 6))
    np.testing.assert_array_equal(loaded.predict(str(tmp_path / "imgs")),
                                  result.predict(str(tmp_path / "imgs")))
    shown = fl.inspect_models(loaded)  # a tree's splits by pixel name
    assert "ch" in str(shown) and "_row" in str(shown)
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.results.model_format import write_models_file

    payload["feature_names"] = {"pixels": [0, 4, 6]}  # a forged shape: one line
    write_models_file(out.with_name("run.models.npz"), payload)
    with pytest.raises(FedLabelsError, match=r"run\.models\.npz is not a valid fedlabels "
                       r"models file \(a name is not what fedlabels writes\)"):
        fl.load_run(out)
