"""Images from files: ``imagefolder:PATH`` and a ``csv:`` table's image column, generated
PNG/JPEG files as the oracle (their pixels are known), the uint8 cache and its checksum."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.data.images import load_image_folder, parse_size, read_images
from fedlabels.downloads.cache import dataset_dir

CLASSES = ("cat", "dog", "owl")


def make_folder(root, sizes=(9, 14, 20), shape=(12, 10), rgb=True, suffix=".png"):
    """Class k's images are noise around the grey level 60 k + 40 (unequal class sizes)."""
    rng = np.random.default_rng(0)
    pixels = {}
    for k, (name, count) in enumerate(zip(CLASSES, sizes, strict=True)):
        (root / name).mkdir(parents=True)
        for i in range(count):
            dims = (*shape, 3) if rgb else shape
            arr = np.clip(rng.normal(60 * k + 40, 10, size=dims), 0, 255).astype(np.uint8)
            path = root / name / f"{i:03d}{suffix}"
            Image.fromarray(arr).save(path)
            pixels[path] = arr
    return pixels


def test_folder_pixels_labels_and_shape_match_the_files(tmp_path):
    pixels = make_folder(tmp_path / "imgs")
    X, y, classes, shape, _ = load_image_folder(tmp_path / "imgs", None)
    assert classes == list(CLASSES) and shape == (3, 12, 10) and X.dtype == np.uint8
    assert np.bincount(y).tolist() == [9, 14, 20]
    first = pixels[tmp_path / "imgs" / "dog" / "000.png"]  # row 9: the first dog
    np.testing.assert_array_equal(X[9].reshape(3, 12, 10), first.transpose(2, 0, 1))


def test_grey_images_give_one_channel_and_resizing_a_declared_size(tmp_path):
    make_folder(tmp_path / "g", rgb=False, suffix=".jpg")
    X, _, _, shape, _ = load_image_folder(tmp_path / "g", parse_size("8x6"))
    assert shape == (1, 8, 6) and X.shape[1] == 48
    assert parse_size("16") == (16, 16)
    with pytest.raises(FedLabelsError, match="image_size must be HxW"):
        parse_size("16 by 16")


def test_the_cache_is_used_checked_and_rebuilt_when_damaged(tmp_path, monkeypatch):
    import fedlabels.data.images as images

    make_folder(tmp_path / "imgs")
    first = load_image_folder(tmp_path / "imgs", None)[0]
    (cache,) = dataset_dir("imagefolder").glob("*.npz")  # the test's own cache
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    calls = []
    real = images.read_images
    monkeypatch.setattr(images, "read_images", lambda *a, **k: calls.append(1) or real(*a, **k))
    np.testing.assert_array_equal(load_image_folder(tmp_path / "imgs", None)[0], first)
    assert calls == []  # served from the cache
    with np.load(cache) as data:
        parts = {k: data[k] for k in data.files}
    parts["pixels"] = parts["pixels"].copy()
    parts["pixels"][0, 0] ^= 0xFF
    np.savez(cache, **parts)  # damaged: the checksum no longer matches
    np.testing.assert_array_equal(load_image_folder(tmp_path / "imgs", None)[0], first)
    assert calls == [1]


