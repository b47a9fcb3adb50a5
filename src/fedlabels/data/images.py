"""Images from files: ``imagefolder:PATH`` (one sub-folder per class) and a ``csv:`` table's
column of image paths (``image_column``).

PNG and JPEG files are read through Pillow, converted to grey (``L``) when every image is
grey, else to RGB, and resized to ``image_size`` (``HxW``) when one is declared; without it
every image must already have one size. Pixels are kept as uint8 rows of C·H·W values (the
federation converts the rows it takes to float32 in [0, 1]) and the dataset records its
(C, H, W), so CNN learners see (N, C, H, W). The pixels of a folder, or of a table's image
column, are cached in the fedlabels cache (``imagefolder/<key>.npz``, owner-readable only),
keyed by the files' names (a table's: their resolved paths, in the table's order), sizes and
modification times and the image size, with a SHA-256 of the pixels that is checked on
every load (a cache that fails it is rebuilt).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError

SUFFIXES = (".png", ".jpg", ".jpeg")
_GREY = ("1", "L", "LA", "I", "I;16", "F")
_CACHE_FORMAT = "fedlabels.imagefolder/1"


def parse_size(text: str | None) -> tuple[int, int] | None:
    """``"32x48"`` -> (32, 48) (height, width); ``"32"`` -> (32, 32); None -> None."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*", str(text))
    if not match or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
        raise FedLabelsError(f"image_size must be HxW (e.g. 32x32) or one side S, got "
                             f"{text!r}.")
    h = int(match.group(1))
    return h, int(match.group(2) or h)


def check_image_settings(dataset: str, image_size: str | None, image_column: str | None,
                         text_column: str | None) -> None:
    """``image_size`` applies to image data, ``image_column`` to a ``csv:`` table."""
    parse_size(image_size)
    is_folder = dataset.startswith("imagefolder:")
    if image_column is not None:
        if not dataset.startswith("csv:"):
            raise FedLabelsError("image_column applies to a csv:PATH:TARGET table only; an "
                                 "imagefolder: dataset has its images in class folders.")
        if text_column is not None:
            raise FedLabelsError("give text_column or image_column, not both.")
    elif image_size is not None and not is_folder:
        raise FedLabelsError("image_size applies to an imagefolder: dataset or a csv: table "
                             "with image_column; remove it.")


def image_folder_files(root: Path, min_classes: int = 2
                       ) -> tuple[list[Path], np.ndarray, list[str]]:
    """The image files under ``root/CLASS/``, their class indices and the class names (a
    dataset needs two classes at least; a federated site's own folder may hold one)."""
    if not root.is_dir():
        raise FedLabelsError(f"image folder {root} does not exist or is not a directory.")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if len(classes) < min_classes:
        raise FedLabelsError(f"image folder {root} has {len(classes)} class folder"
                             f"{'s' if len(classes) != 1 else ''}"
                             f"{' (' + classes[0] + ')' if classes else ''}; it needs one "
                             f"sub-folder per class, at least {min_classes}.")
    files: list[Path] = []
    labels: list[int] = []
    for k, name in enumerate(classes):
        found = sorted(p for p in (root / name).rglob("*")
                       if p.is_file() and p.suffix.lower() in SUFFIXES)
        if not found:
            raise FedLabelsError(f"class folder {root / name} has no images "
                                 f"({', '.join(SUFFIXES)}); add some or remove the folder.")
        files += found
        labels += [k] * len(found)
    return files, np.asarray(labels, dtype=np.int64), classes


def read_images(files: list[Path], size: tuple[int, int] | None
                ) -> tuple[np.ndarray, tuple[int, int, int]]:
    """uint8 rows (N, C·H·W) and (C, H, W); grey if every image is, else RGB."""
    from PIL import Image, UnidentifiedImageError

    def opened(path: Path) -> Any:
        try:
            return Image.open(path)
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
            raise FedLabelsError(f"cannot read image {path}: {exc}; replace or remove the "
                                 "file.") from None

    modes: list[str] = []
    sizes: dict[tuple[int, int], Path] = {}
    for path in files:  # headers only: modes and sizes
        with opened(path) as img:
            modes.append(img.mode)
            sizes.setdefault(img.size, path)
    if size is None and len(sizes) > 1:
        (s1, f1), (s2, f2) = list(sizes.items())[:2]
        raise FedLabelsError(f"images differ in size ({f1} is {s1[0]}x{s1[1]}, {f2} is "
                             f"{s2[0]}x{s2[1]}, width x height); declare one size with "
                             "--image-size HxW (image_size) to resize them.")
    mode = "L" if all(m in _GREY for m in modes) else "RGB"
    w, h = next(iter(sizes)) if size is None else (size[1], size[0])
    channels = 1 if mode == "L" else 3
    out = np.empty((len(files), channels * h * w), dtype=np.uint8)
    for i, path in enumerate(files):
        with opened(path) as img:
            try:
                img.load()
                pixels = img.convert(mode)
                if pixels.size != (w, h):
                    pixels = pixels.resize((w, h), Image.Resampling.BILINEAR)
            except (OSError, SyntaxError, ValueError) as exc:
                raise FedLabelsError(f"image {path} is corrupt or truncated ({exc}); replace "
                                     "or remove the file.") from None
        arr = np.asarray(pixels, dtype=np.uint8).reshape(h, w, channels)
        out[i] = arr.transpose(2, 0, 1).reshape(-1)  # channels first: (C, H, W)
    return out, (channels, h, w)


