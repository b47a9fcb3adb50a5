"""Images from files: ``imagefolder:PATH`` (one sub-folder per class) and a ``csv:`` table's
column of image paths (``image_column``).

Image files (PNG, JPEG, BMP, GIF, WebP, TIFF) are read through Pillow, turned upright by
their EXIF orientation, converted to the declared ``image_mode`` (``grey`` or ``rgb``) or,
undeclared, to grey (``L``) when every file's format is grey (its header's mode, not its
pixels), else to RGB (a federation then takes U's files' channels,
:mod:`fedlabels.data.image_channels`), and resized to ``image_size`` (``HxW``) when one is
declared; without it every image must already have one size. Hidden files and folders
(``.name``) and ``__MACOSX`` are skipped. Images of more than 8 bits (16-bit grey PNG or
TIFF, 32-bit integer or float) are scaled linearly so that the declared ``image_peak``
(4,095 for 12-bit X-rays stored in 16 bits) becomes 255, else their format's full scale
(:func:`format_peak`: 65,535 for 16 bits, 1.0 for float), never their pixels'; a pixel above
it is a one-line error naming the file; the dataset records a declared peak so that new
images are scaled alike when predicting. 8-bit images always scale by 255. Pixels are kept
as uint8 rows of C·H·W values (the federation converts the rows it takes to float32 in [0,
1]) and the dataset records its (C, H, W), so CNN learners see (N, C, H, W). The pixels of a
folder, or of a table's image column, are cached in the fedlabels cache
(``imagefolder/<key>.npz``, owner-readable only), keyed by the files' names (a table's:
their resolved paths, in the table's order), sizes and modification times and the image
size, with a SHA-256 of the pixels that is checked on every load (a cache that fails it is
rebuilt).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from fedlabels.core.errors import FedLabelsError, missing_column
from fedlabels.core.verbosity import QUIET_SECONDS  # decoding says how far it is, as a round

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
_GREY = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F")
_SKIPPED = ("__MACOSX",)  # macOS' archive folders (copies of resource forks)
_CACHE_FORMAT = "fedlabels.imagefolder/3"  # 3: peak from the format (an entry without
# `colour`, each file's format, is read again: the undeclared channels are U's files')
#: EXIF orientations that turn an image a quarter (its width and height swap)
_QUARTER_TURNS = (5, 6, 7, 8)
_TRAINED_ON = ("the models were trained on {} images and the run declared no image_size to "
               "resize to: resize it first.")


#: ``image_mode`` as declared -> Pillow's mode
MODES = {"grey": "L", "rgb": "RGB"}


class Images(NamedTuple):
    """Pixels read from image files: uint8 rows (N, C·H·W), (C, H, W), the declared
    value of deep images that became 255 (``None``: each image's :func:`format_peak`), and
    whether each file's format is colour (its header's mode; ``None``: not known) and holds
    a deep pixel below 0 (read as 0, :func:`warn_negative`)."""

    pixels: np.ndarray
    shape: tuple[int, int, int]
    peak: float | None
    colour: np.ndarray | None = None
    negative: np.ndarray | None = None  # each file: a deep pixel below 0, read as 0


class ImageFileError(FedLabelsError):
    """What is wrong with one image file, in one line: ``image PATH WHAT``."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"image {path} {what}")
        self.path, self.what = path, what

    def at(self, where: str) -> ImageFileError:
        """The same error saying where the path came from (``where``: a table's data row
        and column), as a missing file's does."""
        return ImageFileError(self.path, f"({where}) {self.what}")


def parse_size(text: Any) -> tuple[int, int] | None:
    """``"32x48"`` -> (32, 48) (height, width); ``"32"`` or 32 -> (32, 32); a pair (32, 48)
    -> (32, 48); None -> None."""
    if text is None:
        return None
    if isinstance(text, list | tuple) and len(text) == 2:
        text = "x".join(str(t) for t in text)
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*", str(text))
    if isinstance(text, bool) or not match or int(match.group(1)) < 1 or \
            int(match.group(2) or 1) < 1:
        raise FedLabelsError(f"image_size must be HxW (e.g. 32x32) or one side S, got "
                             f"{text!r}.")
    h = int(match.group(1))
    return h, int(match.group(2) or h)


def parse_mode(text: Any) -> str | None:
    """``image_mode`` -> Pillow's mode: ``"grey"`` -> ``"L"``, ``"rgb"`` -> ``"RGB"``;
    None -> None (the files' formats decide)."""
    if text is None:
        return None
    if not isinstance(text, str) or text.strip().lower() not in MODES:
        raise FedLabelsError(f"image_mode must be one of {', '.join(MODES)}, got {text!r}.")
    return MODES[text.strip().lower()]


