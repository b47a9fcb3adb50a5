"""A public set of your own for a registered array dataset: Fashion-MNIST (unnamed uint8
pixel rows) takes a folder of 28x28 images or a CSV of its columns x0..x783 holding 0-255
values, both converted as its own rows are; digits (a table of named pixel columns) takes a
CSV of its columns. Copy counting, the SHA-256, fits on U and resume hold for them."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import fedlabels as fl
from conftest import cli_one_line_error as _error
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))


def _write_idx(path: Path, array: np.ndarray, header: int) -> None:
    with gzip.open(path, "wb") as fh:
        fh.write(bytes(header) + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def _fake_fashion() -> tuple[np.ndarray, np.ndarray]:
    """A tiny Fashion-MNIST cache (300 training images, 60 test) read by the real loader;
    its training and test pixels."""
    from fedlabels.downloads.cache import dataset_dir
    from fedlabels.downloads.fetch import FASHION_MNIST

    rng = np.random.default_rng(0)
    root = dataset_dir("fashion_mnist")
    root.mkdir(parents=True)
    train = rng.integers(0, 256, (300, 784), dtype=np.uint8)
    test = rng.integers(0, 256, (60, 784), dtype=np.uint8)
    _write_idx(root / "train-images-idx3-ubyte.gz", train, 16)
    _write_idx(root / "train-labels-idx1-ubyte.gz", np.arange(300) % 10, 8)
    _write_idx(root / "t10k-images-idx3-ubyte.gz", test, 16)
    _write_idx(root / "t10k-labels-idx1-ubyte.gz", np.arange(60) % 10, 8)
    (root / FASHION_MNIST.marker).write_text("{}")
    return train, test


def _as_pngs(pixels: np.ndarray, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, row in enumerate(pixels):
        Image.fromarray(row.reshape(28, 28)).save(folder / f"u{i:03d}.png")


def _as_csv(pixels: np.ndarray, path: Path, **kwargs: object) -> None:
    frame = pd.DataFrame(pixels, columns=[f"x{i}" for i in range(pixels.shape[1])])
    frame.to_csv(path, **{"index": False, **kwargs})


@pytest.mark.filterwarnings("ignore::fedlabels.RunCaveatWarning")
def test_fashion_mnist_takes_a_folder_of_images_or_a_csv_of_its_pixels(
        tmp_path: Path) -> None:
    _fake_fashion()
    U = np.random.default_rng(1).integers(0, 256, (20, 784), dtype=np.uint8)
    _as_pngs(U, tmp_path / "pub")
    _as_csv(U, tmp_path / "pub.csv")
    # an independent oracle: the stored pixels scaled to [0, 1] as float32, as the paper does
    want = U.astype(np.float32) / np.float32(255.0)
    feds = {p: fl.load_federation("fashion_mnist", clients=3, private=300,
                                  public=str(tmp_path / p), seed=0)
            for p in ("pub", "pub.csv")}
    for path, fed in feds.items():
        assert fed.X_public.dtype == np.float32 and np.array_equal(fed.X_public, want)
        record = fed.info["public"]
        assert record["path"] == str(tmp_path / path) and record["n_public"] == 20
        assert record["sha256"] == hashlib.sha256(want.tobytes()).hexdigest()
        assert record["copies_of_labelled_rows"] == 0 and fed.y_public is None
        assert sum(len(c) for c in fed.clients) == 300 and len(fed.y_test) == 60
        assert fed.info["image_shape"] == [1, 28, 28]
    result = fl.run("fedct", "fashion_mnist", public=str(tmp_path / "pub"), clients=3,
                    private=300, rounds=1, period=2, model="dt", seed=0)
    assert result.federation["public"]["n_public"] == 20


def test_copies_of_fashion_rows_in_u_are_counted(tmp_path: Path) -> None:
    train, test = _fake_fashion()
    U = np.concatenate([np.random.default_rng(1).integers(0, 256, (10, 784), dtype=np.uint8),
                        train[[3, 100, 299]], test[[0, 59]]])
    _as_pngs(U, tmp_path / "pub")
    with pytest.warns(fl.FedLabelsWarning, match="holds 5 row"):
        fed = fl.load_federation("fashion_mnist", clients=3, private=300,
                                 public=str(tmp_path / "pub"))
    assert fed.info["public"]["copies_of_labelled_rows"] == 5


def test_public_pca_is_fitted_on_a_given_fashion_u(tmp_path: Path) -> None:
    _fake_fashion()
    U = np.random.default_rng(1).integers(0, 256, (30, 784), dtype=np.uint8)
    _as_csv(U, tmp_path / "pub.csv")
    fed = fl.load_federation("fashion_mnist", clients=3, private=300,
                             public=str(tmp_path / "pub.csv"), public_pca=4)
    np.testing.assert_allclose(fed.X_public.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(fed.X_public.std(axis=0, ddof=1), 1.0, atol=1e-4)


def test_bad_fashion_public_sets_are_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _fake_fashion()
    U = np.random.default_rng(1).integers(0, 256, (6, 784), dtype=np.uint8)
    base = ["run", "--method", "fedct", "--dataset", "fashion_mnist", "--clients", "3",
            "--private", "300", "--rounds", "1", "-o", str(tmp_path / "r.json"), "--public"]
    _as_pngs(U, tmp_path / "pub")
    Image.fromarray(U[0].reshape(28, 28)).resize((32, 32)).save(tmp_path / "pub" / "big.png")
    err = _error(capsys, [*base, str(tmp_path / "pub")])
    assert "big.png is 32x32" in err and "28x28 grey images" in err
    _as_csv(U[:, :700], tmp_path / "short.csv")
    err = _error(capsys, [*base, str(tmp_path / "short.csv")])
    assert "has 700 column(s)" in err and "784 columns x0 ... x783" in err
    _as_csv(U.astype(np.float32) / 255, tmp_path / "unit.csv")  # scaled: not what it stores
    assert "stores 0-255 integers" in _error(capsys, [*base, str(tmp_path / "unit.csv")])
    labelled = pd.DataFrame(U, columns=[f"x{i}" for i in range(784)]).assign(label=1)
    labelled.to_csv(tmp_path / "labelled.csv", index=False)
    assert "has 'label'" in _error(capsys, [*base, str(tmp_path / "labelled.csv")])
    holes = pd.DataFrame(U, columns=[f"x{i}" for i in range(784)]).astype(float)
    holes.iloc[2, 5] = np.nan
    holes.to_csv(tmp_path / "holes.csv", index=False)
    assert "data row(s) 3; column(s) 'x5'" in _error(capsys, [*base, str(tmp_path / "holes.csv")])


def test_a_pandas_index_column_in_a_fashion_csv_is_dropped(tmp_path: Path) -> None:
    _fake_fashion()
    U = np.random.default_rng(1).integers(0, 256, (6, 784), dtype=np.uint8)
    _as_csv(U, tmp_path / "pub.csv", index=True)
    with pytest.warns(fl.FedLabelsWarning, match="dropped column"):
        fed = fl.load_federation("fashion_mnist", clients=3, private=300,
                                 public=str(tmp_path / "pub.csv"))
    assert np.array_equal(fed.X_public, U.astype(np.float32) / np.float32(255.0))


def test_resume_refuses_a_changed_public_image_folder(tmp_path: Path) -> None:
    _fake_fashion()
    U = np.random.default_rng(1).integers(0, 256, (8, 784), dtype=np.uint8)
    _as_pngs(U, tmp_path / "pub")
    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", "fashion_mnist", "--public",
                 str(tmp_path / "pub"), "--clients", "3", "--private", "300", "--model", "dt",
                 "--rounds", "1", "-o", str(out), "-q"]) == 0
    changed = U.copy()
    changed[0, 0] ^= 0xFF  # one pixel of one image: same size and files, another U
    _as_pngs(changed, tmp_path / "pub")
    with pytest.raises(FedLabelsError, match="the data changed since the checkpointed run"):
        fl.resume(out, rounds=2)
    _as_pngs(U, tmp_path / "pub")
    assert fl.resume(out, rounds=2).final["round"] == 2


def test_digits_takes_a_csv_of_its_pixel_columns(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """digits' rows are a table of named pixel columns (pixel_0_0 ... pixel_7_7, 0-16):
    U is a CSV of them, z-scored by its own statistics; a folder is refused in one line."""
    import sklearn.datasets

    rng = np.random.default_rng(2)
    U = pd.DataFrame(rng.integers(0, 17, (40, 64)).astype(float),
                     columns=sklearn.datasets.load_digits(as_frame=True).data.columns)
    U.to_csv(tmp_path / "pub.csv", index=False)
    fed = fl.load_federation("digits", clients=3, public=str(tmp_path / "pub.csv"), seed=0)
    raw = U.to_numpy()
    std = raw.std(axis=0)
    want = (raw - raw.mean(axis=0)) / np.where(std > 0, std, 1.0)
    np.testing.assert_allclose(fed.X_public, want, atol=1e-5)
    assert fed.info["public"]["sha256"] == hashlib.sha256(fed.X_public.tobytes()).hexdigest()
    assert fed.info["public"]["n_public"] == 40
    (tmp_path / "folder").mkdir()
    err = _error(capsys, ["run", "--method", "fedct", "--dataset", "digits", "--public",
                          str(tmp_path / "folder"), "--rounds", "1", "-o",
                          str(tmp_path / "r.json")])
    assert "give a CSV file" in err


def test_a_registered_datasets_default_private_size_gives_way_to_a_given_u(
        tmp_path: Path) -> None:
    """breast_cancer's default split (|U| 370, 85 private, 114 test) draws U beside 85
    private rows; with a U of one's own every non-test row goes to the clients, as the docs
    say (before: 85, the other 370 rows unused), and private still takes fewer."""
    import sklearn.datasets

    frame = sklearn.datasets.load_breast_cancer(as_frame=True).data
    U = frame.iloc[:40] * 1.01  # near the data, no copies
    U.to_csv(tmp_path / "pub.csv", index=False)
    fed = fl.load_federation("breast_cancer", clients=3, public=str(tmp_path / "pub.csv"))
    assert len(fed.y_test) == 114 and sum(len(c) for c in fed.clients) == 569 - 114
    fed = fl.load_federation("breast_cancer", clients=3, private=60,
                             public=str(tmp_path / "pub.csv"))
    assert sum(len(c) for c in fed.clients) == 60


def test_deploy_prepare_ships_a_given_fashion_u_as_the_simulator_holds_it(
        tmp_path: Path) -> None:
    """`fedlabels deploy prepare` (no processes): shared.npz carries the folder's images as
    U, as float32 pixels / 255, the SHA-256 the federation records, and no truth file."""
    from fedlabels.engines.flower.prepare import prepare_run
    from fedlabels.runs.config import RunConfig

    _fake_fashion()
    U = np.random.default_rng(1).integers(0, 256, (12, 784), dtype=np.uint8)
    _as_pngs(U, tmp_path / "pub")
    cfg = RunConfig(method="fedct", dataset="fashion_mnist", public=str(tmp_path / "pub"),
                    clients=3, private=300, model="dt", rounds=1)
    prepared = prepare_run(cfg, tmp_path / "run")
    with np.load(prepared.shared_path) as shared:
        shipped = shared["X_public"]
    assert np.array_equal(shipped, U.astype(np.float32) / np.float32(255.0))
    record = fl.load_federation("fashion_mnist", clients=3, private=300,
                                public=str(tmp_path / "pub")).info["public"]
    assert record["sha256"] == hashlib.sha256(shipped.tobytes()).hexdigest()
    assert not prepared.truth_path.exists()
