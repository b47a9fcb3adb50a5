"""Seeded partitioners of a private pool into m client index sets.

Each returns a list of m sorted, disjoint int arrays whose union is ``range(n)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedlabels.errors import FedLabelsError


@dataclass(frozen=True)
class PartitionSpec:
    """A parsed partition spec: ``iid``, ``dirichlet:A1,A2``, ``shards:K`` or ``quantity:A``."""

    kind: str
    alpha1: float = 0.0
    alpha2: float = 0.0
    classes_per_client: int = 0

    def __str__(self) -> str:
        if self.kind == "dirichlet":
            return f"dirichlet:{self.alpha1:g},{self.alpha2:g}"
        if self.kind == "shards":
            return f"shards:{self.classes_per_client}"
        if self.kind == "quantity":
            return f"quantity:{self.alpha1:g}"
        return self.kind


def parse_partition(spec: str | PartitionSpec) -> PartitionSpec:
    """Parse ``iid``, ``dirichlet:A1,A2`` (or ``dirichlet:A``), ``shards:K`` or
    ``quantity:A``."""
    if isinstance(spec, PartitionSpec):
        return spec
    text = str(spec).strip().lower()
    usage = ("expected 'iid', 'dirichlet:A1,A2' (e.g. dirichlet:100,0.01), 'shards:K' or "
             "'quantity:A'")
    if text == "iid":
        return PartitionSpec("iid")
    kind, _, arg = text.partition(":")
    try:
        if kind == "dirichlet":
            parts = [float(a) for a in arg.split(",")]
            if len(parts) == 1:
                parts = parts * 2
            if len(parts) != 2 or min(parts) <= 0:
                raise ValueError
            return PartitionSpec("dirichlet", alpha1=parts[0], alpha2=parts[1])
        if kind == "quantity":  # label-free: only the client sizes are skewed
            alpha = float(arg)
            if not alpha > 0:
                raise ValueError
            return PartitionSpec("quantity", alpha1=alpha)
        if kind == "shards":
            k = int(arg)
            if k < 1:
                raise ValueError
            return PartitionSpec("shards", classes_per_client=k)
    except ValueError:
        raise FedLabelsError(f"invalid partition {spec!r}: {usage}; alphas must be > 0 and "
                             "K >= 1") from None
    raise FedLabelsError(f"unknown partition {spec!r}: {usage}")


def partition_iid(n: int, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and split into m near-equal parts."""
    return [np.sort(p) for p in np.array_split(rng.permutation(n), n_clients)]


def partition_quantity(n: int, n_clients: int, alpha: float,
                       rng: np.random.Generator) -> list[np.ndarray]:
    """Quantity skew, blind to the labels: client sizes 1 + Multinomial(n - m,
    Dirichlet(alpha)) (small alpha: very unequal sizes), rows shuffled."""
    if n < n_clients:
        return partition_iid(n, n_clients, rng)  # some client stays empty: reported below
    sizes = 1 + rng.multinomial(n - n_clients, rng.dirichlet(np.full(n_clients, alpha)))
    return [np.sort(p) for p in np.split(rng.permutation(n), np.cumsum(sizes)[:-1])]


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
    k = min(classes_per_client, len(classes))
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
              rng: np.random.Generator) -> list[np.ndarray]:
    """Partition indices ``0..len(y)-1`` among ``n_clients`` according to ``spec``."""
    parsed = parse_partition(spec)
    if parsed.kind == "iid":
        parts = partition_iid(len(y), n_clients, rng)
    elif parsed.kind == "quantity":
        parts = partition_quantity(len(y), n_clients, parsed.alpha1, rng)
    elif parsed.kind == "dirichlet":
        parts = partition_dirichlet(y, n_clients, parsed.alpha1, parsed.alpha2, rng)
    else:
        parts = partition_shards(y, n_clients, parsed.classes_per_client, rng)
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise FedLabelsError(
            f"partition {parsed} leaves client(s) {empty} with no data "
            f"({len(y)} private examples over {n_clients} clients); use more private data, "
            "fewer clients, or a less skewed partition (larger alpha, more classes per client)")
    return parts