def parse_peak(value: Any) -> float | None:
    """``image_peak``, the value of a deep image that becomes 255 (a positive number, e.g.
    4095 for 12-bit images); None -> None (each image's format decides)."""
    if value is None:
        return None
    try:
        peak = float(value)
    except (TypeError, ValueError):
        peak = float("nan")
    if isinstance(value, bool) or not np.isfinite(peak) or peak <= 0:
        raise FedLabelsError(f"image_peak must be a positive number (the value of images of "
                             f"more than 8 bits that becomes 255, e.g. 4095 for 12-bit "
                             f"images), got {value!r}.")
    return peak


#: the image settings and the data they apply to
_IMAGE_ONLY = ("image_size", "image_mode", "image_peak")


def check_image_settings(dataset: str, image_size: str | None, image_column: str | None,
                         text_column: str | None, image_mode: str | None = None,
                         image_peak: Any = None, features: Any = None,
                         drop: Any = None) -> None:
    """``image_size``, ``image_mode`` and ``image_peak`` apply to image data,
    ``image_column`` to a ``csv:`` table, whose images are then its only features (so
    ``features`` and ``drop``, which choose columns, do not apply)."""
    parse_size(image_size)
    parse_mode(image_mode)
    parse_peak(image_peak)
    is_folder = dataset.startswith("imagefolder:")
    if image_column is not None:
        if not dataset.startswith("csv:"):
            raise FedLabelsError("image_column applies to a csv:PATH:TARGET table only; an "
                                 "imagefolder: dataset has its images in class folders.")
        if text_column is not None:
            raise FedLabelsError("give text_column or image_column, not both.")
        chosen = [n for n, v in (("features", features), ("drop", drop)) if v is not None]
        if chosen:  # else ignored without a word: --features age did not add age
            raise FedLabelsError(
                f"{chosen[0]} chooses a table's feature columns, but with image_column "
                f"{image_column!r} the images are the only features (the table's other "
                f"columns are not read as features); leave {chosen[0]} out.")
    elif not is_folder:
        given = [name for name, value in zip(_IMAGE_ONLY, (image_size, image_mode, image_peak),
                                             strict=True) if value is not None]
        if given:
            raise FedLabelsError(f"{given[0]} applies to an imagefolder: dataset or a csv: "
                                 "table with image_column; remove it.")


def _hidden(relative: Path) -> bool:
    """Whether a path under an image folder is hidden (a part named ``.x``) or macOS'."""
    return any(part.startswith(".") or part in _SKIPPED for part in relative.parts)


def image_files(folder: Path, left_out: list[Path] | None = None) -> list[Path]:
    """The image files under ``folder`` (sub-folders too, symbolic links to folders
    followed, each real folder once), sorted; hidden ones skipped; a broken link to an image
    is a one-line error naming it (it was skipped without a word). The other files (a
    DICOM ``.dcm``, notes) are appended to ``left_out`` for :func:`warn_left_out`."""
    import os

    found: list[Path] = []
    seen: set[str] = set()
    for top, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:  # a link back up the tree, or a second link to one folder
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not _hidden(Path(d))]
        for name in files:
            path = Path(top) / name
            if _hidden(path.relative_to(folder)):
                continue
            if path.suffix.lower() not in SUFFIXES:
                if left_out is not None and path.is_file():
                    left_out.append(path)
                continue
            if not path.exists():
                raise FedLabelsError(f"image {path} is a broken symbolic link (to "
                                     f"{os.readlink(path)}); fix or remove it.")
            if path.is_file():
                found.append(path)
    return sorted(found)


def _suffix_counts(paths: list[Path]) -> str:
    """``3 .dcm, 1 .txt``: the files by suffix, the commonest first."""
    from collections import Counter

    kinds = Counter(p.suffix.lower() or "no suffix" for p in paths)
    return ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())


def warn_left_out(folder: Path, left_out: list[Path]) -> None:
    """One warning for the files under ``folder`` that are no image fedlabels reads (they
    were left out without a word: a folder of DICOM scans beside PNGs trained on the PNGs)."""
    if not left_out:
        return
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    counts = _suffix_counts(left_out)
    first = min(left_out).relative_to(folder)
    warnings.warn(FedLabelsWarning(
        f"image folder {folder}: {len(left_out)} file(s) that are no image fedlabels reads are "
        f"left out ({counts}; the first {first}); it reads {', '.join(SUFFIXES)}: convert "
        "those that are images (a DICOM .dcm too) to one of them."),
        stacklevel=user_stacklevel())


