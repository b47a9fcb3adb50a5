"""A site's data: its private partition and the shared public files, from its node config.

Node config keys (``flower-supernode --node-config '...'``):

``partition-id``
    This site's client index 0..m-1 (fixes its model seed, as in the simulator).
``data-path``
    Its private labelled data: an ``.npz`` with ``X`` (n, d) and ``y`` (n,) class indices
    (``fedlabels deploy prepare`` writes these), or a ``.csv`` whose columns are the shared
    feature names plus the label column named by ``target``.
``target``
    Label column of a CSV ``data-path`` (labels as in ``class_names`` of the shared file,
    or their documented meanings in its ``class_descriptions``: :func:`label_lookup`).
``shared-path``
    The shared public ``.npz``: ``X_public`` (U), ``X_test``, ``y_test``, ``class_names``,
    ``feature_names`` (images: ``pixel_names``, their (C, H, W) shape),
    ``class_descriptions`` where the dataset documents what its labels
    mean, and, if the features were standardised, ``scale_mean`` / ``scale_std``
    (applied to CSV rows so they match U); for a table with categorical columns,
    ``raw_columns`` and ``categorical``: a CSV holds the table's own columns and those are
    one-hot encoded with U's categories; with ``missing="public-median"``, ``fill``: U's
    median of each column, which fills the gaps (empty cells) of CSV rows before the
    scaling. Every site holds the same file.

``identity-key``
    This site's Ed25519 identity key (32 raw bytes, owner-only), where the shared file holds
    a roster (``roster_ids``, ``roster_keys``, ``run_id``: XCLP's secure modes): the site
    signs what it publishes through the server and checks its peers' values against the
    roster (:mod:`fedlabels.secure.identity`). The site makes it with ``fedlabels deploy
    identity`` (or ``deploy prepare`` writes ``client_<i>.identity.key``, and then the
    coordinator holds it too); never put it in the shared bundle. The roster must hold this
    key at ``partition-id``.
``roster-sha256``
    The roster fingerprint (hash of the run id and the sorted roster) that the sites compared
    with one another out of band: a shared file whose roster differs is refused
    (:mod:`.site_keys`).

A site also names its privacy plan (``privacy-plan``, or ``trust-coordinator=true``:
:mod:`.site_plan`) and its ledger (:mod:`.site_privacy`).

This module does not import Flower.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError, did_you_mean
from fedlabels.data import ClientData
from fedlabels.data.pixel_names import PixelNames


@dataclass(frozen=True)
class SiteData:
    """Everything one SuperNode holds."""

    partition_id: int
    private: ClientData
    X_public: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str]
    # U's public (mean, std) that standardised the shared sets (the shared file's
    # scale_mean / scale_std); None: features as loaded. Becomes MethodContext.scaling.
    scaling: tuple[np.ndarray, np.ndarray] | None = None
    # U's image shape (C, H, W) when the rows are images (shared.npz's image_shape)
    image_shape: tuple[int, int, int] | None = None
    # the site's identity key, the roster and the run id (identity-key + the shared file's
    # roster); becomes MethodContext.trust
    trust: Any = None
    # a fingerprint of the shared file's arrays besides U and the test set (U's scaling and
    # gap fill, PCA, names, roster, ...): sites holding different ones disagree at the hello
    shared_digest: str = ""

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_features(self) -> int:
        return int(self.X_public.shape[1])

    def public_digest(self) -> str:
        """A fingerprint of U and of the rest of the shared file; all sites must hold the
        same (a site whose shared file scaled or filled its rows otherwise, with the same U,
        would train on rows the others' model does not expect)."""
        h = hashlib.sha256(np.ascontiguousarray(self.X_public).tobytes())
        h.update(self.shared_digest.encode())
        return h.hexdigest()[:16]


#: the shared file's large arrays, left out of :func:`shared_digest` (U is hashed by
#: :meth:`SiteData.public_digest`; the test set only scores)
_LARGE_SHARED = frozenset({"X_public", "X_test", "y_test"})


def shared_digest(shared: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of the shared file's other arrays (U's scaling and gap fill, PCA, names,
    roster, ...), by name, dtype and shape, in name order; cheap, as a site loads its files
    for every message."""
    h = hashlib.sha256(b"fedlabels-shared-v1")
    for name in sorted(set(shared) - _LARGE_SHARED):
        a = np.ascontiguousarray(shared[name])
        h.update(f"|{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes() if a.dtype.kind != "O" else repr(a.tolist()).encode())
    return h.hexdigest()


def node_label(node_config: dict[str, Any], node_id: int | None) -> str:
    pid = node_config.get("partition-id", "?")
    return f"SuperNode partition-id={pid}" + (f" (node {node_id})" if node_id else "")


def _path(node_config: dict[str, Any], key: str, who: str, folder: bool = False) -> Path:
    value = node_config.get(key)
    if not value:
        raise FedLabelsError(
            f"{who}: node config has no {key!r}; start the SuperNode with "
            f"--node-config \"partition-id=I data-path=/path/to/client_I.npz "
            f"shared-path=/path/to/shared.npz\".")
    path = Path(str(value)).expanduser()
    if folder and path.is_dir():
        return path
    if not path.is_file():
        raise FedLabelsError(f"{who}: {key} {str(path)!r} does not exist or is not a file; "
                             "give the path of this site's file on this machine.")
    return path


def _load_npz(path: Path, who: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    from fedlabels.core.npz_size import check_inflated_size

    check_inflated_size(path, f"{who}'s file")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in keys if k not in data.files]
            if missing:
                raise FedLabelsError(f"{who}: {path} lacks the array(s) {missing}; it has "
                                     f"{data.files}.")
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise FedLabelsError(f"{who}: cannot read {path} as an .npz file ({exc}).") from None


def names_arrays(names: Sequence[str]) -> dict[str, np.ndarray]:
    """Feature names as ``shared.npz`` holds them: an image's pixel names as their (C, H, W)
    shape (``pixel_names``; a string per pixel took 27 million strings for 3 x 3000 x 3000
    images), other names as a string array (``feature_names``)."""
    if isinstance(names, PixelNames):
        return {"pixel_names": np.array(names.shape, dtype=np.int64)}
    return {"feature_names": np.array(list(names), dtype=str)}


def shared_feature_names(shared: Mapping[str, np.ndarray]) -> Sequence[str]:
    """:func:`names_arrays`' names (a file written before pixel_names, with a string per
    pixel, reads as its strings)."""
    if "pixel_names" in shared:
        return PixelNames(tuple(int(v) for v in np.asarray(shared["pixel_names"]).ravel()))
    return [str(f) for f in shared["feature_names"]]


def _private_from_csv(path: Path, target: str, shared: dict[str, np.ndarray],
                      who: str) -> tuple[np.ndarray, np.ndarray]:
    from fedlabels.data.csv_table import read_csv_frame

    try:  # a missing, empty or unparsable file, or a header naming a column twice: one line
        frame = read_csv_frame(path)
    except FedLabelsError as exc:
        raise FedLabelsError(f"{who}: {exc}") from None
    if target not in frame.columns:
        raise FedLabelsError(f"{who}: CSV {path} has no label column {target!r}; columns: "
                             f"{list(frame.columns)[:10]}.")
    raw = shared.get("raw_feature_names")  # public_pca: raw columns
    features = [str(f) for f in (shared_feature_names(shared) if raw is None else raw)]
    if "categorical" in shared:  # the table's own columns, one-hot encoded as U's were
        X = _one_hot_rows(frame, shared, features, f"{who}: CSV {path}")
    else:
        missing = [f for f in features if f not in frame.columns]
        if missing:  # as the simulator's predict and a categorical site's rows say it
            from fedlabels.data.preprocessing import SHARED_U_HAS, lacks_columns

            raise FedLabelsError(lacks_columns(f"{who}: CSV {path}", missing, features, [],
                                               "fill" in shared, SHARED_U_HAS))
        X = _numbers(frame, features, path, who)
    if "fill" in shared:  # U's medians (missing="public-median"): the site's gaps as U's
        from fedlabels.data.gaps import fill_gaps

        X = fill_gaps(X, shared["fill"])
    if "scale_mean" in shared:
        X = (X - shared["scale_mean"]) / shared["scale_std"]
    if "pca_components" in shared:  # U's principal components, as the federation's rows
        from fedlabels.data.public_pca import PublicPCA

        X = PublicPCA(shared["pca_mean"], shared["pca_components"], shared["pca_scale"],
                      explained_variance=float("nan")).project(X)
    lookup, accepted = label_lookup(shared)
    labels = frame[target].astype(str).to_numpy()
    unknown = sorted(set(labels) - set(lookup))
    if unknown:
        raise FedLabelsError(f"{who}: CSV {path} has label(s) {unknown[:5]} that are not among "
                             f"the federation's classes; write each label as {accepted}.")
    return X.astype(np.float32), np.array([lookup[v] for v in labels], dtype=np.int64)


def label_lookup(shared: Mapping[str, np.ndarray]) -> tuple[dict[str, int], str]:
    """The labels a site's own rows may carry, each with its class index, and how to list
    them: the shared file's ``class_names``, and where its ``class_descriptions`` give a
    class's documented meaning (breast_cancer's ``0`` is ``malignant``) that meaning too,
    unless it is another class's name or describes two classes."""
    names = [str(c) for c in shared["class_names"]]
    lookup = {name: i for i, name in enumerate(names)}
    described = [str(d) for d in shared.get("class_descriptions", [])]
    if len(described) != len(names):  # none described (or a shared file before 11-30)
        return lookup, "one of " + ", ".join(map(repr, names))
    meaning = [d if d and d not in lookup and described.count(d) == 1 else ""
               for d in described]
    lookup |= {d: i for i, d in enumerate(meaning) if d}
    return lookup, "one of " + ", ".join(f"{n!r} or {d!r}" if d else repr(n)
                                         for n, d in zip(names, meaning, strict=True))


