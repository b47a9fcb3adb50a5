"""A public set of your own for a run on image files: a folder of images (sub-folders too, no
labels), read at the private images' size through the same reader and cache, its files
deciding the channels (grey or RGB) where none is declared; bad folders are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fedlabels as fl
from conftest import cli_one_line_error as _error
from fedlabels.core.errors import FedLabelsError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def _public_folder(root: Path, n: int = 7, shape: tuple[int, int] = (12, 10),
                   rgb: bool = True) -> list[Path]:
    """``n`` unlabelled PNGs, some in a sub-folder; their paths in the reader's order."""
    rng = np.random.default_rng(1)
    paths = []
    for i in range(n):
        folder = root / "batch2" if i % 2 else root
        folder.mkdir(parents=True, exist_ok=True)
        dims = (*shape, 3) if rgb else shape
        path = folder / f"u{i:02d}.png"
        Image.fromarray(rng.integers(0, 256, size=dims, dtype=np.uint8)).save(path)
        paths.append(path)
    return sorted(paths)


def _expected(paths: list[Path], mode: str) -> np.ndarray:
    """An independent oracle: each file read by Pillow, channels first, in [0, 1]."""
    rows = []
    for p in paths:
        arr = np.asarray(Image.open(p).convert(mode), dtype=np.float32)
        arr = arr[..., None] if arr.ndim == 2 else arr
        rows.append(arr.transpose(2, 0, 1).reshape(-1) / np.float32(255.0))
    return np.stack(rows)


def test_a_public_folder_is_u_and_fedct_runs_on_it(tmp_path: Path) -> None:
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs")
    paths = _public_folder(tmp_path / "pub")
    dataset = f"imagefolder:{tmp_path / 'imgs'}"
    fed = fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"), seed=0)
    np.testing.assert_allclose(fed.X_public, _expected(paths, "RGB"), atol=1e-6)
    assert fed.y_public is None and fed.info["image_shape"] == [3, 12, 10]
    assert sum(len(c) for c in fed.clients) + len(fed.y_test) == 9 + 14 + 20
    result = fl.run("fedct", dataset, public=str(tmp_path / "pub"), clients=3, rounds=2,
                    period=5, model="cnn(arch=small)", seed=0)
    assert result.federation["n_public"] == 7
    assert result.federation["public"]["path"] == str(tmp_path / "pub")
    assert len(result.rounds) == 2


def test_public_images_decide_the_mode_and_take_the_declared_size(tmp_path: Path) -> None:
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs", rgb=False)  # grey private images, RGB U: read RGB
    paths = _public_folder(tmp_path / "pub", shape=(16, 16))
    dataset = f"imagefolder:{tmp_path / 'imgs'}"
    with pytest.raises(FedLabelsError, match=r"u01.png is 16x16 .* the private images are "
                                             r"12x10 and no --image-size"):
        fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"))
    fed = fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"),
                             image_size="8x8")
    assert fed.X_public.shape == (7, 3 * 64) and fed.info["image_shape"] == [3, 8, 8]
    resized = [np.asarray(Image.open(p).resize((8, 8), Image.Resampling.BILINEAR),
                          dtype=np.float32).transpose(2, 0, 1).reshape(-1) / 255 for p in paths]
    np.testing.assert_allclose(fed.X_public, np.stack(resized), atol=1e-6)
    rgb = fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"),
                             image_size="8x8", image_mode="rgb")  # as declared RGB
    np.testing.assert_array_equal(fed.X_test, rgb.X_test)


def test_public_images_are_cached_as_image_folders_are(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import fedlabels.data.images as images
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs")
    _public_folder(tmp_path / "pub")
    dataset = f"imagefolder:{tmp_path / 'imgs'}"
    first = fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"))
    calls = []
    real = images.read_images
    monkeypatch.setattr(images, "read_images",
                        lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    again = fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"))
    assert calls == [] and np.array_equal(first.X_public, again.X_public)


def test_a_tables_image_column_takes_a_public_folder(tmp_path: Path) -> None:
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs")
    rows = sorted((tmp_path / "imgs").glob("*/*.png"))
    (tmp_path / "t.csv").write_text("file,label\n" + "".join(
        f"{p.relative_to(tmp_path)},{p.parent.name}\n" for p in rows))
    paths = _public_folder(tmp_path / "pub")
    fed = fl.load_federation(f"csv:{tmp_path / 't.csv'}:label", clients=2,
                             image_column="file", public=str(tmp_path / "pub"))
    np.testing.assert_allclose(fed.X_public, _expected(paths, "RGB"), atol=1e-6)


def test_bad_public_folders_are_one_line(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs")
    base = ["run", "--method", "fedct", "--dataset", f"imagefolder:{tmp_path / 'imgs'}",
            "--clients", "3", "--rounds", "1", "--model", "mlp",
            "-o", str(tmp_path / "r.json"), "--public"]
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    assert "holds no images" in _error(capsys, [*base, str(tmp_path / "empty")])
    _public_folder(tmp_path / "bad")
    broken = tmp_path / "bad" / "batch2" / "u01.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    assert str(broken) in _error(capsys, [*base, str(tmp_path / "bad")])
    (tmp_path / "one.png").write_bytes((tmp_path / "bad" / "u00.png").read_bytes())
    assert "give a folder of images" in _error(capsys, [*base, str(tmp_path / "one.png")])


def test_a_u_resized_once_is_not_taken_from_the_cache_where_no_size_is_declared(
        tmp_path: Path) -> None:
    """U's cache entry names whether it was resized: U read at a declared 12x10 (the
    private images' size) is cached, and a later run declaring no size still refuses U's
    16x16 files instead of taking the resized pixels from the cache."""
    from test_image_data import make_folder

    make_folder(tmp_path / "imgs")  # 12x10
    _public_folder(tmp_path / "pub", shape=(16, 16))
    dataset = f"imagefolder:{tmp_path / 'imgs'}"
    fed = fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"),
                             image_size="12x10")
    assert fed.info["image_shape"] == [3, 12, 10]
    with pytest.raises(FedLabelsError, match=r"u01.png is 16x16 .* no --image-size"):
        fl.load_federation(dataset, clients=2, public=str(tmp_path / "pub"))