def image_folder_files(root: Path, min_classes: int = 2
                       ) -> tuple[list[Path], np.ndarray, list[str]]:
    """The image files under ``root/CLASS/``, their class indices and the class names (a
    dataset needs two classes at least; a federated site's own folder may hold one)."""
    if not root.is_dir():
        raise FedLabelsError(f"image folder {root} does not exist or is not a directory.")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not _hidden(Path(d.name)))
    if len(classes) < min_classes:
        loose = [p for p in root.iterdir() if p.suffix.lower() in SUFFIXES and p.is_file()]
        raise FedLabelsError(f"image folder {root} has {len(classes)} class folder"
                             f"{'s' if len(classes) != 1 else ''}"
                             f"{' (' + classes[0] + ')' if classes else ''}"
                             f"{f' and {len(loose)} images directly in it' if loose else ''}; "
                             f"it needs one sub-folder per class, at least {min_classes}"
                             f"{', holding the images' if loose else ''}.")
    files: list[Path] = []
    labels: list[int] = []
    left_out: list[Path] = []
    for k, name in enumerate(classes):
        before = len(left_out)
        found = image_files(root / name, left_out)
        if not found:
            others = _suffix_counts(left_out[before:])
            held = f" but {len(left_out) - before} other file(s) ({others})" if others else ""
            fix = "convert those that are images to one of them" if others else "add some"
            raise FedLabelsError(f"class folder {root / name} has no images "
                                 f"({', '.join(SUFFIXES)}){held}; {fix} or remove the "
                                 "folder.")
        files += found
        labels += [k] * len(found)
    _refuse_twice_reached(root, files)
    warn_left_out(root, left_out)
    stray = sorted(p.name for p in root.iterdir() if p.suffix.lower() in SUFFIXES
                   and p.is_file() and not _hidden(Path(p.name)))
    if stray:  # beside class folders an image has no class: say so rather than drop it unseen
        import warnings

        from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

        shown = ", ".join(stray[:3]) + (" ..." if len(stray) > 3 else "")
        warnings.warn(FedLabelsWarning(
            f"image folder {root}: {len(stray)} image(s) directly in it ({shown}) belong to no "
            "class folder and are left out; move each into its class's folder."),
            stacklevel=user_stacklevel())
    return files, np.asarray(labels, dtype=np.int64), classes


def _refuse_twice_reached(root: Path, files: list[Path]) -> None:
    """One line where two paths of an image folder are one file (symbolic links): in two
    class folders it would train as both classes, in one it could be in the test set and in
    a client's data alike (before, it was read twice without a word)."""
    first: dict[str, Path] = {}
    for path in files:
        real = os.path.realpath(path)
        if real in first:
            a, b = (p.relative_to(root) for p in (first[real], path))
            which = (f"two class folders ({a.parts[0]}, {b.parts[0]})" if a.parts[0] !=
                     b.parts[0] else f"class folder {a.parts[0]} twice")
            raise FedLabelsError(f"image folder {root} reaches the file {real} from {which}: "
                                 f"{a} and {b} (a symbolic link); an image is read once, in "
                                 "one class: remove the link or one of the paths.")
        first[real] = path


#: the full scale of 32-bit integer images (Pillow's ``I``): undeclared, no peak to take
INT32_SCALE = float(2**31 - 1)


def format_peak(mode: str, rawmode: str = "") -> float:
    """The full scale of an image's format, from its header (no pixel decoded): 255 for 8
    bits a channel, 65,535 for 16-bit integers, 2**31 - 1 for 32-bit ones (Pillow's ``I``),
    1.0 for float; ``rawmode`` (the file's stored layout) tells a 16-bit file that Pillow
    opens as ``I``."""
    if not _deep(mode):
        return 255.0
    if mode == "F":
        return 1.0
    if "16" in mode or rawmode.startswith("I;16"):
        return 65535.0
    return INT32_SCALE


def _opened(path: Path, warn: bool = True) -> Any:
    """``path`` opened by Pillow (headers read), or a one-line error naming it; ``warn``:
    say so if it is over Pillow's decompression-bomb warning limit (:func:`_warn_large`)."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():  # Pillow's warning names no file: ours names it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(path)
        limit = Image.MAX_IMAGE_PIXELS
        if warn and limit is not None and img.size[0] * img.size[1] > limit:
            _warn_large(path, img.size, limit)
        return img
    except Image.DecompressionBombError as exc:
        raise ImageFileError(path, f"is too large to read safely ({exc}); shrink it or "
                                   "remove the file.") from None
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
        raise ImageFileError(path, f"cannot be read ({exc}); replace or remove the "
                                   "file.") from None


def _warn_large(path: Path, size: tuple[int, int], limit: int) -> None:
    """Say which image is over Pillow's decompression-bomb warning limit (it is read;
    Pillow's own warning names no file)."""
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    w, h = size
    warnings.warn(FedLabelsWarning(
        f"image {path} is {h}x{w} (height x width), {w * h:,} pixels, over Pillow's "
        f"decompression-bomb limit of {limit:,}; it is read, slowly and in much memory: "
        "shrink it if it is not meant to be that large."), stacklevel=user_stacklevel())