def _one_hot_rows(frame: Any, shared: Mapping[str, np.ndarray], features: list[str],
                  what: str) -> np.ndarray:
    """A site's raw rows (``shared``'s ``raw_columns``) with its ``categorical`` columns
    one-hot encoded into ``features``, U's categories: one that U lacks encodes as none
    (all zeros, with a warning), as the simulator encodes it."""
    from fedlabels.data.preprocessing import SHARED_U_HAS, encode_frame

    return encode_frame(frame, [str(c) for c in shared["raw_columns"]],
                        [str(c) for c in shared["categorical"]], features, what,
                        filled="fill" in shared, of=SHARED_U_HAS)


def _numbers(frame: Any, features: list[str], path: Path, who: str) -> np.ndarray:
    """The CSV's feature columns as float64. A cell that is not a number (a decimal comma,
    a unit, a word) is one line naming its column, data row and value, as ``predict``'s
    (:func:`~fedlabels.data.columns.check_numbers`): it was a bare ``could not convert
    string to float`` that the coordinator saw as ``error: internal``."""
    import pandas as pd

    from fedlabels.data.columns import check_numbers

    check_numbers(frame, features, f"{who}: CSV {path}")
    return frame[features].apply(pd.to_numeric).to_numpy(dtype=np.float64)


