"""Seeded partitioners of a private pool into m client index sets.

Each returns a list of m sorted, disjoint int arrays whose union is ``range(n)``:
``iid``, label skew (``dirichlet:A1,A2``, ``shards:K``), quantity skew (``quantity:A[,MIN]``,
``powerlaw:A[,MIN]``) and a natural partition by a table's column (``column:NAME``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError, did_you_mean, missing_column


@dataclass(frozen=True)
class PartitionSpec:
    """A parsed partition spec (see :func:`parse_partition`)."""

    kind: str
    alpha1: float = 0.0
    alpha2: float = 0.0
    classes_per_client: int = 0
    min_size: int = 1  # quantity / powerlaw: every client gets at least this many examples
    column: str = ""  # column: the table column whose distinct values are the clients

    def __str__(self) -> str:
        if self.kind == "dirichlet":
            return f"dirichlet:{self.alpha1:g},{self.alpha2:g}"
        if self.kind == "shards":
            return f"shards:{self.classes_per_client}"
        if self.kind in ("quantity", "powerlaw"):
            least = f",{self.min_size}" if self.min_size != 1 else ""
            return f"{self.kind}:{self.alpha1:g}{least}"
        if self.kind == "column":
            return f"column:{self.column}"
        return self.kind


def parse_partition(spec: str | PartitionSpec) -> PartitionSpec:
    """Parse ``iid``, ``dirichlet:A1,A2`` (or ``dirichlet:A``), ``shards:K``,
    ``quantity:A[,MIN]``, ``powerlaw:A[,MIN]`` or ``column:NAME`` (NAME keeps its case)."""
    if isinstance(spec, PartitionSpec):
        return spec
    raw = str(spec).strip()
    text = raw.lower()
    usage = ("expected 'iid', 'dirichlet:A1,A2' or 'dirichlet:A' (A1 = A2 = A; e.g. "
             "dirichlet:100,0.01, dirichlet:0.5), 'shards:K', 'quantity:A[,MIN]', "
             "'powerlaw:A[,MIN]' or 'column:NAME'")
    if text == "iid":
        return PartitionSpec("iid")
    kind, _, arg = text.partition(":")
    if kind == "column":
        name = raw.partition(":")[2].strip()
        if not name:
            raise FedLabelsError(f"invalid partition {spec!r}: column:NAME needs the name of "
                                 "the column whose values are the clients (e.g. column:site).")
        return PartitionSpec("column", column=name)
    try:
        if kind == "dirichlet":
            parts = [float(a) for a in arg.split(",")]
            if len(parts) == 1:
                parts = parts * 2
            if len(parts) != 2 or min(parts) <= 0:
                raise ValueError
            return PartitionSpec("dirichlet", alpha1=parts[0], alpha2=parts[1])
        if kind in ("quantity", "powerlaw"):  # label-free: only the client sizes are skewed
            values = arg.split(",")
            alpha = float(values[0])
            least = int(values[1]) if len(values) == 2 else 1
            if len(values) > 2 or least < 1 or not (
                    alpha > 0 if kind == "quantity" else alpha >= 0):
                raise ValueError
            return PartitionSpec(kind, alpha1=alpha, min_size=least)
        if kind == "shards":
            k = int(arg)
            if k < 1:
                raise ValueError
            return PartitionSpec("shards", classes_per_client=k)
    except ValueError:
        raise FedLabelsError(f"invalid partition {spec!r}: {usage}; alphas must be > 0 "
                             "(powerlaw: >= 0), K >= 1 and MIN >= 1") from None
    close = did_you_mean(kind, ("iid", "dirichlet", "shards", "quantity", "powerlaw", "column"))
    raise FedLabelsError(f"unknown partition {spec!r}{close}: {usage}")


def every_class_in_test(order: np.ndarray, y: np.ndarray, n_test: int) -> np.ndarray:
    """``order`` (a permutation of the rows whose first ``n_test`` are the test split) with
    every class of at least two rows in the test split: a class the draw left out gets its
    first row from the rest, swapped for the last test row of the class most frequent in the
    test split (while that class keeps two rows there). No randomness is drawn, and where the
    draw already holds every class ``order`` comes back unchanged (the same split as before).
    """
    y = np.asarray(y, dtype=np.int64)
    out = np.array(order, copy=True)
    k = int(y.max()) + 1
    in_test = np.bincount(y[out[:n_test]], minlength=k)
    for cls in np.flatnonzero((np.bincount(y, minlength=k) >= 2) & (in_test == 0)):
        donor = int(np.argmax(in_test))
        if in_test[donor] < 2:
            break  # a test split smaller than the number of classes
        i = int(np.flatnonzero(y[out[:n_test]] == donor)[-1])
        j = n_test + int(np.flatnonzero(y[out[n_test:]] == cls)[0])
        out[i], out[j] = out[j], out[i]
        in_test[donor] -= 1
        in_test[cls] += 1
    return out


def partition_iid(n: int, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and split into m near-equal parts."""
    return [np.sort(p) for p in np.array_split(rng.permutation(n), n_clients)]


def largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to ``weights`` that sum to ``total`` (Hamilton's method: floors,
    then one more to the largest remainders; ties to the lower index). Remainders are
    compared to 9 decimals: equal quotas' remainders differ in the last bits of a float
    (2/3 came out as 0.66666666666666_61, _65 and _79), which broke ties by rounding."""
    share = total * np.asarray(weights, dtype=float) / float(np.sum(weights))
    counts = np.floor(share).astype(np.int64)
    extra = total - int(counts.sum())
    remainder = np.round(share - counts, 9)
    counts[np.argsort(-remainder, kind="stable")[:extra]] += 1
    return counts


def _check_min_size(n: int, n_clients: int, least: int, spec: str) -> None:
    if n < n_clients * least:
        raise FedLabelsError(f"partition {spec} gives every client at least {least} "
                             f"example(s), which needs {n_clients * least} private examples; "
                             f"only {n} are there: use more private data, fewer clients or "
                             "a smaller MIN.")


def _split_sizes(n: int, sizes: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle ``range(n)`` and cut it into consecutive parts of ``sizes``."""
    return [np.sort(p) for p in np.split(rng.permutation(n), np.cumsum(sizes)[:-1])]


def partition_quantity(n: int, n_clients: int, alpha: float, rng: np.random.Generator,
                       min_size: int = 1) -> list[np.ndarray]:
    """Quantity skew, blind to the labels: client sizes MIN + Multinomial(n - m MIN,
    Dirichlet(alpha)) (small alpha: very unequal sizes), rows shuffled."""
    _check_min_size(n, n_clients, min_size, f"quantity:{alpha:g},{min_size}")
    sizes = min_size + rng.multinomial(n - n_clients * min_size,
                                       rng.dirichlet(np.full(n_clients, alpha)))
    return _split_sizes(n, sizes, rng)


def partition_powerlaw(n: int, n_clients: int, exponent: float, rng: np.random.Generator,
                       min_size: int = 1) -> list[np.ndarray]:
    """Power-law (Zipf) quantity skew, blind to the labels: the client of rank r (a seeded
    order) gets MIN plus a share r^-A of the other n - m MIN examples (A = 0: equal sizes;
    A = 1: the largest client holds m / H_m times the mean), rows shuffled."""
    _check_min_size(n, n_clients, min_size, f"powerlaw:{exponent:g},{min_size}")
    weights = np.arange(1, n_clients + 1, dtype=float) ** -exponent
    sizes = min_size + largest_remainder(n - n_clients * min_size,
                                         weights[rng.permutation(n_clients)])
    return _split_sizes(n, sizes, rng)