def _deep(mode: str) -> bool:
    """Whether an image mode holds more than 8 bits a pixel (16/32-bit integer, float)."""
    return mode.startswith(("I", "F"))


def _header(path: Path) -> tuple[str, tuple[int, int], float]:
    """An image's mode, its upright (width, height), and its format's full scale
    (:func:`format_peak`), from its header: the pixels are left to the reading."""
    with _opened(path) as img:
        args = img.tile[0][3] if img.tile else None  # the decoder's (rawmode, ...)
        rawmode = args[0] if isinstance(args, tuple) and args else args
        try:  # a PNG's EXIF may follow its pixels: reading it may decode them
            turned = img.getexif().get(0x0112, 1) in _QUARTER_TURNS
        except (OSError, SyntaxError, ValueError) as exc:
            raise _corrupt(path, exc) from None
        return (img.mode, (img.size[1], img.size[0]) if turned else img.size,
                format_peak(img.mode, rawmode if isinstance(rawmode, str) else ""))


def _corrupt(path: Path, exc: BaseException) -> ImageFileError:
    return ImageFileError(path, f"is corrupt or truncated ({exc}); replace or remove the "
                                "file.")


def _available_bytes() -> int | None:
    """The memory that can be taken without swapping (``MemAvailable`` of /proc/meminfo,
    which Linux has; None elsewhere)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _physical_bytes() -> int | None:
    """The machine's physical memory (None where the system does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _memory_bytes() -> tuple[int, str] | None:
    """The memory a federation may take and what that figure is: the available memory
    where the system says (other processes' memory is not ours), else the physical."""
    available = _available_bytes()
    if available is not None:
        return available, "available (MemAvailable)"
    physical = _physical_bytes()
    return None if physical is None else (physical, "in all (its free memory unknown)")


#: the most memory building a federation of images takes, per byte of their pixels: the
#: uint8 pixels and the float32 rows of U, the clients and the test set (5.5 measured,
#: tests/test_image_data.py; 10.3 before the shift measure stopped copying the clients' rows)
LOAD_PEAK = 6


def _pixel_array(n: int, channels: int, h: int, w: int) -> np.ndarray:
    """The uint8 rows for ``n`` images, refused in one line where building a federation of
    them (:data:`LOAD_PEAK` times their bytes) would not fit in this machine's available
    memory."""
    need = n * channels * h * w
    memory = _memory_bytes()
    gib = 2.0 ** 30
    why = (f"{n} images of {channels}x{h}x{w} need {need / gib:.1f} GiB as pixels and "
           f"{4 * need / gib:.1f} GiB as the models' float32 inputs, "
           f"{LOAD_PEAK * need / gib:.1f} GiB while the federation is built")
    if memory is not None and LOAD_PEAK * need > memory[0]:
        raise FedLabelsError(f"{why}; this machine has {memory[0] / gib:.1f} GiB {memory[1]}: "
                             "choose a smaller --image-size (image_size), e.g. 64x64.")
    try:
        return np.empty((n, channels * h * w), dtype=np.uint8)
    except MemoryError:
        raise FedLabelsError(f"{why}, more than is free: choose a smaller --image-size "
                             "(image_size).") from None