def _private_from_images(path: Path, shared: dict[str, np.ndarray],
                         who: str) -> tuple[np.ndarray, np.ndarray]:
    """A site's own image folder (one sub-folder per class, named as in ``class_names``),
    resized to the federation's image shape, pixels in [0, 1] as U's."""
    from fedlabels.data.images import folder_images, unit_float32

    if "image_shape" not in shared:
        raise FedLabelsError(f"{who}: data-path {path} is a folder of images, but the shared "
                             "public set U is not images (shared.npz has no image_shape).")
    c, h, w = (int(s) for s in shared["image_shape"])
    # deep images scaled by the coordinator's declared peak, else by their format's full
    # scale, as the simulator reads them (never by the site's own brightest pixel)
    peak = float(shared["image_peak"]) if "image_peak" in shared else None
    try:  # U's channels: a site's grey images join a colour U (and back), as predict does
        images, y, classes = folder_images(path, (h, w), min_classes=1,
                                           mode="L" if c == 1 else "RGB", peak=peak)
    except FedLabelsError as exc:
        raise FedLabelsError(f"{who}: {exc}") from None
    pixels = images.pixels
    if c == 1 and images.colour is not None and images.colour.any():
        import warnings

        from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

        warnings.warn(FedLabelsWarning(
            f"{who}: {int(images.colour.sum())} image file(s) of {path} are stored in colour, "
            "but the federation's images are grey (shared.npz's image_shape, U's channels): "
            "they are read grey."), stacklevel=user_stacklevel())
    lookup, accepted = label_lookup(shared)
    unknown = sorted(set(classes) - set(lookup))
    if unknown:
        raise FedLabelsError(f"{who}: class folder(s) {unknown[:5]} in {path} are not among "
                             f"the federation's classes; name each folder {accepted}.")
    return unit_float32(pixels), np.array([lookup[classes[k]] for k in y], dtype=np.int64)