def partition_column(sites: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """A natural partition: client i holds the rows whose site code is i (codes in
    ``0..m-1`` from :func:`split_column`; a site without rows leaves its client empty)."""
    codes = np.asarray(sites, dtype=np.int64)
    order = np.argsort(codes, kind="stable")
    return np.split(order, np.cumsum(np.bincount(codes, minlength=n_clients))[:-1])


def split_column(X: Any, name: str, n_clients: int) -> tuple[Any, np.ndarray, list[str]]:
    """``X`` without the column ``name`` (a DataFrame), each row's site code and the sites:
    client i is the i-th distinct value in sorted order (numeric order for a numeric column);
    the number of distinct values must equal ``n_clients``."""
    import pandas as pd  # lazily: importing fedlabels must not load pandas

    from fedlabels.data.lazy_rows import LazyRows

    if isinstance(X, LazyRows) and isinstance(X.table, pd.DataFrame):  # a table's images
        _, codes, names = split_column(X.table, name, n_clients)
        return X, codes, names
    if not isinstance(X, pd.DataFrame):
        raise FedLabelsError(f"partition column:{name} needs a table with named columns (a "
                             "csv:PATH:TARGET dataset or a pandas DataFrame); this dataset's "
                             "features are an unnamed matrix.")
    columns = [str(c) for c in X.columns]
    if name not in columns:
        raise FedLabelsError(f"partition column:{name}: the table "
                             f"{missing_column(name, columns)}.")
    col = X[X.columns[columns.index(name)]]
    if col.isna().any():
        raise FedLabelsError(f"partition column:{name}: {int(col.isna().sum())} row(s) have no "
                             "value in that column; drop or fill them first.")
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    groups = col.to_numpy() if numeric else col.astype(str).to_numpy()
    sites, codes = np.unique(groups, return_inverse=True)
    if len(sites) != n_clients:
        shown = ", ".join(str(v) for v in sites[:10]) + (" ..." if len(sites) > 10 else "")
        raise FedLabelsError(f"partition column:{name} makes one client per distinct value, "
                             f"and the column has {len(sites)} ({shown}); set --clients "
                             f"{len(sites)}.")
    return (X.drop(columns=[X.columns[columns.index(name)]]), codes.astype(np.int64),
            [str(v) for v in sites])


def _dirichlet_split(idx: np.ndarray, y: np.ndarray, n_clients: int, alpha: float,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Split ``idx`` so each class is shared among clients in Dirichlet(alpha) proportions."""
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for cls in np.unique(y[idx]):
        members = rng.permutation(idx[y[idx] == cls])
        props = rng.dirichlet(np.full(n_clients, alpha))
        cuts = (np.cumsum(props)[:-1] * len(members)).round().astype(int)
        for i, chunk in enumerate(np.split(members, cuts)):
            parts[i].append(chunk)
    return [np.concatenate(p) if p else np.empty(0, dtype=int) for p in parts]


def partition_dirichlet(y: np.ndarray, n_clients: int, alpha1: float, alpha2: float,
                        rng: np.random.Generator) -> list[np.ndarray]:
    """Two-part label-Dirichlet split (FedCT paper, Table 2).

    Half of the pool is distributed with Dirichlet(alpha1) class proportions, the other half
    with Dirichlet(alpha2); each client gets its share of both halves. Large alpha is close to
    iid, small alpha (e.g. 0.01) gives each client only a few classes.
    """
    perm = rng.permutation(len(y))
    half_a, half_b = perm[: len(y) // 2], perm[len(y) // 2 :]
    first = _dirichlet_split(half_a, y, n_clients, alpha1, rng)
    second = _dirichlet_split(half_b, y, n_clients, alpha2, rng)
    return [np.sort(np.concatenate([a, b])) for a, b in zip(first, second, strict=True)]


def partition_shards(y: np.ndarray, n_clients: int, classes_per_client: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Pathological split: each client holds examples of ``classes_per_client`` classes.

    Classes are assigned round-robin over a seeded permutation so that every class is held
    by at least one client whenever ``m * K >= C``; each class's examples are split evenly
    among the clients that hold it.
    """
    classes = np.unique(y)
    if classes_per_client > len(classes):
        raise FedLabelsError(f"partition shards:{classes_per_client} asks for "
                             f"{classes_per_client} classes per client, but the private data "
                             f"has {len(classes)}; use shards:K with K from 1 to "
                             f"{len(classes)} (K = {len(classes)}: every client holds every "
                             "class).")
    k = classes_per_client
    order = rng.permutation(classes)
    holders: dict[int, list[int]] = {int(c): [] for c in classes}
    for i in range(n_clients):
        for j in range(k):
            holders[int(order[(i * k + j) % len(classes)])].append(i)
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for cls, owners in holders.items():
        if not owners:
            continue  # no client holds this class: its examples stay unused
        members = rng.permutation(np.flatnonzero(y == cls))
        for owner, chunk in zip(owners, np.array_split(members, len(owners)), strict=True):
            parts[owner].append(chunk)
    return [np.sort(np.concatenate(p)) if p else np.empty(0, dtype=int) for p in parts]


def partition(y: np.ndarray, n_clients: int, spec: str | PartitionSpec,
              rng: np.random.Generator, groups: np.ndarray | None = None) -> list[np.ndarray]:
    """Partition indices ``0..len(y)-1`` among ``n_clients`` according to ``spec``;
    ``column:NAME`` needs ``groups``, each index's site code (:func:`split_column`)."""
    parsed = parse_partition(spec)
    if parsed.kind == "iid":
        parts = partition_iid(len(y), n_clients, rng)
    elif parsed.kind == "quantity":
        parts = partition_quantity(len(y), n_clients, parsed.alpha1, rng, parsed.min_size)
    elif parsed.kind == "powerlaw":
        parts = partition_powerlaw(len(y), n_clients, parsed.alpha1, rng, parsed.min_size)
    elif parsed.kind == "column":
        if groups is None or len(groups) != len(y):
            raise FedLabelsError(f"partition {parsed} needs the column's value for every row "
                                 "(make_federation takes it from the table).")
        parts = partition_column(groups, n_clients)
    elif parsed.kind == "dirichlet":
        parts = partition_dirichlet(y, n_clients, parsed.alpha1, parsed.alpha2, rng)
    else:
        parts = partition_shards(y, n_clients, parsed.classes_per_client, rng)
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (f" and {len(empty) - 10} more"
                                                   if len(empty) > 10 else "")
        raise FedLabelsError(
            f"partition {parsed} leaves {len(empty)} of {n_clients} clients with no data "
            f"(client(s) {shown}; {len(y)} private examples in all); use more private data, "
            "fewer clients, or a less skewed partition (larger alpha, more classes per client)")
    return parts