def read_images(files: list[Path], size: tuple[int, int] | None, mode: str | None = None,
                peak: float | None = None, resize: bool = True,
                reference: str = _TRAINED_ON, peak_fix: str = "") -> Images:
    """The images' pixels in ``mode`` (``L``, ``RGB``; default: grey if every file's format
    is), resized to ``size`` (height, width) if given (``resize=False``: each must already
    have it, else one line ending in ``reference`` with that size), else all of one size;
    deep images scaled by ``peak`` (default: each one's :func:`format_peak`), a pixel above
    it a one-line error naming the file and ending in ``peak_fix`` (default: declare the
    peak)."""
    from PIL import Image, ImageOps

    headers = [_header(path) for path in files]
    sizes: dict[tuple[int, int], Path] = {}
    for path, (_, wh, _) in zip(files, headers, strict=True):
        sizes.setdefault(wh, path)
        if not resize and size is not None and wh != (size[1], size[0]):
            raise FedLabelsError(f"image {path} is {wh[1]}x{wh[0]} (height x width); "
                                 + reference.format(f"{size[0]}x{size[1]}"))
    if size is None and len(sizes) > 1:
        (s1, f1), (s2, f2) = list(sizes.items())[:2]
        raise FedLabelsError(f"images differ in size ({f1} is {s1[1]}x{s1[0]}, {f2} is "
                             f"{s2[1]}x{s2[0]}, height x width); declare one size with "
                             "--image-size HxW (image_size) to resize them.")
    if peak is None:
        _refuse_int32(files, headers, peak_fix)
    if mode is None:
        mode = "L" if all(m in _GREY for m, _, _ in headers) else "RGB"
    w, h = next(iter(sizes)) if size is None else (size[1], size[0])
    channels = 1 if mode == "L" else 3
    out = _pixel_array(len(files), channels, h, w)
    shown = started = time.monotonic()
    negative = np.zeros(len(files), dtype=bool)
    for i, (path, (_, _, scale)) in enumerate(zip(files, headers, strict=True)):
        shown = _say_how_far(i, len(files), started, shown)
        with _opened(path, warn=False) as img:  # said by _header
            try:
                upright = ImageOps.exif_transpose(img)
                if _deep(upright.mode):  # scaled in float, then 8 bits
                    grey, top = upright.convert("F"), scale if peak is None else peak
                    negative[i] = _check_peak(path, grey, top, peak is None, peak_fix) < 0
                    if grey.size != (w, h):
                        grey = grey.resize((w, h), Image.Resampling.BILINEAR)
                    values = np.asarray(grey, dtype=np.float32) * np.float32(255.0 / top)
                    pixels = Image.fromarray(np.clip(np.rint(values), 0, 255)
                                             .astype(np.uint8)).convert(mode)
                else:
                    pixels = upright.convert(mode)
                    if pixels.size != (w, h):
                        pixels = pixels.resize((w, h), Image.Resampling.BILINEAR)
            except FedLabelsError:  # a ValueError of ours (_check_peak): not a corrupt file
                raise
            except (OSError, SyntaxError, ValueError) as exc:
                raise _corrupt(path, exc) from None
        arr = np.asarray(pixels, dtype=np.uint8).reshape(h, w, channels)
        out[i] = arr.transpose(2, 0, 1).reshape(-1)  # channels first: (C, H, W)
    warn_negative(files, negative)
    return Images(out, (channels, h, w), None if peak is None else float(peak),
                  np.array([m not in _GREY for m, _, _ in headers], dtype=bool), negative)


def _refuse_int32(files: list[Path], headers: list[tuple[str, tuple[int, int], float]],
                  fix: str = "") -> None:
    """One line naming the first 32-bit integer image read without a declared peak: their
    format's full scale, 2**31 - 1, would turn any pixel below 8,421,505 into 0 (black)."""
    wide = [path for path, (_, _, scale) in zip(files, headers, strict=True)
            if scale == INT32_SCALE]
    if wide:
        more = f" (and {len(wide) - 1} more)" if len(wide) > 1 else ""
        raise FedLabelsError(f"image {wide[0]}{more} holds 32-bit integers, whose format's "
                             "full scale (2,147,483,647) would read its pixels black; " + (
                                 fix or "declare the images' full scale (the value that "
                                 "becomes 255, e.g. 65535) with --image-peak (image_peak)."))


def _check_peak(path: Path, grey: Any, peak: float, from_format: bool, fix: str = "") -> float:
    """A deep image's brightest pixel against the value that becomes 255: above it is an
    error naming the file (clipping would change the pixels unseen). Returns its darkest
    pixel."""
    darkest, brightest = (float(v) for v in grey.getextrema())
    if brightest > peak:
        whose = "its format's full scale" if from_format else "the declared image_peak"
        raise ImageFileError(path, f"has a pixel of {brightest:g}, above {peak:g}, {whose}, "
                                   "which becomes 255; " + (
                                       fix or "declare the images' full scale, at least "
                                       "that pixel, with --image-peak (image_peak)."))
    return darkest


def warn_negative(files: list[Path], negative: np.ndarray | None) -> None:
    """One warning naming the first file and the count of deep images (float, 32-bit) with
    pixels below 0, which are read as 0 (black): the scale keeps 0 at 0, so they cannot be
    kept; before 2026-11-30 they were clipped without a word."""
    if negative is None or not negative.any():
        return
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    first = files[int(np.argmax(negative))]
    warnings.warn(FedLabelsWarning(
        f"{int(negative.sum())} deep image(s) hold pixels below 0, the first {first}: they "
        "are read as 0 (black), the scale keeping 0 at 0; shift such images to start at 0 "
        "if their negative values mean something."), stacklevel=user_stacklevel())