#: every node config key a site reads (here, and in site_state, snapshots, site_plan,
#: site_privacy and client_app); ``num-partitions`` is Flower's own, which fedlabels ignores
NODE_CONFIG_KEYS = ("partition-id", "data-path", "target", "shared-path", "identity-key",
                    "roster-sha256", "state-key",
                    "state-dir", "privacy-plan", "trust-coordinator", "max-steps",
                    "max-rounds", "ledger-dir",
                    "ledger-epsilon", "ledger-delta", "report-lifetime", "evaluate", "threads",
                    "num-partitions")


def node_flag(node_config: Mapping[str, Any], key: str, default: bool) -> bool:
    """A true/false node config ``key`` (``true``/``yes``/``1``, ``false``/``no``/``0``);
    another value is an error naming it."""
    raw = node_config.get(key, default)
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise FedLabelsError(f"node config {key} must be true or false, got {raw!r}.")


def node_threads(node_config: Mapping[str, Any], default: Any = 1) -> int:
    """The node config's ``threads`` (the torch threads of the site's ClientApps; ``default``
    where it names none): an integer >= 1, as a number or as digits (``deploy local
    --site-config threads=N`` gives text). The one check of it, for the site and for ``deploy
    local``, which refuses a bad value before anything starts."""
    return node_integer(node_config, "threads", default)


def node_integer(node_config: Mapping[str, Any], key: str, default: Any) -> int:
    """The node config's ``key`` (``default`` where it names none): an integer >= 1, as a
    number or as digits (``--site-config KEY=N`` gives text); another value is an error
    naming it."""
    raw = node_config.get(key, default)
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        value = int(raw.strip())
    else:
        value = raw if isinstance(raw, int) and not isinstance(raw, bool) else 0
    if value < 1:
        raise FedLabelsError(f"node config {key} must be an integer >= 1, got {raw!r}.")
    return value


def check_node_keys(node_config: Mapping[str, Any], who: str) -> None:
    """Refuse a node config key the site does not read: a misspelt ``privacy-plan`` or
    ``ledger-epsilon`` would otherwise leave the site without the protection it names."""
    unknown = [k for k in node_config if k not in NODE_CONFIG_KEYS]
    if unknown:
        key = unknown[0]
        raise FedLabelsError(f"{who}: unknown node config key {key!r}"
                             f"{did_you_mean(key, NODE_CONFIG_KEYS)}; a site reads "
                             f"{', '.join(NODE_CONFIG_KEYS)} (keys use hyphens).")