def _cache_key(root: Path, files: list[Path], size: tuple[int, int] | None) -> str:
    digest = hashlib.sha256(f"{_CACHE_FORMAT}|{root.resolve()}|{size}".encode())
    for path in files:
        stat = path.stat()
        digest.update(f"|{path.relative_to(root)}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def _read_cache(path: Path) -> tuple[np.ndarray, tuple[int, int, int]] | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            pixels, shape, check = data["pixels"], data["shape"], str(data["sha256"])
    except (OSError, KeyError, ValueError):
        return None
    if hashlib.sha256(pixels.tobytes()).hexdigest() != check:
        return None  # damaged: rebuilt from the images
    c, h, w = (int(s) for s in shape)
    return pixels, (c, h, w)


def _write_cache(path: Path, pixels: np.ndarray, shape: tuple[int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, pixels=pixels, shape=np.asarray(shape, dtype=np.int64),
                 sha256=np.asarray(hashlib.sha256(pixels.tobytes()).hexdigest()))
    os.replace(tmp, path)


def _cached_images(files: list[Path], size: tuple[int, int] | None, key: str
                   ) -> tuple[np.ndarray, tuple[int, int, int]]:
    """``read_images(files, size)``, from the cache entry ``key`` where it holds them."""
    from fedlabels.downloads.cache import dataset_dir

    cache = dataset_dir("imagefolder") / f"{key}.npz"
    cached = _read_cache(cache) if cache.is_file() else None
    if cached is not None and len(cached[0]) == len(files):
        return cached
    pixels, shape = read_images(files, size)
    with contextlib.suppress(OSError):  # a read-only cache: the images are read next time
        _write_cache(cache, pixels, shape)
    return pixels, shape


def load_image_folder(root: str | Path, size: tuple[int, int] | None, min_classes: int = 2
                      ) -> tuple[np.ndarray, np.ndarray, list[str], tuple[int, int, int]]:
    """Pixels (uint8 rows), labels, class names and (C, H, W) of an image folder, cached."""
    root = Path(root).expanduser()
    files, labels, classes = image_folder_files(root, min_classes)
    pixels, shape = _cached_images(files, size, _cache_key(root, files, size))
    return pixels, labels, classes, shape


def _paths_key(files: list[Path], size: tuple[int, int] | None) -> str:
    """A table's images: their resolved paths, sizes and modification times, in order."""
    digest = hashlib.sha256(f"{_CACHE_FORMAT}|paths|{size}".encode())
    for path in files:
        stat = path.stat()
        digest.update(f"|{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def unit_float32(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels -> float32 in [0, 1]."""
    out = pixels.astype(np.float32)
    out /= np.float32(255.0)
    return out


def image_column_pixels(info: Any, raw: Any, column: str, image_size: str | None
                        ) -> tuple[np.ndarray, tuple[int, int, int]]:
    """The images a table's ``column`` names (paths relative to the table's folder): uint8
    rows and (C, H, W)."""
    if info.target is None or not info.name.startswith("csv:"):
        raise FedLabelsError("image_column applies to a csv:PATH:TARGET table only.")
    frame = raw.X
    if column not in frame.columns:
        shown = ", ".join(repr(str(c)) for c in list(frame.columns)[:20])
        raise FedLabelsError(f"table {info.name[len('csv:'):]} has no column {column!r}; its "
                             f"columns are {shown}.")
    table = Path(info.name[len("csv:"):].rpartition(":")[0]).expanduser()
    files = []
    for value in frame[column].tolist():
        path = Path(str(value)).expanduser()
        path = path if path.is_absolute() else table.parent / path
        if not path.is_file():
            raise FedLabelsError(f"image {path} named in column {column!r} of {table} does not "
                                 "exist; paths are relative to the table's folder.")
        files.append(path)
    size = parse_size(image_size)
    return _cached_images(files, size, _paths_key(files, size))