def _say_how_far(done: int, total: int, started: float, shown: float) -> float:
    """A line on stderr when nothing was said for :data:`QUIET_SECONDS` while images are
    decoded (a folder of many photos takes minutes before a run's first round), where a
    run's progress lines would show (not with ``-q`` or ``--no-progress``). Returns when a
    line was last shown."""
    from fedlabels.core.verbosity import lines_shown

    now = time.monotonic()
    if now - shown < QUIET_SECONDS or not lines_shown(sys.stderr):
        return shown
    print(f"fedlabels: reading images: {done:,} of {total:,} decoded ({now - started:.0f} s)",
          file=sys.stderr, flush=True)
    return now


def _entry_key(group: str, files: list[Path], name: Any) -> str:
    """A cache entry's key ``GROUP-DIGEST``: the group names its folder or table and image
    size (an entry of the group whose files have changed since is stale), the digest
    continues it with each file's ``name(path)``, size and modification time."""
    digest = hashlib.sha256(group.encode())
    head = digest.hexdigest()[:12]
    for path in files:
        stat = path.stat()
        digest.update(f"|{name(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return f"{head}-{digest.hexdigest()[:24]}"


def folder_cache_key(root: Path, files: list[Path], size: tuple[int, int] | None,
                     mode: str | None = None) -> str:
    """A folder's cache entry, its files named relative to it (:func:`_entry_key`); a
    forced ``mode`` (``L``, ``RGB``) is an entry of its own."""
    group = f"{_CACHE_FORMAT}|{root.resolve()}|{size}" + (f"|{mode}" if mode else "")
    return _entry_key(group, files, lambda path: path.relative_to(root))


def _read_cache(path: Path) -> Images | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            pixels, shape, check = data["pixels"], data["shape"], str(data["sha256"])
            peak = float(data["peak"])  # NaN: none declared
            colour = data["colour"].astype(bool)  # an older entry has none: read again
            negative = data["negative"].astype(bool)
    except (OSError, KeyError, ValueError):
        return None
    if hashlib.sha256(pixels.tobytes()).hexdigest() != check or \
            not len(colour) == len(negative) == len(pixels):
        return None  # damaged: rebuilt from the images
    c, h, w = (int(s) for s in shape)
    return Images(pixels, (c, h, w), None if np.isnan(peak) else peak, colour, negative)


def _write_cache(path: Path, images: Images) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, pixels=images.pixels, shape=np.asarray(images.shape, dtype=np.int64),
                 peak=np.asarray(np.nan if images.peak is None else images.peak),
                 colour=np.asarray(images.colour, dtype=bool),
                 negative=np.asarray(images.negative, dtype=bool),
                 sha256=np.asarray(hashlib.sha256(images.pixels.tobytes()).hexdigest()))
    os.replace(tmp, path)


def cached_images(files: list[Path], size: tuple[int, int] | None, key: str,
                  mode: str | None = None, peak: float | None = None, resize: bool = True,
                  reference: str = _TRAINED_ON) -> Images:
    """``read_images(files, size, mode)``, from the cache entry ``key`` where it holds them; a new
    entry replaces its group's stale ones (the same folder or table and size, older files),
    so a folder whose images change keeps one entry per size, not one per change."""
    from fedlabels.downloads.cache import dataset_dir

    folder = dataset_dir("imagefolder")
    cache = folder / f"{key}.npz"
    cached = _read_cache(cache) if cache.is_file() else None
    if cached is not None and len(cached.pixels) == len(files):
        warn_negative(files, cached.negative)  # said on every read, as read_images says it
        return cached
    images = read_images(files, size, mode, peak=peak, resize=resize, reference=reference)
    with contextlib.suppress(OSError):  # a read-only cache: the images are read next time
        _write_cache(cache, images)
        group = key.split("-")[0]
        for stale in folder.glob(f"{group}-*.npz"):
            if stale != cache:
                stale.unlink(missing_ok=True)
    return images


class ImageFolder(NamedTuple):
    """An image folder's pixels (uint8 rows), labels, class names, (C, H, W) and the value
    that became 255 (:class:`Images`)."""

    pixels: np.ndarray
    labels: np.ndarray
    classes: list[str]
    shape: tuple[int, int, int]
    peak: float | None


def load_image_folder(root: str | Path, size: tuple[int, int] | None, min_classes: int = 2,
                      mode: str | None = None, peak: float | None = None) -> ImageFolder:
    """An image folder's images and labels (:class:`ImageFolder`), cached; ``mode`` (``L``
    or ``RGB``) converts them all to those channels (default: grey if every file's format
    is); ``peak`` scales deep images (default: their format's full scale)."""
    images, labels, classes = folder_images(root, size, min_classes, mode, peak)
    return ImageFolder(images.pixels, labels, classes, images.shape, images.peak)


