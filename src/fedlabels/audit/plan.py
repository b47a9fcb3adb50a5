"""Members, non-members, attacker data and the attacker's query set for one audit.

* **members** of client c: ``n_members`` records drawn from c's private set;
* **non-members**: the same number of held-out records from the same distribution (drawn
  from the federation's test split, which no party trains on), shared by all clients, so
  every per-client attack is balanced;
* **ghost members**: as many further held-out records that no client trains on; they take
  the members' place in :meth:`AuditPlan.null_plan` (the null baseline);
* **attacker data**: a further disjoint part of the test split, on which the attacker trains
  its reference / shadow models (``n_attacker``) and draws RMIA's population points z
  (``n_population``); the rest of the test split stays the evaluation set for ACC;
* the **query set** Q: all candidates (ghosts included), the population points and ``aug_k``
  Gaussian-perturbed copies of every candidate (label-only augmentation attack; the noise
  has standard deviation ``aug_sigma`` times each feature's standard deviation in the
  attacker data).
  Query-based threat models insert Q into the public set U; white-box ones evaluate the
  reconstructed model on Q.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.data import Federation
from fedlabels.privacy.attacks import gaussian_copies

MIN_MEMBERS = 10
MIN_ATTACKER = 20  # each reference model trains on half: at least 10 records
MIN_POPULATION = 10


@dataclass(frozen=True)
class AuditPlan:
    """Index maps of one audit; every ``*_index`` points into ``X_query``."""

    X_query: np.ndarray
    y_query: np.ndarray
    cand_index: dict[int, np.ndarray]  # client -> (2n,) candidates (members first)
    membership: dict[int, np.ndarray]  # client -> (2n,) 1 = member
    aug_index: dict[int, np.ndarray]  # client -> (k, 2n) perturbed copies of the candidates
    pop_index: np.ndarray  # (n_z,) population points z
    X_attacker: np.ndarray
    y_attacker: np.ndarray
    X_attacker_aug: np.ndarray  # (k, n_a, d) perturbed copies of the attacker data
    evaluation: Federation  # the federation with the test split reduced to the evaluation part
    ghost_index: np.ndarray  # (n,) ghost members: held-out records playing members (null)
    ghost_aug_index: np.ndarray  # (k, n) their perturbed copies
    settings: dict[str, float | int | str] = field(default_factory=dict)

    @property
    def clients(self) -> list[int]:
        return sorted(self.cand_index)

    def candidate_labels(self, cid: int) -> np.ndarray:
        return self.y_query[self.cand_index[cid]]

    def null_plan(self) -> AuditPlan:
        """The same plan with every client's members replaced by the ghost members: records
        no client trained on, so any attack's AUC on it is a null baseline (about 0.5)."""
        n = len(self.ghost_index)
        cand = {c: np.concatenate([self.ghost_index, idx[n:]])
                for c, idx in self.cand_index.items()}
        aug = {c: np.concatenate([self.ghost_aug_index, idx[:, n:]], axis=1)
               for c, idx in self.aug_index.items()}
        return replace(self, cand_index=cand, aug_index=aug)

    def with_queries_in_public(self) -> tuple[Federation, int]:
        """The federation with Q appended to U, and the offset of Q inside U."""
        fed = self.evaluation
        # U without labels (a public set of the user's own): none for the diagnostics either
        y_pub = None if fed.y_public is None else np.concatenate([fed.y_public, self.y_query])
        return replace(fed, X_public=np.concatenate([fed.X_public, self.X_query]),
                       y_public=y_pub), len(fed.X_public)


@dataclass(frozen=True)
class AuditSizes:
    """What the audit draws from the split: per-client members (as many non-members and
    ghost members), attacker records, population points; ``notes`` say what was reduced."""

    members: int
    attacker: int
    population: int
    evaluation: int
    notes: tuple[str, ...] = ()


def _from_u(federation: Federation, n_test: int) -> str:
    """Where a larger held-out split's rows may have to come from: U."""
    extra, n_public = n_test - len(federation.y_test), len(federation.X_public)
    if not 0 < extra < n_public:
        return ""
    return (f" (with --unlabeled {n_public - extra} or less where the dataset has no "
            "rows to spare)")


