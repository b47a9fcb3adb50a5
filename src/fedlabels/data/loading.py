"""Federations from registered datasets (or ``csv:PATH:TARGET``) with their default sizes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.renamed import renamed_keywords
from fedlabels.data.federation import (
    FORMER_SIZES,
    Federation,
    FloatLike,
    IntLike,
    make_federation,
)
from fedlabels.data.registry import DatasetInfo, LoadedDataset, get_dataset
from fedlabels.data.targets import TargetRangeLike


def load_table(dataset: str, *, sep: str | None = None,
               features: str | Sequence[str] | None = None,
               drop: str | Sequence[str] | None = None,
               text_column: str | None = None, image_size: str | None = None,
               image_column: str | None = None, image_mode: str | None = None,
               image_peak: float | None = None) -> tuple[DatasetInfo, LoadedDataset]:
    """A dataset's entry and its raw data, with the feature columns chosen.

    ``sep`` is a CSV table's field separator (default ``,``); ``features`` keeps only the
    named columns and ``drop`` removes some (comma-separated names or a list). A pandas
    index column of a CSV table (``Unnamed: 0``) is dropped with a warning unless named.
    ``text_column`` makes a CSV table's text column the single (text) feature;
    ``image_column`` makes the images a CSV table's column names its features (resized to
    ``image_size``, which also applies to an ``imagefolder:``, as do ``image_mode`` and
    ``image_peak``; :mod:`fedlabels.data.images`).
    """
    info, raw, _ = _load_table(dataset, sep=sep, features=features, drop=drop,
                               text_column=text_column, image_size=image_size,
                               image_column=image_column, image_mode=image_mode,
                               image_peak=image_peak)
    return info, raw


def _load_table(dataset: str, *, sep: str | None, features: str | Sequence[str] | None,
                drop: str | Sequence[str] | None, text_column: str | None,
                image_size: str | None, image_column: str | None,
                image_mode: str | None = None, image_peak: float | None = None
                ) -> tuple[DatasetInfo, LoadedDataset, list[str] | None]:
    """:func:`load_table`'s entry and data, and the table's feature columns before
    ``features`` and ``drop`` chose (``None``: images, texts or an unnamed matrix)."""
    info = get_dataset(dataset, sep=sep, image_size=image_size, image_mode=image_mode,
                       image_peak=image_peak)
    raw = info.load() if text_column is None or info.load_texts is None else \
        info.load_texts(text_column)  # a table's texts as written, from one read of it
    if image_column is not None:
        from fedlabels.data.federation import LazyRows
        from fedlabels.data.images import (
            image_column_pixels,
            image_input,
            parse_mode,
            parse_peak,
            parse_size,
            pixel_names,
            unit_float32,
        )

        mode, peak = parse_mode(image_mode), parse_peak(image_peak)
        images = image_column_pixels(info, raw, image_column, image_size, mode, peak)
        # the table's other columns stay beside the pixels: a column:NAME partition's sites
        others = raw.X.drop(columns=[image_column])
        rows = LazyRows(images.pixels, unit_float32, table=others,
                        names=pixel_names(images.shape))
        if mode is None:  # undeclared: U's files decide the channels (data/image_channels.py)
            from fedlabels.data.image_channels import ImageRows

            rows = ImageRows(images, lambda forced: image_column_pixels(
                info, raw, image_column, image_size, forced, peak), table=others)
        return info, replace(raw, X=rows,
                             image_shape=images.shape,
                             image_input=image_input(images.shape, parse_size(image_size),
                                                     images.peak, image_column)), None
    if text_column is not None:
        from fedlabels.data.text import text_feature

        return info, replace(raw, X=text_feature(info, raw.X, text_column, features,
                                                 drop)), None
    if features is None and drop is None and info.target is None:
        return info, raw, None
    from fedlabels.data.columns import drop_index_columns, parse_columns, select_columns

    keep, remove = parse_columns(features, "--features"), parse_columns(drop, "--drop")
    X = raw.X
    columns = [str(c) for c in X.columns] if hasattr(X, "columns") else None
    if info.target is not None:  # a user table
        X = drop_index_columns(X, keep=[*(keep or ()), *(remove or ())])
    return info, replace(raw, X=select_columns(X, keep, remove, info.target)), columns


def _chosen(columns: list[str] | None, features: Any, drop: Any,
            split_off: str | None) -> dict[str, Any]:
    """The ``features`` and ``drop`` a federation records (``loaded_with``): for a table,
    the columns they kept of its ``columns`` in one form (:func:`~.columns.chosen_columns`;
    ``drop`` then ``None``), so that one choice said two ways reads as one."""
    from fedlabels.data.columns import chosen_columns, parse_columns

    keep, remove = parse_columns(features, "--features"), parse_columns(drop, "--drop")
    if columns is None:  # an unnamed matrix, or texts or images: as given, in one order
        return {"features": None if keep is None else sorted(keep),
                "drop": None if remove is None else sorted(remove)}
    return {"features": chosen_columns(columns, keep, remove, split_off), "drop": None}


def _check_arguments(dataset: Any, sep: Any, features: Any, drop: Any) -> None:
    """One-line errors for arguments of the wrong type (a TypeError or AttributeError
    deep inside otherwise)."""
    import os

    if isinstance(dataset, os.PathLike):
        raise FedLabelsError(f"dataset must be a name or a 'csv:PATH:TARGET' string, got the "
                             f"path {os.fspath(dataset)!r}: use "
                             f"'csv:{os.fspath(dataset)}:TARGET' (TARGET: the label column).")
    if not isinstance(dataset, str):
        if isinstance(dataset, Federation):
            raise FedLabelsError("dataset must be a name (fedlabels datasets) or a "
                                 "'csv:PATH:TARGET' string, got a Federation, which is "
                                 "loaded already: run it with fl.run(method, federation).")
        if hasattr(dataset, "shape"):  # your own data (a DataFrame, an array): not its repr
            raise FedLabelsError(f"dataset must be a name (fedlabels datasets) or a "
                                 f"'csv:PATH:TARGET' string, got a {type(dataset).__name__} "
                                 f"of shape {tuple(dataset.shape)}; for your own X and y use "
                                 "fl.make_federation(X, y, clients=...).")
        raise FedLabelsError(f"dataset must be a name (fedlabels datasets) or a "
                             f"'csv:PATH:TARGET' string, got {dataset!r}.")
    if sep is not None and (not isinstance(sep, str) or not sep):
        raise FedLabelsError(f"sep must be a field separator such as ';' or '\\t', got "
                             f"{sep!r}.")
    for name, value in (("features", features), ("drop", drop)):
        if value is not None and not isinstance(value, str) and not (
                isinstance(value, Sequence) and all(isinstance(v, str) for v in value)):
            raise FedLabelsError(f"{name} must be column names ('a,b' or a list of "
                                 f"strings), got {value!r}.")


@renamed_keywords(FORMER_SIZES)
def load_federation(dataset: str, *, clients: IntLike = 5, unlabeled: IntLike | None = None,
                    private: IntLike | None = None, private_per_client: IntLike | None = None,
                    test: IntLike | None = None, partition: str = "iid",
                    seed: IntLike = 0, sep: str | None = None,
                    features: str | Sequence[str] | None = None,
                    drop: str | Sequence[str] | None = None, task: str | None = None,
                    target_range: TargetRangeLike = None, text_column: str | None = None,
                    unlabeled_shift: FloatLike = 0.0, public_pca: IntLike | None = None,
                    image_size: str | int | tuple[int, int] | None = None,
                    image_column: str | None = None, image_mode: str | None = None,
                    image_peak: FloatLike | None = None,
                    public: str | os.PathLike[str] | None = None,
                    missing: str | None = None,
                    classes: str | Sequence[str] | None = None) -> Federation:
    """Build a federation from a registered dataset (or ``csv:PATH:TARGET``).

    The keywords are the run parameters that build a federation, named as in ``fedlabels
    run`` (``clients`` ↔ ``--clients``; docs/usage.md); the former names ``n_clients``,
    ``n_unlabeled``, ``n_private`` and ``n_test`` are read for one more release, with a
    warning.
    The sizes ``unlabeled`` (|U|), ``private`` (the private records over all clients; or
    ``private_per_client``, the same number for each) and ``test`` left as ``None`` take
    the dataset's defaults (``fedlabels datasets`` lists them); ``seed`` seeds the split
    and the partition;
    ``sep``, ``features``, ``drop`` and ``text_column`` are those of :func:`load_table`.
    ``task`` (``None``: the dataset's own) and ``target_range`` are those of
    :func:`make_federation`; ``task`` may differ from the dataset's only for a ``csv:``
    table; ``unlabeled_shift`` and ``public_pca`` are those of :func:`make_federation`. With
    ``partition="column:NAME"`` the column NAME is read even when ``features`` leaves it
    out (it becomes the clients, never a feature). ``image_size`` (``"HxW"``, one side as
    a number, or a pair), ``image_column``, ``image_mode`` (``"grey"``, ``"rgb"``; not given:
    grey if every image file of U is) and ``image_peak`` (the value of images of more
    than 8 bits that becomes 255; not given: their format's full scale): see
    :func:`load_table`; an image dataset
    records its (C, H, W) in the federation's ``image_shape`` (unless ``public_pca``
    replaces the pixels); one whose labels are codes records what they mean in
    ``class_descriptions`` (Fashion-MNIST's ``8`` is ``Bag``).
    ``public``: the path of a public unlabeled set U of your own, a CSV table of the
    training table's feature columns or, for a run on image files, a folder of images
    (Fashion-MNIST: a folder of 28x28 images, or a CSV of its 0-255 pixels ``x0..x783``;
    :mod:`fedlabels.data.public_set`); no U is then drawn from the dataset and
    ``unlabeled`` and ``unlabeled_shift`` are refused.
    ``missing`` (``None``: the dataset's, ``"public-median"`` for Ozone, else
    ``"refuse"``) is that of :func:`make_federation`: ``"public-median"`` fills a table's
    gaps after the split with U's medians; a text or image dataset refuses it.
    ``classes`` (``"a,b,c"`` or a list) declares the class list, that of
    :func:`make_federation`; not given: a registered dataset's documented classes, else
    the classes the clients' rows hold.
    """
    from fedlabels.data.targets import resolve_task

    _check_arguments(dataset, sep, features, drop)
    if image_size is not None and not isinstance(image_size, str):  # 32 or (32, 48)
        from fedlabels.data.images import parse_size

        size = parse_size(image_size)
        image_size = None if size is None else f"{size[0]}x{size[1]}"
    if any(v is not None for v in (image_size, image_column, image_mode, image_peak)):
        from fedlabels.data.images import check_image_settings  # as RunConfig checks them

        check_image_settings(dataset, image_size, image_column, text_column, image_mode,
                             image_peak, features, drop)
    peak = None if image_peak is None else float(image_peak)  # checked above (numpy's too)
    n_clients, n_unlabeled, n_private, n_test = clients, unlabeled, private, test
    if missing is not None:  # as RunConfig checks it: before any data loads
        from fedlabels.data.gaps import check_fill_applies, check_missing

        if check_missing(missing) == "public-median":
            check_fill_applies(dataset, text_column, image_column)
    info = get_dataset(dataset, sep=sep, image_size=image_size, image_mode=image_mode,
                       image_peak=peak)
    task = resolve_task(dataset, info.task, task)
    from fedlabels.data.loaded_with import loaded_with

    settings = loaded_with(dataset, sep=sep, features=features, drop=drop,
                           text_column=text_column, task=task, target_range=target_range,
                           public=public, image_size=image_size, image_column=image_column,
                           classes=classes, image_mode=image_mode, image_peak=peak)
    asked = features
    features = _with_partition_column(features, partition)
    info, raw, columns = _load_table(dataset, sep=sep, features=features, drop=drop,
                                     text_column=text_column, image_size=image_size,
                                     image_column=image_column, image_mode=image_mode,
                                     image_peak=peak)
    settings.update(_chosen(columns, asked if columns is None else features, drop,
                            _split_column(partition)))
    missing = missing_policy(info, raw, missing, dataset)
    defaults = info.defaults
    if private_per_client is not None:
        if n_private is not None:
            raise FedLabelsError("give private or private_per_client, not both.")
        from fedlabels.data.partition import parse_partition

        if parse_partition(partition).kind in ("quantity", "powerlaw", "column"):
            raise FedLabelsError(f"private_per_client gives every client the same number of "
                                 f"records, but partition {partition!r} draws unequal ones: "
                                 "give private (the total over all clients) instead.")
        n_private = private_per_client * n_clients
    X_public = None
    if public is not None:
        from fedlabels.data.federation import refuse_drawn_u
        from fedlabels.data.image_channels import ImageRows
        from fedlabels.data.partition import parse_partition
        from fedlabels.data.public_set import read_public

        refuse_drawn_u(n_unlabeled, unlabeled_shift)  # before U is read
        spec = parse_partition(partition)
        X_public = read_public(info, raw, public, sep=sep, features=features, drop=drop,
                               partition_column=spec.column if spec.kind == "column" else None,
                               gaps=missing == "public-median")
        if isinstance(X_public, ImageRows) and isinstance(raw.X, ImageRows):
            raw = replace(raw, X=raw.X.in_mode(X_public.mode()))  # U's files' channels
    n_unlabeled = n_unlabeled if n_unlabeled is not None else defaults.get("n_unlabeled")
    if n_private is None and X_public is None:  # a default sized beside a drawn U
        n_private = defaults.get("n_private")
    if n_test is not None and raw.X_test is not None:
        import warnings

        from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

        warnings.warn(FedLabelsWarning(
            f"{dataset} has its own test split ({len(raw.y_test)} rows), which every run "
            f"evaluates on: test={n_test} is not used (eval_every thins the evaluations)."),
            stacklevel=user_stacklevel())  # 2 pointed at core/renamed.py's keyword wrapper
    n_test = n_test if n_test is not None else defaults.get("n_test")
    if X_public is not None:
        n_unlabeled = None
    elif n_unlabeled is None:  # a user table: half of what is left after the test split
        n_rows = len(raw.y)
        n_test_eff = n_test if n_test is not None else max(1, round(0.2 * n_rows))
        n_unlabeled = max(1, (n_rows - n_test_eff) // 2)
    if dataset.startswith("csv:"):  # named by its file and columns, not as Python's X
        from fedlabels.core.files import csv_parts
        from fedlabels.data.gaps import check_frame_gaps
        from fedlabels.data.preprocessing import categorical_columns

        if hasattr(raw.X, "columns"):  # a table (text is one column of str)
            check_frame_gaps(raw.X, categorical_columns(raw.X), missing == "public-median",
                             source=csv_parts(dataset)[0])
    fed = make_federation(raw.X, raw.y, clients=n_clients, unlabeled=n_unlabeled,
                          private=n_private,
                          test=n_test if raw.X_test is None else None, X_test=raw.X_test,
                          y_test=raw.y_test, partition=partition,
                          scale="none" if image_column is not None else info.scale,
                          seed=seed, name=dataset, task=task, target_range=target_range,
                          unlabeled_shift=unlabeled_shift, public_pca=public_pca,
                          X_public=X_public, missing=missing,
                          classes=classes if classes is not None or task == "regression"
                          else raw.classes)
    if public is not None:
        from fedlabels.data.public_set import public_path

        fed.info["public"] = {"path": str(public_path(public)), **fed.info["public"]}
    if raw.class_descriptions and task != "regression":
        fed.info["class_descriptions"] = [raw.class_descriptions.get(name, "")
                                          for name in fed.class_names]
    shape = raw.image_shape
    if shape is not None and fed.preprocessing is not None:  # channels undeclared: U's
        _, h, w = shape
        shape = (len(fed.preprocessing.feature_names) // (h * w), h, w)
    if shape is not None and public_pca is None:
        fed.info["image_shape"] = [int(s) for s in shape]
    if raw.image_input is not None and fed.preprocessing is not None and shape is not None:
        # new images (or their paths) are read as these were when predicting
        fed = replace(fed, preprocessing=replace(
            fed.preprocessing, image={**raw.image_input, "shape": [int(s) for s in shape]}))
    fed.info["loaded_with"] = settings  # what a run on it records (results/built.py)
    return fed


def missing_policy(info: DatasetInfo, raw: LoadedDataset, missing: str | None,
                   dataset: str) -> str:
    """The gap policy of a run on ``dataset``: ``missing``, else the dataset's own; the fill
    refused for a registered dataset of images (its ``image_shape``) or texts."""
    if missing is None:
        return info.missing
    if missing == "public-median":
        from fedlabels.data.gaps import refuse_fill
        from fedlabels.learners.text_input import is_text

        if raw.image_shape is not None:
            refuse_fill("images", dataset)
        if is_text(raw.X):
            refuse_fill("text", dataset)
    return missing


def _with_partition_column(features: str | Sequence[str] | None,
                           partition: str) -> str | Sequence[str] | None:
    """``features`` plus the column of a ``column:NAME`` partition (read, then split off)."""
    from fedlabels.data.columns import parse_columns

    column = _split_column(partition)
    keep = parse_columns(features, "--features")
    if column is None or keep is None or column in keep:
        return features
    return [*keep, column]


def _split_column(partition: str) -> str | None:
    """The column of a ``column:NAME`` partition (its clients, never a feature)."""
    from fedlabels.data.partition import parse_partition

    spec = parse_partition(partition)
    return spec.column if spec.kind == "column" else None
