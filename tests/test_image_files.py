"""Image files as users bring them: deep (16-bit) greys, EXIF orientation, hidden and macOS
files, other formats, oversized images, table paths with gaps; and the models of an image
run applied to new images (files, a folder, a table, pixel rows)."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from PIL import Image

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError, FedLabelsWarning
from fedlabels.data.images import format_peak, load_image_folder, read_images


def grey_folder(root, count=30, side=8, levels=(70, 170)):
    """Two classes of grey noise around ``levels``; the pixels by path."""
    rng = np.random.default_rng(1)
    pixels = {}
    for name, level in zip(("dark", "light"), levels, strict=True):
        (root / name).mkdir(parents=True)
        for i in range(count):
            arr = np.clip(rng.normal(level, 12, (side, side)), 0, 255).astype(np.uint8)
            path = root / name / f"{i:02d}.png"
            Image.fromarray(arr).save(path)
            pixels[path] = arr
    return pixels


@pytest.mark.parametrize("mode,rawmode,scale", [("L", "L", 255.0), ("RGB", "RGB", 255.0),
                                                ("1", "1", 255.0), ("I;16", "I;16B", 65535.0),
                                                ("I", "I;16B", 65535.0),
                                                ("I", "I;32S", 2.0**31 - 1), ("F", "F;32F", 1.0)])
def test_format_peak_is_the_formats_full_scale(mode, rawmode, scale):
    assert format_peak(mode, rawmode) == scale


def _twelve_bit_folder(root):
    """12-bit values stored in 16 bits, as X-rays often are (one pixel of 4,095)."""
    values = {"dark": 1000, "light": 3000}
    for name, v in values.items():
        (root / name).mkdir()
        arr = np.full((4, 6), v, dtype=np.uint16)
        arr[0, 0] = 4095 if name == "light" else v
        Image.fromarray(arr).save(root / name / "a.png")
    assert Image.open(root / "dark" / "a.png").mode == "I;16"


def test_declared_peak_scales_twelve_bit_greys_not_clipped(tmp_path):
    _twelve_bit_folder(tmp_path)
    X, _, _, shape, peak = load_image_folder(tmp_path, None, peak=4095.0)
    assert shape == (1, 4, 6) and peak == 4095.0
    assert X[0, 1] == round(1000 * 255 / 4095) and X[1, 1] == round(3000 * 255 / 4095)
    assert X[1, 0] == 255 and len(set(X[0].tolist())) == 1  # not all white, as clipping gave


def test_undeclared_peak_is_the_16_bit_formats_not_the_brightest_pixels(tmp_path):
    # before: 4,095, the full scale of the brightest pixel of every image (test ones too)
    _twelve_bit_folder(tmp_path)
    X, _, _, _, peak = load_image_folder(tmp_path, None)
    assert peak is None
    assert X[0, 1] == round(1000 * 255 / 65535) and X[1, 0] == round(4095 * 255 / 65535)


def test_a_pixel_above_the_declared_peak_is_an_error_naming_the_file(tmp_path):
    _twelve_bit_folder(tmp_path)
    with pytest.raises(FedLabelsError, match=r"light/a\.png has a pixel of 4095, above "
                       r"4000.*--image-peak"):
        load_image_folder(tmp_path, None, peak=4000.0)


def test_new_images_above_a_runs_recorded_peak_say_what_predict_can_do(tmp_path):
    """At predict the peak is the run's (its models file): the message named --image-peak,
    which predict has not, as if it could be declared there."""
    from fedlabels.data.images import new_image_rows

    _twelve_bit_folder(tmp_path)
    spec = {"shape": (1, 4, 6), "peak": 4000.0}
    with pytest.raises(FedLabelsError, match=r"light/a\.png has a pixel of 4095, above 4000.*"
                       r"trained on images scaled by it.*train again"):
        new_image_rows(spec, [str(tmp_path / "light" / "a.png")])


def test_exif_orientation_turns_an_image_upright(tmp_path):
    arr = np.zeros((16, 24), np.uint8)  # 16 high, 24 wide as stored
    arr[:4] = 255
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise: 24 high, 16 wide
    path = tmp_path / "turned.jpg"
    Image.fromarray(arr).save(path, exif=exif, quality=95)
    images = read_images([path], None)
    assert images.shape == (1, 24, 16)
    shown = images.pixels.reshape(24, 16).astype(int)
    assert shown[:, -2:].min() > 200 and shown[:, :8].max() < 40  # the top rows: the right


def test_hidden_files_macos_folders_and_other_formats(tmp_path, capsys):
    pixels = grey_folder(tmp_path / "imgs", count=4)
    dark = tmp_path / "imgs" / "dark"
    (dark / "._00.png").write_bytes(b"AppleDouble resource fork, not an image")
    (dark / ".thumbnails").mkdir()
    Image.fromarray(pixels[dark / "00.png"]).save(dark / ".thumbnails" / "00.png")
    (tmp_path / "imgs" / "__MACOSX" / "dark").mkdir(parents=True)
    (tmp_path / "imgs" / ".cache").mkdir()
    (dark / "notes.txt").write_text("not an image")
    Image.fromarray(pixels[dark / "01.png"]).save(dark / "extra.BMP")
    Image.fromarray(pixels[dark / "02.png"]).save(dark / "extra.tiff")
    with pytest.warns(FedLabelsWarning, match=r"1 file\(s\) .* left out \(1 .txt; the first "
                                              r"dark/notes.txt\)"):  # the hidden ones unsaid
        X, y, classes, _, _ = load_image_folder(tmp_path / "imgs", None)
    assert classes == ["dark", "light"]
    assert np.bincount(y).tolist() == [6, 4]  # four PNGs, a BMP and a TIFF; nothing hidden
    np.testing.assert_array_equal(X[4], pixels[dark / "01.png"].reshape(-1))  # extra.BMP

    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(3):
        Image.fromarray(np.zeros((4, 4), np.uint8)).save(flat / f"{i}.png")
    with pytest.raises(FedLabelsError, match=r"has 0 class folders and 3 images directly in "
                                             r"it; .*holding the images"):
        load_image_folder(flat, None)


def test_linked_folders_are_followed_once_and_a_broken_link_is_named(tmp_path):
    """A symbolic link to a folder of a class's images was skipped (Path.rglob does not
    follow them on Python 3.11), and a broken link to an image without a word."""
    pixels = grey_folder(tmp_path / "imgs", count=4)
    extra = tmp_path / "more_dark"
    extra.mkdir()
    for i in range(3):
        Image.fromarray(pixels[tmp_path / "imgs" / "dark" / f"{i:02d}.png"]).save(
            extra / f"x{i}.png")
    dark = tmp_path / "imgs" / "dark"
    (dark / "linked").symlink_to(extra, target_is_directory=True)
    (dark / "linked_again").symlink_to(extra, target_is_directory=True)  # counted once
    (dark / "loop").symlink_to(dark, target_is_directory=True)  # no endless walk
    _, y, _, _, _ = load_image_folder(tmp_path / "imgs", None)
    assert np.bincount(y).tolist() == [4 + 3, 4]
    (dark / "broken.png").symlink_to(tmp_path / "gone.png")
    with pytest.raises(FedLabelsError, match=r"broken.png is a broken symbolic link"):
        load_image_folder(tmp_path / "imgs", None)


def test_an_image_too_large_to_read_safely_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    grey_folder(tmp_path / "imgs", count=3)
    Image.fromarray(np.zeros((40, 40), np.uint8)).save(tmp_path / "imgs" / "dark" / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # 40 x 40 is over twice that
    code = main(["run", "--dataset", f"imagefolder:{tmp_path / 'imgs'}", "--model", "dt",
                 "--clients", "3", "--output", str(tmp_path / "r.json"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "big.png is too large to read safely" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_image_size_too_large_for_memory_is_one_line_exit_2(tmp_path, capsys,
                                                               monkeypatch):
    """--image-size 100000x100000 ended in numpy's _ArrayMemoryError and a traceback."""
    import fedlabels.data.images as images

    monkeypatch.setattr(images, "_memory_bytes", lambda: (24 * 2**30, "available"))
    grey_folder(tmp_path / "imgs", count=3)
    code = main(["run", "--dataset", f"imagefolder:{tmp_path / 'imgs'}", "--model", "dt",
                 "--clients", "3", "--image-size", "100000x100000", "--output",
                 str(tmp_path / "r.json"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "6 images of 1x100000x100000 need 55.9 GiB as pixels" in err, err
    assert "choose a smaller --image-size" in err and len(err.strip().splitlines()) == 1


def test_the_memory_check_takes_the_available_memory(tmp_path, monkeypatch):
    # it compared with the physical memory: on a machine others share a run passed the
    # check and was killed; it takes MemAvailable where the system says, and names which
    import fedlabels.data.images as images

    grey_folder(tmp_path / "imgs", count=3)  # 6 images
    need = images.LOAD_PEAK * 6 * 600 * 600  # each size below once: a read is cached
    monkeypatch.setattr(images, "_physical_bytes", lambda: 100 * need)
    monkeypatch.setattr(images, "_available_bytes", lambda: need // 2)
    with pytest.raises(FedLabelsError, match=r"GiB available \(MemAvailable\): choose a "):
        images.load_image_folder(tmp_path / "imgs", (600, 600))
    monkeypatch.setattr(images, "_available_bytes", lambda: None)  # not Linux: physical
    images.load_image_folder(tmp_path / "imgs", (600, 601))
    monkeypatch.setattr(images, "_physical_bytes", lambda: need // 2)
    with pytest.raises(FedLabelsError, match=r"GiB in all \(its free memory unknown\)"):
        images.load_image_folder(tmp_path / "imgs", (600, 602))


def test_available_memory_is_read_from_proc_meminfo():
    import fedlabels.data.images as images

    try:
        with open("/proc/meminfo") as meminfo:
            kb = next(int(line.split()[1]) for line in meminfo
                      if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        pytest.skip("no MemAvailable here")
    got = images._available_bytes()
    assert got is not None and abs(got - kb * 1024) < 2**30  # it moves between the reads
    physical = images._physical_bytes()
    assert physical is None or got <= physical


@pytest.mark.parametrize("cell,message", [
    ("", "data row 2 of .*table.csv has no image path in column 'file'"),
    ("dark", r"dark \(data row 2 of .*table.csv, column 'file'\) is a folder"),
    ("dark/../dark/99.png", r"image .*/dark/99.png \(data row 2 .*\) does not exist"),
])
def test_a_tables_bad_image_paths_name_the_row(tmp_path, cell, message):
    grey_folder(tmp_path, count=3)
    rows = ["file,label", "dark/00.png,dark", f"{cell},light", "light/00.png,light"]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(FedLabelsError, match=message):
        fl.load_federation(f"csv:{tmp_path / 'table.csv'}:label", clients=2,
                           image_column="file")


@pytest.mark.parametrize("damage,message", [
    ("garbage", r"cannot be read"),  # no image Pillow knows: its header
    ("half", r"is corrupt or truncated"),  # a PNG cut short: its pixels
])
def test_a_tables_unreadable_image_names_the_row(tmp_path, damage, message):
    # a corrupt file named its path only, unlike an empty cell or a missing file
    grey_folder(tmp_path, count=3)
    bad = tmp_path / "light" / "01.png"
    data = bad.read_bytes()
    bad.write_bytes(b"not an image at all" if damage == "garbage" else data[: len(data) // 2])
    rows = ["file,label", "dark/00.png,dark", "light/00.png,light", "light/01.png,light",
            "dark/01.png,dark"]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    where = r"\(data row 3 of .*table.csv, column 'file'\)"
    with pytest.raises(FedLabelsError, match=rf"^image .*/light/01.png {where} {message} "
                                             r"\(.*\); replace or remove the file.$"):
        fl.load_federation(f"csv:{tmp_path / 'table.csv'}:label", clients=2,
                           image_column="file")


def test_image_size_may_be_a_number_or_a_pair_in_python_and_toml(tmp_path, capsys):
    grey_folder(tmp_path / "imgs", count=12)
    data = f"imagefolder:{tmp_path / 'imgs'}"
    assert fl.run("local", data, model="dt", clients=3, image_size=4,
                  progress=False).config["image_size"] == "4x4"
    result = fl.run("local", data, model="dt", clients=3, image_size=(4, 6), progress=False)
    assert result.federation["image_shape"] == [1, 4, 6]
    with pytest.raises(FedLabelsError, match="image_size must be HxW"):
        fl.run("local", data, model="dt", clients=3, image_size=True, progress=False)
    (tmp_path / "run.toml").write_text(f'dataset = "{data}"\nmodel = "dt"\nclients = 3\n'
                                       'method = "local"\nimage_size = 4\n')
    assert main(["run", "--config", str(tmp_path / "run.toml"), "--output",
                 str(tmp_path / "r.json"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["config"]["image_size"] == "4x4"


def test_a_cnn_runs_models_predict_new_images_from_files_a_folder_a_table_and_pixels(
        tmp_path, capsys):
    pixels = grey_folder(tmp_path / "imgs", count=30)
    out = tmp_path / "out" / "cnn.json"
    assert main(["run", "--method", "fedct", "--dataset", f"imagefolder:{tmp_path / 'imgs'}",
                 "--model", "cnn(arch=small)", "--clients", "3", "--rounds", "2",
                 "--period", "10", "--output", str(out), "--no-progress"]) == 0
    assert (tmp_path / "out" / "cnn.models.npz").is_file()  # a built-in CNN is saved
    assert "not written" not in capsys.readouterr().err
    new = tmp_path / "new"
    new.mkdir()
    paths = sorted(pixels)[::7]  # some of each class
    for k, path in enumerate(paths):
        Image.fromarray(pixels[path]).save(new / f"{k}_{path.parent.name}.png")
    truth = [p.parent.name for p in paths]

    assert main(["predict", str(out), str(new), "-o", str(tmp_path / "p.csv")]) == 0
    import pandas as pd

    table = pd.read_csv(tmp_path / "p.csv")
    assert [p.split("_")[-1][:-4] for p in table["path"]] == truth  # one row per image
    by_folder = table["prediction"].tolist()
    result = fl.load_run(out)
    rows = np.stack([pixels[p].reshape(-1) for p in paths])  # uint8 pixel rows
    # the oracle: each client's model on the rows scaled as the run scaled its own, voted
    votes = np.stack([m.predict(rows.astype(np.float32) / 255) for m in result.client_models])
    codes = [np.bincount(v, minlength=2).argmax() for v in votes.T]
    assert by_folder == [["dark", "light"][c] for c in codes]

    # a table naming the images relative to its own folder
    (new / "list.csv").write_text("path\n" + "\n".join(f"{k}_{p.parent.name}.png"
                                                       for k, p in enumerate(paths)) + "\n")
    assert main(["predict", str(out), str(new / "list.csv"), "-o",
                 str(tmp_path / "q.csv")]) == 0
    assert pd.read_csv(tmp_path / "q.csv")["prediction"].tolist() == by_folder
    files = sorted(new.glob("*.png"), key=lambda f: int(f.name.split("_")[0]))
    # a table reads alike from Python (paths relative to the working directory): its one
    # text column, or its pixel columns; two text columns are one line naming them
    assert result.predict(pd.DataFrame({"path": [str(f) for f in files]})).tolist() == \
        by_folder
    assert result.predict(pd.DataFrame(rows)).tolist() == by_folder
    with pytest.raises(FedLabelsError, match=r"2 text columns \(path, note\) and not one "
                                             r"column of paths"):
        result.predict(pd.DataFrame({"path": [str(f) for f in files], "note": "x"}))
    assert result.predict(rows).tolist() == by_folder
    assert result.predict(rows.reshape(-1, 1, 8, 8)).tolist() == by_folder
    assert result.predict((rows / 255.0).astype(np.float32)).tolist() == by_folder
    assert result.predict([str(f) for f in files]).tolist() == by_folder
    assert result.predict(new).tolist() == result.predict(sorted(new.glob("*.png"))).tolist()
    with pytest.raises(FedLabelsError, match=r"pixel rows from \d+ to \d+: the models take "
                                             r"pixels in \[0, 1\]"):
        result.predict(rows.astype(np.float64))  # 0-255 values as floats: not scaled
    with pytest.raises(FedLabelsError, match=r"images of \(C, H, W\) = \(1, 8, 8\)"):
        result.predict(rows[:, :10])
    small = tmp_path / "small.png"
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(small)
    with pytest.raises(FedLabelsError, match="declared no image_size"):
        result.predict([str(small)])


def test_a_tables_image_run_predicts_a_table_relative_to_its_folder(tmp_path):
    pixels = grey_folder(tmp_path / "data" / "imgs", count=12)
    rows = ["file,label"] + [f"imgs/{p.parent.name}/{p.name},{p.parent.name}" for p in pixels]
    (tmp_path / "data" / "table.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "r.json"
    assert main(["run", "--method", "local", "--dataset",
                 f"csv:{tmp_path / 'data' / 'table.csv'}:label", "--image-column", "file",
                 "--image-size", "6x6", "--model", "dt", "--clients", "3", "--output",
                 str(out), "--no-progress"]) == 0
    assert main(["predict", str(out), str(tmp_path / "data" / "table.csv"), "-o",
                 str(tmp_path / "p.csv")]) == 0
    import pandas as pd

    table = pd.read_csv(tmp_path / "p.csv")
    assert (table["prediction"] == table["label"]).mean() >= 0.9  # a tree on its own data
    # a new image of another size is resized, as the run declared a size
    big = tmp_path / "big.png"
    Image.fromarray(np.full((16, 16), 170, np.uint8)).save(big)
    assert fl.load_run(out).predict([str(big)]).tolist() == ["light"]


def test_predict_takes_the_image_column_of_a_table_with_several_text_columns(tmp_path,
                                                                            capsys):
    """`fedlabels predict` had no --image-column: a table whose image column is not the
    run's and not its one text column could not be predicted at all."""
    import pandas as pd

    pixels = grey_folder(tmp_path / "imgs", count=12)
    rows = ["file,label,site"] + [f"imgs/{p.parent.name}/{p.name},{p.parent.name},s{i % 2}"
                                  for i, p in enumerate(pixels)]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "r.json"
    assert main(["run", "--method", "local", "--dataset",
                 f"csv:{tmp_path / 'table.csv'}:label", "--image-column", "file", "--model",
                 "dt", "--clients", "3", "--output", str(out), "--no-progress"]) == 0
    paths = sorted(pixels)[::5]
    new = tmp_path / "new.csv"  # the images under another name, beside two text columns
    new.write_text("patient,scan,note\n" + "".join(
        f"p{k},imgs/{p.parent.name}/{p.name},seen\n" for k, p in enumerate(paths)))
    capsys.readouterr()
    assert main(["predict", str(out), str(new), "-o", str(tmp_path / "p.csv")]) == 2
    assert "3 text columns (patient, scan, note)" in capsys.readouterr().err
    assert main(["predict", str(out), str(new), "-o", str(tmp_path / "p.csv"),
                 "--image-column", "scan"]) == 0
    table = pd.read_csv(tmp_path / "p.csv")
    assert list(table.columns) == ["patient", "scan", "note", "prediction"]
    # the oracle: each client's model on the rows scaled as the run scaled its own, voted
    result = fl.load_run(out)
    X = np.stack([pixels[p].reshape(-1) for p in paths]).astype(np.float32) / 255
    votes = np.stack([m.predict(X) for m in result.client_models])
    names = result.federation["class_names"]
    assert table["prediction"].tolist() == [names[np.bincount(v, minlength=2).argmax()]
                                            for v in votes.T]
    # the same checks as `run --image-column`: one line, exit 2, naming what is there (run
    # named the table 'TABLE.csv:label', its file with the target's name appended)
    assert main(["run", "--method", "local", "--dataset", f"csv:{tmp_path / 'table.csv'}:label",
                 "--image-column", "scan", "--model", "dt", "--clients", "3", "--output",
                 str(tmp_path / "r2.json"), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fedlabels: error: table {tmp_path / 'table.csv'} has no column 'scan'; its columns "
        "are 'file', 'site'.")
    for args, message in (
            (["--image-column", "scn"], f"{new} has no column 'scn' (did you mean 'scan'?); "
                                        "its columns are 'patient', 'scan', 'note'."),
            (["--image-column", "scan", "--overwrite"], None)):
        code = main(["predict", str(out), str(new), "-o", str(tmp_path / "q.csv"), *args])
        err = capsys.readouterr().err
        if message is None:
            assert code == 0 and err == ""
            continue
        assert code == 2 and err.strip() == f"fedlabels: error: {message}"
    assert main(["predict", str(out), str(tmp_path / "imgs"), "-o", str(tmp_path / "f.csv"),
                 "--image-column", "scan"]) == 2
    assert "image_column applies to a CSV table of image paths" in capsys.readouterr().err
    tabular = tmp_path / "t.json"
    (tmp_path / "t.csv").write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n"
                                                        for i in range(40)))
    assert main(["run", "--method", "local", "--dataset", f"csv:{tmp_path / 't.csv'}:y",
                 "--model", "dt", "--clients", "2", "--output", str(tabular),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["predict", str(tabular), str(tmp_path / "t.csv"), "-o",
                 str(tmp_path / "g.csv"), "--image-column", "a"]) == 2
    err = capsys.readouterr().err
    assert "image_column applies to a run on images" in err and len(err.splitlines()) == 1


def test_your_own_local_networks_run_saves_its_weights_and_warns_it_cannot_be_rebuilt(
        tmp_path):
    from torch import nn

    def make(n_features, n_classes):
        return nn.Sequential(nn.Linear(n_features, n_classes))

    grey_folder(tmp_path / "imgs", count=10)
    result = fl.run("local", f"imagefolder:{tmp_path / 'imgs'}", model=fl.TorchModel(make),
                    clients=3, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = result.save(tmp_path / "r.json")
    assert path.is_file() and (tmp_path / "r.rounds.csv").is_file()
    assert (tmp_path / "r.models.npz").is_file()  # the weights; a local make is no module
    (message,) = [str(w.message) for w in caught if issubclass(w.category, FedLabelsWarning)]
    assert "<locals>.make cannot be rebuilt" in message
    with pytest.raises(FedLabelsError, match=r"<locals>\.make cannot be rebuilt"):
        fl.load_run(path)
    assert fl.load_run(path, models=False).final == result.final


def test_resuming_elsewhere_names_the_directory_a_relative_dataset_needs(tmp_path,
                                                                         monkeypatch):
    grey_folder(tmp_path / "imgs", count=12)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--method", "fedct", "--dataset", "imagefolder:imgs", "--model", "dt",
                 "--clients", "3", "--rounds", "2", "--output", "out/r.json",
                 "--no-progress"]) == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(FedLabelsError, match=f"imagefolder:imgs is a path relative to "
                                             f"{tmp_path}, where it started; resume it from "
                                             "there"):
        fl.resume(tmp_path / "out" / "r.json", rounds=3, progress=False)
    monkeypatch.chdir(tmp_path)
    assert len(fl.resume("out/r.json", rounds=3, progress=False).rounds) == 3


def test_a_tables_images_split_by_its_site_column(tmp_path):
    pixels = grey_folder(tmp_path / "imgs", count=15)
    rows = ["file,label,site"] + [
        f"imgs/{p.parent.name}/{p.name},{p.parent.name},{'north' if i % 3 else 'south'}"
        for i, p in enumerate(pixels)]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    fed = fl.load_federation(f"csv:{tmp_path / 'table.csv'}:label", clients=2,
                             image_column="file", partition="column:site", seed=0)
    assert fed.info["client_sites"] == ["north", "south"]
    assert fed.n_features == 64  # the pixels alone: the site is no feature
    # every private row of a client is an image of its site: about 2 of 3 rows are north's
    sizes = [len(c.y) for c in fed.clients]
    assert sizes[0] > sizes[1] > 0


def test_a_tables_rows_without_a_label_are_named(tmp_path):
    (tmp_path / "t.csv").write_text("a,b,y\n1,2,x\n3,4,\n5,6,z\n7,8,\n")
    with pytest.raises(FedLabelsError, match=r"t.csv has 2 row\(s\) without a label in column "
                                             r"'y' \(data row\(s\) 2, 4\)"):
        fl.load_federation(f"csv:{tmp_path / 't.csv'}:y", clients=2)


def test_image_features_are_named_by_channel_row_and_column(tmp_path, capsys):
    grey_folder(tmp_path / "grey", count=10, side=4)
    fed = fl.load_federation(f"imagefolder:{tmp_path / 'grey'}", clients=2, seed=0)
    assert fed.feature_names[:5] == ["row0_col0", "row0_col1", "row0_col2", "row0_col3",
                                     "row1_col0"] and len(fed.feature_names) == 16
    rgb = tmp_path / "rgb"
    for name in ("a", "b"):
        (rgb / name).mkdir(parents=True)
        for i in range(5):
            Image.fromarray(np.full((2, 3, 3), 40 * i, np.uint8)).save(rgb / name / f"{i}.png")
    names = fl.load_federation(f"imagefolder:{rgb}", clients=2, seed=0).feature_names
    assert names[0] == "ch0_row0_col0" and names[6] == "ch1_row0_col0"
    assert names[-1] == "ch2_row1_col2" and len(names) == 18
    out = tmp_path / "dt.json"
    assert main(["run", "--method", "local", "--dataset", f"imagefolder:{tmp_path / 'grey'}",
                 "--model", "dt", "--clients", "2", "--output", str(out),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    assert "row" in capsys.readouterr().out  # a split on a named pixel, not x5


def test_new_deep_images_are_scaled_as_the_runs_own(tmp_path):
    from fedlabels.data.images import image_input, new_image_rows

    path = tmp_path / "deep.png"
    Image.fromarray(np.full((2, 2), 2048, dtype=np.uint16)).save(path)
    deep_run = image_input((1, 2, 2), None, 4095.0)  # trained on 12-bit images
    np.testing.assert_allclose(new_image_rows(deep_run, [path]), round(2048 * 255 / 4095) / 255)
    undeclared = image_input((1, 2, 2), None, None)  # a deep image by its format's scale
    np.testing.assert_allclose(new_image_rows(undeclared, [path]),
                               round(2048 * 255 / 65535) / 255)
    with pytest.raises(FedLabelsError, match=r"deep\.png has a pixel of 2048, above 255"):
        new_image_rows(image_input((1, 2, 2), None, 255.0), [path])  # clipped before


@pytest.mark.parametrize("count", [3, 30])
def test_a_table_of_image_paths_without_image_column_says_to_give_it(tmp_path, capsys,
                                                                     count):
    # 60 paths were refused as "an identifier?" with the advice to drop the column; 6 were
    # one-hot encoded, a feature per file name, and trained on without a word
    grey_folder(tmp_path, count=count)
    rows = ["file,label"] + [f"{name}/{i:02d}.PNG,{name}" for name in ("dark", "light")
                             for i in range(count)]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    code = main(["run", "--method", "fedct", "--dataset", f"csv:{tmp_path / 'table.csv'}:label",
                 "--clients", "3", "--rounds", "1", "--period", "2", "--no-progress",
                 "--output", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "column 'file' holds image paths (e.g. 'dark/00.PNG')" in err
    assert "give --image-column file (Python: image_column='file')" in err
    with pytest.raises(FedLabelsError, match="image_column='file'"):
        fl.load_federation(f"csv:{tmp_path / 'table.csv'}:label", clients=3)


def test_a_client_count_the_method_refuses_is_refused_before_any_data_loads(tmp_path, capsys,
                                                                            monkeypatch):
    """fedlabels run --clients 2 on an image folder decoded every image (and warned about
    them) before FedCT's majority vote refused 2 clients: the method's client count under
    its options is checked before any data loads, for every data source, on the command
    line and in fl.run; a regression FedCT (a median, no vote) still takes 2 clients."""
    import fedlabels as fl
    import fedlabels.runs.federation as federation
    from fedlabels.cli import main
    from fedlabels.methods.registry import get_method
    from fedlabels.runs.config import RunConfig

    loaded: list[str] = []

    def no_loading(dataset: str, **kwargs: object) -> None:
        loaded.append(dataset)
        raise AssertionError(f"{dataset} was loaded")

    monkeypatch.setattr(federation, "load_federation", no_loading)
    for dataset in (f"imagefolder:{tmp_path}", f"csv:{tmp_path / 't.csv'}:y", "breast_cancer"):
        for method, clients, says in (("fedct", "2", "needs at least 3 clients"),
                                      ("pate", "1", "needs at least 2 teachers"),
                                      ("dp-fedct --epsilon 8", "2", "at least 3 clients")):
            assert main(["run", "--method", *method.split(), "--dataset", dataset,
                         "--clients", clients, "-o", str(tmp_path / "r.json")]) == 2
            err = capsys.readouterr().err
            assert says in err and err.count("\n") == 1
        with pytest.raises(fl.FedLabelsError, match="needs at least 3 clients"):
            fl.run("fedct", dataset, clients=2)
    assert loaded == []
    federation.check_before_data(RunConfig(method="fedct", dataset="diabetes", clients=2),
                                 get_method("fedct"),
                                 get_method("fedct").parse_options({}))
    with pytest.raises(fl.FedLabelsError, match="needs at least 3 clients"):
        federation.check_before_data(RunConfig(method="fedct", dataset="breast_cancer",
                                               clients=2), get_method("fedct"),
                                     get_method("fedct").parse_options({}))


@pytest.mark.parametrize("name,value", [("features", "age"), ("drop", "age"),
                                        ("features", "file")])
def test_features_or_drop_beside_an_image_column_is_refused_not_ignored(tmp_path, capsys,
                                                                        monkeypatch, name,
                                                                        value):
    """--features age beside --image-column ran on the pixels alone without a word (the
    images are the only features), as did --drop: refused in one line, before any data
    loads, on the command line and in Python."""
    import fedlabels.runs.federation as federation

    pixels = grey_folder(tmp_path / "imgs", count=6)
    rows = ["file,label,age"] + [f"imgs/{p.parent.name}/{p.name},{p.parent.name},{40 + i}"
                                 for i, p in enumerate(pixels)]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    data = f"csv:{tmp_path / 'table.csv'}:label"
    says = (f"{name} chooses a table's feature columns, but with image_column 'file' the "
            f"images are the only features")
    with pytest.raises(FedLabelsError, match=says):
        fl.load_federation(data, clients=3, image_column="file", **{name: value})
    monkeypatch.setattr(federation, "load_federation", lambda *a, **k: pytest.fail("loaded"))
    code = main(["run", "--method", "fedct", "--dataset", data, "--image-column", "file",
                 f"--{name}", value, "--clients", "3", "--rounds", "1", "--no-progress",
                 "--output", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(FedLabelsError, match=says):
        fl.run("fedct", data, clients=3, image_column="file", **{name: value})


def test_files_that_are_no_image_it_reads_are_said_not_left_out_unseen(tmp_path):
    """A class folder of PNGs and DICOM scans trained on the PNGs alone without a word; so
    did a public folder, and predict on a folder predicted its PNGs alone."""
    grey_folder(tmp_path / "imgs", count=6)
    for name in ("dark/s1.dcm", "dark/s2.dcm", "light/README"):
        (tmp_path / "imgs" / name).write_bytes(b"DICM")
    (tmp_path / "imgs" / "labels.csv").write_text("not in a class folder\n")
    (tmp_path / "imgs" / "light" / ".DS_Store").write_bytes(b"hidden")
    data = f"imagefolder:{tmp_path / 'imgs'}"
    says = (r"image folder .*imgs: 3 file\(s\) that are no image fedlabels reads are left out "
            r"\(2 .dcm, 1 no suffix; the first dark/s1.dcm\); it reads .png, .*a DICOM .dcm")
    with pytest.warns(FedLabelsWarning, match=says) as caught:
        fed = fl.load_federation(data, clients=3, seed=0)
    assert len([w for w in caught if "left out" in str(w.message)]) == 1
    assert fed.n_classes == 2 and len(fed.y_test) + sum(len(c.y) for c in fed.clients) \
        + len(fed.X_public) == 12  # the PNGs alone
    pub = tmp_path / "pub"
    pub.mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(pub / "u.png")
    (pub / "u2.dcm").write_bytes(b"DICM")
    with pytest.warns(FedLabelsWarning, match=r"image folder .*pub: 1 file\(s\) .*\(1 .dcm; "
                                              r"the first u2.dcm\)"):
        fl.load_federation(data, clients=3, seed=0, public=str(pub))
    result = fl.run("local", data, model="dt", clients=3, progress=False)
    with pytest.warns(FedLabelsWarning, match=r"dark: 2 file\(s\) .*\(2 .dcm; the first "
                                              r"s1.dcm\)"):
        assert len(result.predict(str(tmp_path / "imgs" / "dark"))) == 6


def test_a_class_folder_of_dicom_files_alone_says_what_it_holds(tmp_path, capsys):
    """It said "has no images ...; add some", as of an empty folder, though it held scans."""
    grey_folder(tmp_path / "imgs", count=3)
    (tmp_path / "imgs" / "effusion").mkdir()
    for name in ("a.dcm", "b.dcm"):
        (tmp_path / "imgs" / "effusion" / name).write_bytes(b"DICM")
    code = main(["run", "--dataset", f"imagefolder:{tmp_path / 'imgs'}", "--no-progress",
                 "--output", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(r"class folder .*effusion has no images \(.png, .*\) but 2 other "
                     r"file\(s\) \(2 .dcm\); convert those that are images to one of them or "
                     r"remove the folder\.$", err.strip()), err