def size_audit(federation: Federation, clients: list[int], *, n_members: int,
               n_attacker: int | None, n_population: int, min_evaluation: int = 20
               ) -> AuditSizes:
    """Fit the asked sizes into what the split offers, shrinking them in proportion.

    The held-out split must supply non-members and ghost members (``members`` each),
    attacker data, population points and at least ``min_evaluation`` records for ACC.
    Raises :class:`FedLabelsError` naming flag values that work when even the smallest
    useful audit (``MIN_MEMBERS`` members, ``MIN_ATTACKER`` attacker records,
    ``MIN_POPULATION`` population points) does not fit.
    """
    smallest = min(len(federation.clients[c]) for c in clients)
    if n_members < MIN_MEMBERS:
        raise FedLabelsError(f"too few candidates: --audit-members {n_members}; an attack needs "
                             f"at least {MIN_MEMBERS} members and as many non-members.")
    if smallest < MIN_MEMBERS:
        raise FedLabelsError(
            f"too few candidates: the smallest audited client holds {smallest} records; an "
            f"attack needs at least {MIN_MEMBERS} members. Use --private-per-client "
            f"{MIN_MEMBERS} or more (or --audit-clients with larger clients).")
    if n_population < 1:
        raise FedLabelsError(f"n_population must be >= 1, got {n_population}.")
    mean_size = int(np.mean([len(c) for c in federation.clients]))
    asked_att = 2 * mean_size if n_attacker is None else int(n_attacker)
    if asked_att < 2:
        raise FedLabelsError(f"n_attacker must be >= 2, got {asked_att}.")
    mem = min(int(n_members), smallest)
    notes = [] if mem == n_members else [
        f"members per client {mem} (asked {n_members}; the smallest client holds {smallest})"]
    n_test = len(federation.y_test)
    keep_eval = max(min_evaluation, n_test // 5)  # when shrinking: a fifth stays for ACC
    budget = n_test - min_evaluation
    need = 2 * mem + asked_att + n_population
    att, pop = asked_att, n_population
    if need > budget:
        floor = 2 * MIN_MEMBERS + min(asked_att, MIN_ATTACKER) + min(n_population,
                                                                     MIN_POPULATION)
        if floor > budget:
            raise FedLabelsError(
                f"no useful audit fits: the held-out split has {n_test} records, the smallest "
                f"audit needs {floor + min_evaluation} ({MIN_MEMBERS} non-members + "
                f"{MIN_MEMBERS} ghost members + {min(asked_att, MIN_ATTACKER)} attacker + "
                f"{min(n_population, MIN_POPULATION)} population + {min_evaluation} evaluation)."
                f" Use --test {floor + min_evaluation} or more.")
        budget = max(floor, n_test - keep_eval)
        f = budget / need
        low = (MIN_MEMBERS, min(asked_att, MIN_ATTACKER), min(n_population, MIN_POPULATION))
        mem, att, pop = (max(lo, int(v * f)) for lo, v in zip(low, (mem, asked_att,
                                                                   n_population), strict=True))
        while 2 * mem + att + pop > budget:  # the minima pushed it over: trim the largest slack
            slack = (2 * (mem - low[0]), att - low[1], pop - low[2])
            i = int(np.argmax(slack))
            mem, att, pop = (v - (j == i) for j, v in enumerate((mem, att, pop)))
        notes.append(
            f"the held-out split ({n_test} records) is too small for {need} audit records + "
            f"{min_evaluation} evaluation: reduced to {mem} members per client (as many "
            f"non-members and ghost members), {att} attacker records (asked {asked_att}), "
            f"{pop} population points (asked {n_population}), keeping "
            f"{n_test - 2 * mem - att - pop} for ACC; a held-out split (--test) of "
            f"{need + keep_eval} records fits the asked sizes"
            + _from_u(federation, need + keep_eval))
    return AuditSizes(mem, att, pop, n_test - 2 * mem - att - pop, tuple(notes))


def make_plan(federation: Federation, *, n_members: int = 200, n_attacker: int | None = None,
              n_population: int = 200, aug_k: int = 4, aug_sigma: float = 0.5,
              clients: list[int] | None = None, seed: int = 0,
              min_evaluation: int = 20) -> AuditPlan:
    """Draw members, non-members, ghost members, attacker data and population points (seeded).

    Sizes come from :func:`size_audit`: ``n_members`` is capped at the smallest attacked
    client's private set; ``n_attacker`` defaults to twice the mean client size (so each
    reference model trains on half of it, as large as a client's set); all shrink in
    proportion when the held-out split is too small (``settings["sizing"]`` says so).
    The records come from ``federation``; ``n_population`` population points, ``aug_k``
    copies of each candidate perturbed by ``aug_sigma`` (the module docstring), and at
    least ``min_evaluation`` test records kept for ACC. ``clients`` are the attacked clients
    (default: all); ``seed`` seeds every draw.
    """
    m = federation.n_clients
    clients = list(range(m)) if clients is None else sorted(set(clients))
    bad = [c for c in clients if not 0 <= c < m]
    if bad:
        raise FedLabelsError(f"audited clients {bad} do not exist; the federation has "
                             f"clients 0..{m - 1}.")
    if not clients:
        raise FedLabelsError("no client to audit; give at least one client index.")
    if aug_k < 1 or aug_sigma < 0:
        raise FedLabelsError(f"augmentation needs k >= 1 copies and sigma >= 0; got k={aug_k}, "
                             f"sigma={aug_sigma}.")
    sizes = size_audit(federation, clients, n_members=n_members, n_attacker=n_attacker,
                       n_population=n_population, min_evaluation=min_evaluation)
    n_mem, n_att, n_population = sizes.members, sizes.attacker, sizes.population
    n_test = len(federation.y_test)

    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA0D17]))
    order = rng.permutation(n_test)
    non_idx = order[:n_mem]
    att_idx = order[n_mem : n_mem + n_att]
    pop_idx = order[n_mem + n_att : n_mem + n_att + n_population]
    used = n_mem + n_att + n_population
    ghost_idx = order[used : used + n_mem]  # held out: no client trains on them
    eval_idx = np.sort(order[used + n_mem :])
    Xt, yt = federation.X_test, federation.y_test

    parts_X = []
    parts_y = []
    mem_pos: dict[int, np.ndarray] = {}
    offset = 0
    for c in clients:
        data = federation.clients[c]
        pick = np.sort(rng.choice(len(data), size=n_mem, replace=False))
        parts_X.append(data.X[pick])
        parts_y.append(data.y[pick])
        mem_pos[c] = np.arange(offset, offset + n_mem)
        offset += n_mem
    non_pos = np.arange(offset, offset + n_mem)
    ghost_pos = np.arange(offset + n_mem, offset + 2 * n_mem)
    pop_pos = np.arange(offset + 2 * n_mem, offset + 2 * n_mem + n_population)
    parts_X += [Xt[non_idx], Xt[ghost_idx], Xt[pop_idx]]
    parts_y += [yt[non_idx], yt[ghost_idx], yt[pop_idx]]
    n_base = offset + 2 * n_mem  # members, non-members and ghosts: the perturbed rows
    X_base = np.concatenate(parts_X).astype(np.float32)
    y_base = np.concatenate(parts_y)
    noise = aug_sigma * Xt[att_idx].std(axis=0)  # per feature, from the attacker's data
    aug = gaussian_copies(X_base[:n_base], aug_k, noise, rng)  # (k, n_base, d)
    X_query = np.concatenate([X_base, aug.reshape(-1, X_base.shape[1])])
    y_query = np.concatenate([y_base, np.tile(y_base[:n_base], aug_k)])
    aug_start = len(X_base)
    cand_index, membership, aug_index = {}, {}, {}
    for c in clients:
        cand = np.concatenate([mem_pos[c], non_pos])
        cand_index[c] = cand
        membership[c] = np.r_[np.ones(n_mem, dtype=np.int8), np.zeros(n_mem, dtype=np.int8)]
        aug_index[c] = aug_start + np.arange(aug_k)[:, None] * n_base + cand[None, :]
    X_att, y_att = Xt[att_idx].astype(np.float32), yt[att_idx]
    evaluation = replace(federation, X_test=Xt[eval_idx], y_test=yt[eval_idx])
    return AuditPlan(
        X_query=X_query, y_query=y_query, cand_index=cand_index, membership=membership,
        aug_index=aug_index, pop_index=pop_pos, X_attacker=X_att, y_attacker=y_att,
        X_attacker_aug=gaussian_copies(X_att, aug_k, noise, rng), evaluation=evaluation,
        ghost_index=ghost_pos,
        ghost_aug_index=aug_start + np.arange(aug_k)[:, None] * n_base + ghost_pos[None, :],
        settings={"n_members_per_client": n_mem, "n_nonmembers": n_mem, "n_ghosts": n_mem,
                  "n_attacker": n_att, "n_population": n_population, "aug_k": aug_k,
                  "aug_sigma": aug_sigma, "n_query": len(X_query),
                  "n_evaluation": len(eval_idx), "seed": seed,
                  "sizing": "; ".join(sizes.notes) or "as asked"})