def folder_images(root: str | Path, size: tuple[int, int] | None, min_classes: int = 2,
                  mode: str | None = None, peak: float | None = None
                  ) -> tuple[Images, np.ndarray, list[str]]:
    """:func:`load_image_folder`'s images (with each file's format, :class:`Images`), labels
    and class names."""
    root = Path(root).expanduser()
    files, labels, classes = image_folder_files(root, min_classes)
    forced = mode if peak is None else f"{mode}|{peak:g}"
    images = cached_images(files, size, folder_cache_key(root, files, size, forced), mode,
                            peak=peak)
    return images, labels, classes


def _paths_key(table: Path, files: list[Path], size: tuple[int, int] | None,
               mode: str | None = None, peak: float | None = None) -> str:
    """A table's images' cache entry, their resolved paths in order (:func:`_entry_key`);
    a declared mode or peak is an entry of its own."""
    declared = "" if mode is None and peak is None else f"|{mode}|{peak}"
    return _entry_key(f"{_CACHE_FORMAT}|paths|{table.resolve()}|{size}{declared}", files,
                      Path.resolve)


def pixel_names(shape: tuple[int, int, int]) -> Sequence[str]:
    """The features' names of image rows (C, H, W) laid out channels first: ``row3_col5``
    for grey images, ``ch1_row3_col5`` for colour (what inspect shows a tree's split on),
    each made when read (:class:`~fedlabels.data.pixel_names.PixelNames`)."""
    from fedlabels.data.pixel_names import PixelNames

    return PixelNames(shape)


def unit_float32(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels -> float32 in [0, 1]."""
    out = pixels.astype(np.float32)
    out /= np.float32(255.0)
    return out


def column_paths(values: Any, column: str, base: Path, where: str) -> list[Path]:
    """The image files a column names (relative paths from ``base``), checked: an empty
    cell, a missing file or a folder is one line naming the row (1-based, as a spreadsheet
    shows the data rows) and ``where`` the column is (a file that cannot be read:
    :func:`image_column_pixels`)."""
    files = []
    for row, value in enumerate(list(values), start=1):
        if value is None or (isinstance(value, float) and np.isnan(value)) or \
                not str(value).strip():
            raise FedLabelsError(f"data row {row} of {where} has no image path in column "
                                 f"{column!r}; fill it in or drop the row.")
        path = Path(str(value).strip()).expanduser()
        path = Path(os.path.normpath(path if path.is_absolute() else base / path))
        if not path.is_file():
            what = "is a folder, not an image file" if path.is_dir() else "does not exist"
            raise FedLabelsError(f"image {path} (data row {row} of {where}, column {column!r}) "
                                 f"{what}; paths are relative to {base}.")
        files.append(path)
    return files


def image_column_pixels(info: Any, raw: Any, column: str, image_size: Any,
                        mode: str | None = None, peak: float | None = None) -> Images:
    """The images a table's ``column`` names (paths relative to the table's folder), in the
    declared ``mode`` and scaled by the declared ``peak`` (:func:`read_images`); a file that
    cannot be read is one line naming its data row, as :func:`column_paths` names those of
    an empty cell or a missing file."""
    if info.target is None or not info.name.startswith("csv:"):
        raise FedLabelsError("image_column applies to a csv:PATH:TARGET table only.")
    from fedlabels.core.files import csv_parts

    frame = raw.X
    table = Path(csv_parts(info.name)[0]).expanduser()
    if column not in frame.columns:  # the file, not csv:PATH:TARGET less its 'csv:'
        raise FedLabelsError(f"table {table} {missing_column(column, frame.columns)}.")
    files = column_paths(frame[column].tolist(), column, table.parent, str(table))
    size = parse_size(image_size)
    try:
        return cached_images(files, size, _paths_key(table, files, size, mode, peak), mode,
                              peak=peak)
    except ImageFileError as exc:  # a corrupt file: its row, as a missing one's
        if exc.path not in files:
            raise
        row = files.index(exc.path) + 1
        raise exc.at(f"data row {row} of {table}, column {column!r}") from None


def image_input(shape: tuple[int, int, int], size: tuple[int, int] | None,
                peak: float | None, column: str | None = None) -> dict[str, Any]:
    """How a run read its images, recorded with its models so that new images are read
    alike (:func:`new_image_rows`): (C, H, W), the declared size, the declared value of
    deep images that became 255 (``None``: each image's format's) and where it came from
    (``peak_from``: ``image_peak`` or ``format``; :func:`recorded_peak`), and a table's
    image column."""
    return {"shape": [int(s) for s in shape],
            "size": None if size is None else [int(size[0]), int(size[1])],
            "peak": None if peak is None else float(peak),
            "peak_from": "format" if peak is None else "image_peak", "column": column}


def image_paths(X_raw: Any, spec: Mapping[str, Any]) -> list[Path] | None:
    """The image files ``X_raw`` names: a folder (its images, sub-folders too), one image
    file, a sequence of paths, or a table's image column (:func:`table_image_paths`; paths
    relative to the working directory); ``None`` for pixel rows (a table of numbers too)."""
    import pandas as pd

    if isinstance(X_raw, str | os.PathLike):
        path = Path(X_raw).expanduser()
        if path.is_dir():
            left_out: list[Path] = []
            files = image_files(path, left_out)
            if not files:
                raise FedLabelsError(f"folder {path} holds no images ({', '.join(SUFFIXES)}).")
            warn_left_out(path, left_out)
            return files
        if not path.is_file():
            raise FedLabelsError(f"{path} does not exist; give an image file, a folder of "
                                 "images, or pixel rows.")
        return [path]
    if isinstance(X_raw, pd.DataFrame):
        return table_image_paths(X_raw, spec, Path.cwd())
    if isinstance(X_raw, list | tuple) or (isinstance(X_raw, np.ndarray)
                                          and X_raw.dtype.kind in "OU"):
        return column_paths(list(X_raw), "paths", Path.cwd(), "the paths given")
    return None


def table_image_paths(frame: Any, spec: Mapping[str, Any], folder: Path) -> list[Path] | None:
    """A table's images for a run on image files: the paths (relative to ``folder``) in the
    run's image column, else in the table's one text column; ``None`` for a table of numbers
    alone (pixel rows). ``fedlabels predict`` and ``result.predict`` read tables alike."""
    import pandas as pd

    column = spec.get("column")
    if column is None or column not in frame.columns:
        texts = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
        if not texts:
            return None
        if len(texts) > 1:
            wanted = f"the run's image column {column!r}" if column else "one column of paths"
            raise FedLabelsError(f"the table has {len(texts)} text columns "
                                 f"({', '.join(map(str, texts[:5]))}) and not {wanted}; "
                                 "give one column of image paths (or pixel values alone).")
        column = texts[0]
    return column_paths(frame[column].tolist(), str(column), folder, "the table")


def recorded_peak(spec: Mapping[str, Any]) -> float | None:
    """The declared peak a run recorded (:func:`image_input`); ``None``: each image's
    format's full scale. A record without ``peak_from`` (models files written before
    2026-11-30) held the value that became 255 as fitted on the images: 255 for a run on
    8-bit images, whose deep new images took their own scale (so ``None``), else the deep
    images' fitted full scale, which scaled them (so that value)."""
    peak = spec.get("peak")
    if peak is None or ("peak_from" not in spec and float(peak) == 255.0):
        return None
    return float(peak)


