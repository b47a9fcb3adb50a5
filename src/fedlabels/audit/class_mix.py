"""Whether the audited clients' members and the shared non-members have the same class mix.

Members are drawn from each client's private set, non-members (and ghost members) from the
held-out split, neither stratified by class. Where a client's data holds a class mix other
than the held-out split's (a non-iid partition: ``dirichlet``, ``shards``, ``column``), a
score that depends on the class alone separates that client's members from the non-members:
the attack's AUC then measures which classes the client holds, not only membership, and the
null VUL does not show it (the ghost members are drawn like the non-members).

The test: Pearson's χ² of the (clients + 1) × classes table of the candidates' labels (one row
per audited client's members, one for the non-members), its p-value by a seeded permutation
of the labels over the rows (exact in finite samples; the χ² approximation fails with the
small expected counts of a small audit). Each client's total variation distance between its
members' and the non-members' class shares says which clients differ.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: permutations of the test (the smallest p-value it can give is 1 / (N_PERM + 1))
N_PERM = 1999
#: the level at which the audit notes a class-mix difference
LEVEL = 0.01


def chi2_statistic(counts: np.ndarray) -> float:
    """Pearson's χ² of a contingency table (rows: groups, columns: classes); columns with no
    count are dropped."""
    table = np.asarray(counts, dtype=np.float64)
    table = table[:, table.sum(axis=0) > 0]
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    return float(((table - expected) ** 2 / expected).sum())


def permutation_p_value(groups: np.ndarray, labels: np.ndarray, *, n_perm: int = N_PERM,
                        seed: int = 0) -> tuple[float, float]:
    """(χ², p) of the homogeneity of ``labels``' class mix over ``groups`` (integer codes),
    the p-value by ``n_perm`` seeded permutations of the labels: (1 + #{χ²_perm ≥ χ²}) /
    (n_perm + 1)."""
    g = np.asarray(groups, dtype=np.int64)
    y = np.asarray(labels, dtype=np.int64)
    n_groups, n_classes = int(g.max()) + 1, int(y.max()) + 1

    def table(ys: np.ndarray) -> np.ndarray:
        return np.bincount(g * n_classes + ys, minlength=n_groups * n_classes).reshape(
            n_groups, n_classes)

    observed = chi2_statistic(table(y))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC1A55]))
    null = np.array([chi2_statistic(table(rng.permutation(y))) for _ in range(n_perm)])
    return observed, float((1 + np.sum(null >= observed * (1 - 1e-12))) / (n_perm + 1))


def class_mix(labels: dict[int, np.ndarray], membership: dict[int, np.ndarray], *,
              n_perm: int = N_PERM, seed: int = 0) -> dict[str, Any]:
    """The test for an audit's candidates: ``labels[c]`` and ``membership[c]`` (1 = member)
    of client c's candidates, whose non-members are the same records for every client."""
    clients = sorted(labels)
    first = clients[0]
    non = labels[first][membership[first] == 0]
    groups = [np.full(int((membership[c] == 1).sum()), i) for i, c in enumerate(clients)]
    ys = [labels[c][membership[c] == 1] for c in clients]
    stat, p = permutation_p_value(np.concatenate([*groups, np.full(len(non), len(clients))]),
                                  np.concatenate([*ys, non]), n_perm=n_perm, seed=seed)
    k = int(max(int(v.max()) for v in (*ys, non))) + 1
    share_non = np.bincount(non, minlength=k) / len(non)
    tvd = {str(c): round(float(0.5 * np.abs(np.bincount(y, minlength=k) / len(y)
                                            - share_non).sum()), 4)
           for c, y in zip(clients, ys, strict=True)}
    return {"test": f"permutation chi-square ({n_perm} permutations) of the class mix of each "
                    "client's members and the shared non-members",
            "chi2": round(stat, 4), "p_value": p, "level": LEVEL,
            "differs": p < LEVEL, "total_variation": tvd}


def class_mix_note(entry: dict[str, Any]) -> str | None:
    """A sentence when the class mixes differ at :data:`LEVEL`; None otherwise."""
    if not entry["differs"]:
        return None
    worst = max(entry["total_variation"], key=lambda c: entry["total_variation"][c])
    return (f"the members' class mix differs from the non-members' (permutation chi-square, "
            f"p = {entry['p_value']:.4f}; class-share total variation up to "
            f"{entry['total_variation'][worst]:.2f}, client {worst}): with a non-iid partition, "
            "or a held-out split unlike the clients' data, an attack's AUC also measures which "
            "classes a client holds, and the null VUL (ghost members, drawn like the "
            "non-members) does not show it")