def load_site(node_config: dict[str, Any], node_id: int | None = None) -> SiteData:
    """Load and check this SuperNode's data; errors name the node and the file. A node
    config key the site does not read is refused first (:func:`check_node_keys`)."""
    who = node_label(node_config, node_id)
    check_node_keys(node_config, who)
    pid = node_config.get("partition-id")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
        raise FedLabelsError(f"{who}: node config needs partition-id=I with I in 0..m-1 (this "
                             f"site's client index); got {pid!r}.")
    shared = _load_npz(_path(node_config, "shared-path", who), who,
                       ("X_public", "X_test", "y_test", "class_names"))
    if "feature_names" not in shared and "pixel_names" not in shared:
        raise FedLabelsError(f"{who}: {_path(node_config, 'shared-path', who)} lacks the "
                             f"array(s) ['feature_names'] (or an image's pixel_names); it "
                             f"has {sorted(shared)}.")
    data_path = _path(node_config, "data-path", who, folder=True)
    if data_path.is_dir():
        X, y = _private_from_images(data_path, shared, who)
    elif data_path.suffix.lower() == ".csv":
        target = node_config.get("target")
        if not target:
            raise FedLabelsError(f"{who}: data-path {data_path} is a CSV; add target=COLUMN "
                                 "(the label column) to the node config.")
        X, y = _private_from_csv(data_path, str(target), shared, who)
    else:
        private = _load_npz(data_path, who, ("X", "y"))
        X, y = private["X"], private["y"]
    X_public = shared["X_public"]
    n_classes = len(shared["class_names"])
    if X.ndim != 2 or X.shape[1] != X_public.shape[1]:
        raise FedLabelsError(
            f"{who}: private data {data_path} has features of shape {X.shape[1:]} but the "
            f"shared public set U has {X_public.shape[1]} features; the site's data must use "
            "the same features (same columns, same order, same preprocessing) as U.")
    if len(X) != len(y) or len(y) == 0:
        raise FedLabelsError(f"{who}: private data {data_path} has {len(X)} rows and {len(y)} "
                             "labels; it needs at least one labelled example.")
    if not np.all(np.isfinite(X)):
        fill = (" (or have the run prepared with --missing public-median, whose shared.npz "
                "holds U's medians, and give this site's raw rows as a CSV)"
                if "fill" not in shared else "" if data_path.suffix.lower() == ".csv" else
                " (or give this site's raw rows as a CSV: its gaps are then filled with "
                "shared.npz's fill, U's medians)")
        raise FedLabelsError(f"{who}: private data {data_path} contains NaN or inf; impute or "
                             f"drop those rows{fill}.")
    y = np.asarray(y)
    if y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= n_classes:
        raise FedLabelsError(f"{who}: labels in {data_path} must be class indices in "
                             f"[0, {n_classes}); got dtype {y.dtype}, range "
                             f"[{y.min()}, {y.max()}].")
    return SiteData(partition_id=pid, private=ClientData(X.astype(np.float32),
                                                         y.astype(np.int64)),
                    X_public=X_public, X_test=shared["X_test"],
                    y_test=shared["y_test"].astype(np.int64),
                    class_names=[str(c) for c in shared["class_names"]],
                    scaling=(shared["scale_mean"], shared["scale_std"])
                    if "scale_mean" in shared and "scale_std" in shared else None,
                    image_shape=_image_shape(shared, X_public.shape[1], who),
                    trust=_site_trust(node_config, shared, pid, who),
                    shared_digest=shared_digest(shared))


def _site_trust(node_config: Mapping[str, Any], shared: Mapping[str, np.ndarray], pid: int,
                who: str) -> Any:
    """The site's identity key and the shared roster: both or neither; the roster must match
    the site's pin (``roster-sha256``) and hold the site's own key at its id."""
    has_roster, key = "roster_ids" in shared, node_config.get("identity-key")
    pin = node_config.get("roster-sha256")
    if not has_roster and not key and pin is None:
        return None
    if not has_roster:
        given = "identity-key" if key else "roster-sha256"  # pinned a roster, got none
        raise FedLabelsError(f"{who}: node config names {given} but the shared file has no "
                             f"roster; remove {given} or use the shared file of the same "
                             "`deploy prepare`.")
    if not key:
        raise FedLabelsError(f"{who}: the shared file holds a roster of identity keys; add "
                             "identity-key=/path/to/client_I.identity.key (the site's own, "
                             "from `fedlabels deploy identity` or `deploy prepare`) to the "
                             "node config.")
    from fedlabels.core.private_files import read_key
    from fedlabels.engines.flower.site_keys import check_roster_pin
    from fedlabels.secure.identity import site_trust

    private = read_key(Path(str(key)).expanduser(), "identity key",
                       "use the client_I.identity.key that `deploy identity` (or `deploy "
                       "prepare`) wrote.")
    where = f"shared-path {node_config.get('shared-path')}"  # the roster's file
    try:
        if pin is not None:
            check_roster_pin(pin, dict(shared), where)
        return site_trust(pid, private, shared, where)
    except FedLabelsError as exc:
        raise FedLabelsError(f"{who}: {exc}") from None


def _image_shape(shared: Mapping[str, np.ndarray], n_features: int,
                 who: str) -> tuple[int, int, int] | None:
    """shared.npz's ``image_shape`` (C, H, W), checked against U's width; None: no images."""
    if "image_shape" not in shared:
        return None
    shape = tuple(int(s) for s in np.asarray(shared["image_shape"]).reshape(-1))
    if len(shape) != 3 or min(shape) < 1 or shape[0] * shape[1] * shape[2] != n_features:
        raise FedLabelsError(f"{who}: the shared file's image_shape {list(shape)} does not fit "
                             f"U's {n_features} features; prepare the deployment again "
                             "(fedlabels deploy prepare).")
    return (shape[0], shape[1], shape[2])