def test_a_cnn_runs_fedct_on_an_image_folder_from_the_command_line(tmp_path):
    make_folder(tmp_path / "imgs", sizes=(30, 36, 42))
    out = tmp_path / "r.json"
    assert main(["run", "--method", "fedct", "--dataset", f"imagefolder:{tmp_path / 'imgs'}",
                 "--model", "cnn(arch=small)", "--clients", "3", "--rounds", "3",
                 "--period", "30", "--image-size", "8x8", "--output", str(out),
                 "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["federation"]["image_shape"] == [3, 8, 8]
    assert data["federation"]["class_names"] == list(CLASSES)
    assert data["final"]["mean_accuracy"] > 0.6  # three well separated grey levels


def test_a_csv_table_with_an_image_path_column(tmp_path):
    pixels = make_folder(tmp_path / "imgs", sizes=(20, 20, 20), rgb=False)
    rows = ["file,label"] + [f"imgs/{p.parent.name}/{p.name},{p.parent.name}"
                             for p in pixels]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    fed = fl.load_federation(f"csv:{tmp_path / 'table.csv'}:label", clients=3,
                             image_column="file", seed=0)
    assert fed.info["image_shape"] == [1, 12, 10] and fed.n_features == 120
    assert float(fed.X_public.max()) <= 1.0  # pixels in [0, 1], not z-scored
    result = fl.run("fedct", fed, model="cnn(arch=small)", rounds=2, period=5, seed=0,
                    progress=False)
    assert result.client_models[0].input_shape == (1, 12, 10)


def test_a_tables_images_are_cached_and_read_again_when_a_file_changes(tmp_path,
                                                                       monkeypatch):
    import os

    import fedlabels.data.images as images

    pixels = make_folder(tmp_path / "imgs", sizes=(6, 6, 6), rgb=False)
    rows = ["file,label"] + [f"imgs/{p.parent.name}/{p.name},{p.parent.name}"
                             for p in pixels]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    name = f"csv:{tmp_path / 'table.csv'}:label"

    def load():
        return fl.load_federation(name, clients=2, image_column="file", seed=0).X_public

    first = load()
    calls = []
    real = images.read_images
    monkeypatch.setattr(images, "read_images", lambda *a, **k: calls.append(1) or real(*a, **k))
    np.testing.assert_array_equal(load(), first)
    assert calls == []  # served from the cache
    fl.load_federation(name, clients=2, image_column="file", image_size="6x5", seed=0)
    entries = sorted(dataset_dir("imagefolder").glob("*.npz"))
    assert len(entries) == 2 and calls == [1]  # one entry per image size
    changed = next(iter(pixels))  # a file rewritten: its size and time change
    Image.fromarray(np.zeros((12, 10), np.uint8)).save(changed)
    os.utime(changed, ns=(1, 1))
    load()
    assert calls == [1, 1]
    # the stale entry of that size is replaced, the other size's kept: still two
    now = sorted(dataset_dir("imagefolder").glob("*.npz"))
    assert len(now) == 2 and len(set(now) & set(entries)) == 1


@pytest.mark.parametrize("case,message", [
    ("sizes", "images differ in size"),
    ("corrupt", "bad.png"),
    ("truncated", "is corrupt or truncated"),
    ("empty", "has no images"),
    ("one_class", "has 1 class folder (cat)"),
])
def test_bad_image_folders_are_one_line_exit_2(tmp_path, capsys, case, message):
    root = tmp_path / "imgs"
    make_folder(root, rgb=False)
    if case == "sizes":
        Image.fromarray(np.zeros((5, 5), np.uint8)).save(root / "cat" / "small.png")
    elif case == "corrupt":
        (root / "dog" / "bad.png").write_bytes(b"not an image at all")
    elif case == "truncated":
        data = (root / "owl" / "000.png").read_bytes()
        (root / "owl" / "000.png").write_bytes(data[: len(data) // 2])
    elif case == "empty":
        (root / "emu").mkdir()
    elif case == "one_class":
        for name in ("dog", "owl"):
            for f in (root / name).iterdir():
                f.unlink()
            (root / name).rmdir()
    code = main(["run", "--dataset", f"imagefolder:{root}", "--model", "cnn",
                 "--clients", "3", "--rounds", "1", "--output", str(tmp_path / "x.json"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    if case == "sizes":  # said as --image-size takes it: 12 rows of 10 pixels are 12x10
        assert "is 12x10" in err and "height x width" in err and "--image-size HxW" in err


def test_image_settings_apply_only_to_image_data(tmp_path, capsys):
    for args, message in [(["--image-size", "8x8"], "image_size applies to an imagefolder"),
                          (["--image-column", "f"], "image_column applies to a csv:")]:
        code = main(["run", "--dataset", "digits", *args, "--output",
                     str(tmp_path / "x.json"), "--no-progress"])
        assert code == 2 and message in capsys.readouterr().err


def test_a_flower_site_brings_its_own_image_folder(tmp_path):
    from fedlabels.engines.flower.site import load_site

    pixels = make_folder(tmp_path / "site", sizes=(4, 6, 3), rgb=False)
    (tmp_path / "site" / "cat").rename(tmp_path / "site" / "dog2")  # an unknown class
    shared = {"X_public": np.zeros((5, 120), np.float32), "X_test": np.zeros((2, 120), np.float32),
              "y_test": np.zeros(2, np.int64), "class_names": np.array(["owl", "dog", "cat"]),
              "feature_names": np.array([f"x{i}" for i in range(120)]),
              "image_shape": np.array([1, 12, 10])}
    np.savez(tmp_path / "shared.npz", **shared)
    config = {"partition-id": 0, "data-path": str(tmp_path / "site"),
              "shared-path": str(tmp_path / "shared.npz")}
    with pytest.raises(FedLabelsError, match=r"class folder\(s\) \['dog2'\]"):
        load_site(config)
    (tmp_path / "site" / "dog2").rename(tmp_path / "site" / "cat")
    site = load_site(config)
    assert np.bincount(site.private.y, minlength=3).tolist() == [3, 6, 4]  # owl, dog, cat
    first_dog = pixels[tmp_path / "site" / "dog" / "000.png"]
    row = int(np.flatnonzero(site.private.y == 1)[0])
    np.testing.assert_allclose(site.private.X[row], first_dog.reshape(-1) / 255.0, rtol=1e-6)


def test_a_flower_sites_grey_folder_joins_a_colour_federation(tmp_path, monkeypatch):
    """A site whose scanner writes grey images, U in colour (or the other way): the site's
    images are converted to U's channels, as the simulator and predict convert them (it
    was refused: 'have 1 channel(s), U's 3')."""
    from fedlabels.engines.flower.site import load_site

    pixels = make_folder(tmp_path / "site", sizes=(2, 3, 1), rgb=False)
    for c in (3, 1):
        shared = {"X_public": np.zeros((5, c * 120), np.float32),
                  "X_test": np.zeros((2, c * 120), np.float32), "y_test": np.zeros(2, np.int64),
                  "class_names": np.array(list(CLASSES)),
                  "feature_names": np.array([f"x{i}" for i in range(c * 120)]),
                  "image_shape": np.array([c, 12, 10])}
        np.savez(tmp_path / f"shared{c}.npz", **shared)
        site = load_site({"partition-id": 0, "data-path": str(tmp_path / "site"),
                          "shared-path": str(tmp_path / f"shared{c}.npz")})
        first_dog = pixels[tmp_path / "site" / "dog" / "000.png"].reshape(-1) / 255.0
        row = int(np.flatnonzero(site.private.y == 1)[0])
        assert site.private.X.shape == (6, c * 120)
        # grey to RGB repeats the grey level in each channel (PIL's convert("RGB"))
        np.testing.assert_allclose(site.private.X[row], np.tile(first_dog, c), rtol=1e-6)
    # a site loads its data on every message: the converted pixels come from the cache
    import fedlabels.data.images as images

    decoded = []
    monkeypatch.setattr(images, "read_images",
                        lambda *a, **k: decoded.append(a) or read_images(*a, **k))
    again = load_site({"partition-id": 0, "data-path": str(tmp_path / "site"),
                       "shared-path": str(tmp_path / "shared3.npz")})
    assert decoded == [] and np.array_equal(again.private.X[:, :120], again.private.X[:, 240:])
    monkeypatch.undo()
    colour = make_folder(tmp_path / "rgb_site", sizes=(2, 3, 1), rgb=True)
    site = load_site({"partition-id": 0, "data-path": str(tmp_path / "rgb_site"),
                      "shared-path": str(tmp_path / "shared1.npz")})
    path = tmp_path / "rgb_site" / "dog" / "000.png"
    grey = np.asarray(Image.fromarray(colour[path]).convert("L"), dtype=np.float32) / 255.0
    np.testing.assert_allclose(site.private.X[2], grey.reshape(-1), rtol=1e-6)


def test_registered_image_datasets_record_their_shape_and_keep_their_scaling():
    fed = fl.load_federation("digits", clients=3, seed=0)
    assert fed.info["image_shape"] == [1, 8, 8]
    # digits stays z-scored by U as before image shapes existed (same results as then)
    assert fed.summary()["scale"] == "public"
    spread = fed.X_public.std(axis=0)
    assert np.allclose(fed.X_public.mean(axis=0)[spread > 0], 0, atol=1e-5)
    pca = fl.load_federation("digits", clients=3, seed=0, public_pca=8)
    assert "image_shape" not in pca.info  # the rows are no longer pixels


def test_a_site_refuses_an_image_shape_that_does_not_fit_u():
    from fedlabels.engines.flower.site import _image_shape

    assert _image_shape({}, 120, "site 0") is None
    assert _image_shape({"image_shape": np.array([3, 4, 10])}, 120, "site 0") == (3, 4, 10)
    with pytest.raises(FedLabelsError, match=r"site 0: .*image_shape \[3, 4, 9\] does not fit "
                                             r"U's 120 features"):
        _image_shape({"image_shape": np.array([3, 4, 9])}, 120, "site 0")


def test_a_long_decoding_says_how_far_it_is_unless_quiet(tmp_path, monkeypatch, capsys):
    """Decoding a large folder printed nothing until the run's first round (minutes for
    thousands of photos); now a line on stderr after each QUIET_SECONDS without one."""
    from fedlabels.core.verbosity import NORMAL, QUIET, progress_asked, set_verbosity
    from fedlabels.data import images

    files = sorted(make_folder(tmp_path / "imgs", sizes=(2, 2, 3)))
    monkeypatch.setattr(images, "QUIET_SECONDS", 0.0)  # every image is "after a while"
    with progress_asked(True):  # fedlabels run, stderr redirected
        read_images(files, None)
    lines = capsys.readouterr().err.strip().splitlines()
    done = [re.fullmatch(r"fedlabels: reading images: (\d) of 7 decoded \(\d+ s\)", line)
            for line in lines]
    assert all(done) and [int(m.group(1)) for m in done if m] == list(range(7))
    set_verbosity(QUIET)  # -q
    try:
        with progress_asked(True):
            read_images(files, None)
    finally:
        set_verbosity(NORMAL)
    with progress_asked(False):  # --no-progress
        read_images(files, None)
    read_images(files, None)  # Python's default, stderr not a terminal: as a run's bar
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(images, "QUIET_SECONDS", 30.0)
    with progress_asked(True):
        read_images(files, None)  # a folder read in less than 30 s says nothing
    assert capsys.readouterr().err == ""


def test_fl_run_passes_its_progress_to_the_decoding(tmp_path, monkeypatch, capsys):
    from fedlabels.data import images

    make_folder(tmp_path / "imgs", sizes=(4, 4, 4))
    monkeypatch.setattr(images, "QUIET_SECONDS", 0.0)
    monkeypatch.setenv("FEDLABELS_CACHE", str(tmp_path / "cache"))
    fl.run("local", f"imagefolder:{tmp_path / 'imgs'}", model="dt", rounds=1,
           progress=True)
    assert "fedlabels: reading images: 11 of 12 decoded" in capsys.readouterr().err


def test_an_image_beside_the_class_folders_is_left_out_with_a_warning(tmp_path):
    from fedlabels.core.errors import FedLabelsWarning
    from fedlabels.data.images import image_folder_files

    pixels = make_folder(tmp_path / "imgs")
    stray = next(iter(pixels.values()))
    Image.fromarray(stray).save(tmp_path / "imgs" / "stray.PNG")
    (tmp_path / "imgs" / ".hidden.png").write_bytes(b"")  # hidden: skipped without a word
    with pytest.warns(FedLabelsWarning, match=r"1 image\(s\) directly in it \(stray.PNG\)"):
        files, labels, classes = image_folder_files(tmp_path / "imgs")
    assert len(files) == len(labels) == 9 + 14 + 20 and classes == list(CLASSES)


def test_an_image_over_pillows_warning_limit_is_named(tmp_path, monkeypatch):
    # Pillow's DecompressionBombWarning names no file ("Image size (100000000 pixels)
    # exceeds limit ..."): in a folder of thousands the user could not tell which
    import warnings

    from fedlabels.core.errors import FedLabelsWarning

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 150)  # warns over 150, refuses over 300
    make_folder(tmp_path / "imgs", sizes=(2, 2, 2))  # 12 x 10: 120 pixels
    big = tmp_path / "imgs" / "dog" / "big.png"
    Image.fromarray(np.zeros((12, 15, 3), np.uint8)).save(big)  # 180 pixels
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_image_folder(tmp_path / "imgs", size=(12, 10))
    said = [str(w.message) for w in caught]
    assert [m for m in said if str(big) in m] == [  # once, though the file is opened twice
        f"image {big} is 12x15 (height x width), 180 pixels, over Pillow's decompression-bomb "
        "limit of 150; it is read, slowly and in much memory: shrink it if it is not meant to "
        "be that large."]
    assert all(issubclass(w.category, FedLabelsWarning) for w in caught), said


def test_building_an_image_federation_fits_the_memory_check(tmp_path, monkeypatch):
    # 120 images at --image-size 3000 (3.2 GB of pixels) passed the check, which allowed 5x
    # the pixels for a 24 GB machine, and the run was killed by the kernel's OOM killer: the
    # build took 10.3x (the shift measure copied the clients' rows, then to float64)
    import tracemalloc

    from fedlabels.data import images, shift

    monkeypatch.setattr(shift, "_BLOCK_ELEMENTS", 1 << 12, raising=False)  # large images
    make_folder(tmp_path / "imgs", sizes=(80, 80, 80))  # enough rows that the pixels dominate
    folder = f"imagefolder:{tmp_path / 'imgs'}"
    fl.load_federation(folder, clients=2, seed=0, image_size=8)  # imports, once
    peaks = {}
    for side in (64, 128):
        tracemalloc.start()
        try:
            fl.load_federation(folder, clients=2, seed=0, image_size=side)
            peaks[side] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    per_pixel_byte = (peaks[128] - peaks[64]) / (240 * 3 * (128**2 - 64**2))
    assert 4 < per_pixel_byte <= images.LOAD_PEAK  # the float32 rows at least


def test_one_file_reached_twice_through_a_link_is_refused(tmp_path, capsys):
    # a link to the cat folder inside dog/ trained every cat image as a dog too, silently
    root = tmp_path / "imgs"
    make_folder(root)
    (root / "dog" / "cats").symlink_to(root / "cat", target_is_directory=True)
    code = main(["run", "--method", "fedct", "--dataset", f"imagefolder:{root}", "--model",
                 "cnn", "--clients", "3", "--rounds", "1", "--no-progress", "--output",
                 str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (f"image folder {root} reaches the file {root / 'cat' / '000.png'} from two class "
            "folders (cat, dog): cat/000.png and dog/cats/000.png (a symbolic link)") in err
    (root / "dog" / "cats").unlink()
    (root / "owl" / "again.png").symlink_to(root / "owl" / "003.png")  # twice in one class
    with pytest.raises(FedLabelsError, match=r"from class folder owl twice: owl/003\.png and "
                                             r"owl/again\.png"):
        load_image_folder(root, size=None)