def new_image_rows(spec: Mapping[str, Any], X_raw: Any) -> np.ndarray:
    """New images as a run's models take them: float32 rows of C·H·W pixels in [0, 1],
    read as the run read its own (:func:`image_input`), from files (:func:`image_paths`)
    or from pixel rows (uint8, or floats already in [0, 1]; (N, C·H·W) or (N, C, H, W))."""
    c, h, w = (int(v) for v in spec["shape"])
    files = image_paths(X_raw, spec)
    if files is not None:
        declared = spec.get("size")
        peak = recorded_peak(spec)
        images = read_images(files, (h, w), mode="L" if c == 1 else "RGB", peak=peak,
                             resize=declared is not None, peak_fix=(
                                 "the models were trained on images scaled by it and take "
                                 "new ones alike: give images within it, or train again "
                                 "with a larger --image-peak." if peak is not None else
                                 "the run declared no --image-peak, so its models take "
                                 "deep images by their format's full scale: train again "
                                 "declaring the images' full scale with --image-peak."))
        return unit_float32(images.pixels)
    X = np.asarray(X_raw)
    if X.ndim == 4 and X.shape[1:] == (c, h, w):
        X = X.reshape(len(X), -1)
    if X.ndim != 2 or X.shape[1] != c * h * w or X.dtype.kind not in "uif":
        raise FedLabelsError(f"these models take images of (C, H, W) = ({c}, {h}, {w}): give "
                             f"image files, a folder, or pixel rows of shape (N, {c * h * w}) "
                             f"or (N, {c}, {h}, {w}); got {X.dtype} of shape {X.shape}.")
    if X.dtype == np.uint8:
        return unit_float32(X)
    X = X.astype(np.float32)
    if len(X) and (not np.isfinite(X).all() or X.min() < 0 or X.max() > 1):
        raise FedLabelsError(f"pixel rows from {X.min():g} to {X.max():g}: the models take "
                             "pixels in [0, 1], as the run read its images; pass uint8 "
                             "pixels, or divide 0-255 values by 255.")
    return X
