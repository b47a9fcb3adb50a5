"""subsample-aggregate: PATE inside each client — k teachers on disjoint parts, GNMax vote.

Each round the server names a seeded subset Q_t of U (``label_queries`` points; all of U by
default). Every client

1. trains its own model as FedCT does (on D_i ∪ P; it is only evaluated, never sent);
2. splits D_i into k (``teachers``) disjoint parts — a record's part is a keyed hash of the
   record itself (features and label), so adding or removing one record changes exactly one
   part and no other record moves;
3. trains teacher j afresh on part j ∪ P (P: the consensus-labelled U, post-processing of
   earlier releases), ``teacher_steps`` steps for torch models, one fit otherwise;
4. releases, for every point of Q_t, ``argmax_c (n_c + N(0, σ²))`` of its teachers' vote
   counts n (GNMax; noise from its OS-entropy generator, never the run seed).

The server forms the plurality (FedCT's consensus) on Q_t and keeps earlier rounds' labels
elsewhere (post-processing).

Privacy, per client, record-level with one record of one client added or removed: the
record trains one teacher, so one vote moves (or appears) — L2 sensitivity √2 on the vote
counts. (A replacement is a removal plus an addition, two parts: group privacy, 2ε.) Every
released label is a GNMax query, a Gaussian mechanism of ratio √2/σ post-processed by argmax;
a client's ε composes every label it released in every round (adaptively; the teachers' use
of P is post-processing) exactly, as one Gaussian mechanism of μ = √(2·labels)/σ (Balle &
Wang 2018's analytic Gaussian; the RDP bound λ/σ² a label, Papernot et al. 2018 Prop. 8, is
reported beside it), and σ is calibrated with the same accountant so the planned rounds ×
|Q_t| labels meet ``epsilon``. With ``data_dependent`` each client also sends the
data-dependent RDP of its own vote counts (Thm. 6): reported beside the guarantee, computed
from private votes and so **not itself DP** (no smooth-sensitivity release), and sent
outside the guarantee.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedlabels.comm import Message, pack_labels, unpack_labels
from fedlabels.consensus import ABSTAIN, vote_counts
from fedlabels.learners import is_iterative
from fedlabels.method.base import Grid
from fedlabels.method.message_config import SEED_MAX, own_count, real, whole
from fedlabels.methods.distillation.fedmd import subset_indices
from fedlabels.methods.fedct.mechanisms.base import (
    CLIENTS_ENFORCE,
    LabelMechanism,
    refuse_less_noise,
)

if TYPE_CHECKING:
    from fedlabels.methods.fedct.dp_fedct import DPFedCTClient, DPFedCTServer

SA_ASSUMPTIONS = (
    "honest clients that run the mechanism with their own OS entropy and take its "
    "parameters from their own options; the server may deviate from the protocol; no "
    "collusion needed: the releases are DP against anyone who sees them",
    "each private record trains exactly one of its client's k teachers (disjoint parts by a "
    "hash of the record itself), so adding or removing one record moves one vote: L2 "
    "sensitivity √2",
    "the consensus, P and training on it are post-processing; the clients' own models are "
    "trained on all their data, never sent and not protected",
)
SA_NEIGHBOURING = ("record-level: one private record of one client added or removed (one "
                   "teacher's vote moves or appears: L2 √2); replacing a record is two such "
                   "steps (group privacy: 2ε)")
DD_NOTE = ("data-dependent RDP (Papernot et al. 2018, Thm. 6) of the client's own vote "
           "counts: computed from private data and sent without noise, so neither it nor the "
           "ε derived from it is differentially private (no smooth-sensitivity release)")


@dataclass(frozen=True)
class SubsampleAggregateEvent:
    """One round: ``n_queries`` GNMax labels with noise ``sigma`` from each client in
    ``clients``; ``dd_rdp`` (with ``data_dependent``) each one's data-dependent RDP."""

    sigma: float
    n_queries: int
    clients: tuple[int, ...]
    dd_rdp: tuple[tuple[float, ...], ...] | None = None

    def client_part(self, cid: int) -> Any:
        """What client ``cid`` released this round: its GNMax labels (None: it released
        none), as a server's :class:`~fedlabels.privacy.ledger.Ledger` accounts them."""
        from fedlabels.privacy.events import GNMaxEvent

        return (GNMaxEvent(self.sigma, self.n_queries, self.n_queries)
                if cid in self.clients else None)


def record_parts(X: np.ndarray, y: np.ndarray, k: int, key: int) -> np.ndarray:
    """Part 0..k-1 of every record: a keyed BLAKE2b hash of its features and label, so a
    record's part depends on that record alone."""
    rows = np.ascontiguousarray(np.column_stack([np.asarray(X, dtype=np.float64),
                                                 np.asarray(y, dtype=np.float64)]))
    secret = int(key).to_bytes(8, "little", signed=False)
    digests = [hashlib.blake2b(r.tobytes(), key=secret, digest_size=8).digest() for r in rows]
    return (np.frombuffer(b"".join(digests), dtype="<u8") % np.uint64(k)).astype(np.int64)


def teacher_votes(client: DPFedCTClient, rows: np.ndarray, k: int, steps: int) -> np.ndarray:
    """Hard labels on U[rows] of fresh teachers, teacher j trained on part j ∪ P: one row
    per non-empty part (a teacher without records casts no vote; adding a record to its
    part then adds one vote, L2 change 1 ≤ √2)."""
    from sklearn.base import clone

    d = client.training_data()
    parts = record_parts(d.X, d.y, k, client.seed)
    present = np.unique(parts)
    aux = None if d.X_aux is None else (d.X_aux if d.aux_index is None
                                        else d.X_aux[d.aux_index])
    U = client.public[rows]
    votes = np.empty((len(present), len(rows)), dtype=np.int64)
    for i, j in enumerate(present):  # k models: the loop is over teachers, each step is vectorised
        seed = int(np.random.SeedSequence([client.seed, int(j), 0x5A]).generate_state(1)[0]
                   % (2**31 - 1))
        teacher = clone(client.learner)
        if "random_state" in teacher.get_params():
            teacher.set_params(random_state=seed)
        X, y = d.X[parts == j], d.y[parts == j]
        if is_iterative(teacher):
            teacher.train_steps(X, y, steps, aux, d.y_aux)
        elif aux is not None and d.y_aux is not None:
            teacher.fit(np.concatenate([X, aux]), np.concatenate([y, d.y_aux]))
        else:
            teacher.fit(X, y)
        votes[i] = np.asarray(teacher.predict(U)).astype(np.int64)
    return votes


class SubsampleAggregateMechanism(LabelMechanism):
    """GNMax of each client's own k teachers on the round's queries; the labels accounted
    as one Gaussian mechanism (exact composition)."""

    name = "subsample-aggregate"
    summary = ("subsample-aggregate: each client's k teachers (disjoint parts of its data) "
               "vote on the round's queries of U; the noisy argmax (GNMax) is released")
    uses_sensitivity = False
    calibrates_at_build = True  # σ from the total ε over the planned rounds × queries

    def __init__(self) -> None:
        self.sigma: float | None = None

    # ------------------------------------------------------------------ client side
    def own_noise(self, client: DPFedCTClient) -> dict[str, Any]:
        """σ, k, the queries per round and the teachers' steps from the client's options;
        its ledger states the accountant that calibrated σ (``calibrated_by``)."""
        from fedlabels.privacy.vote_accounting import GNMAX_ACCOUNTANT, calibrate_gnmax_sigma

        opts, rounds = client.options, client.settings.rounds
        n = len(client.public)
        q = n if opts.label_queries is None else min(int(opts.label_queries), n)
        client.ledger.calibrated_by = GNMAX_ACCOUNTANT
        return {"vote_sigma": calibrate_gnmax_sigma(opts.epsilon, rounds * q, opts.delta),
                "subset_size": q, "teachers": opts.teachers,
                "teacher_steps": (client.settings.period if opts.teacher_steps is None
                                  else opts.teacher_steps),
                "data_dependent": bool(opts.data_dependent)}

    def client_noise(self, client: DPFedCTClient, config: Mapping[str, Any]) -> dict[str, Any]:
        from fedlabels.core.errors import BudgetRefusal, ParameterRefusal

        own = client.own_noise()
        sigma = refuse_less_noise(client, "vote_sigma", real(config, "vote_sigma", client.cid),
                                  own["vote_sigma"], noisier_above=True)
        size = whole(config, "subset_size", client.cid)
        if not 0 < size <= own["subset_size"]:
            raise BudgetRefusal(f"client {client.cid}: the server asked for {size} labels, "
                                f"this client's options plan {own['subset_size']} per round; "
                                "refusing.")
        if whole(config, "teachers", client.cid, 1) != own["teachers"]:
            raise ParameterRefusal(f"client {client.cid}: the server asked for "
                                   f"{config['teachers']} teachers, this client's options "
                                   f"say {own['teachers']}; refusing.",
                                   named=f"the site's teachers is {own['teachers']}")
        own_count(config, "teacher_steps", client.cid, own["teacher_steps"])  # never 2⁶²
        return {**own, "vote_sigma": sigma, "subset_size": size,
                "subset_seed": whole(config, "subset_seed", client.cid, 0, SEED_MAX)}

    def release(self, client: DPFedCTClient, message: Message,
                noise: dict[str, Any]) -> Message:
        from fedlabels.privacy.gnmax import gnmax_aggregate, gnmax_rdp_data_dependent_total

        n_classes = client.settings.n_classes
        client.receive_and_train(message)  # the client's own (evaluated) model
        rows = subset_indices(noise["subset_seed"], len(client.public), noise["subset_size"])
        counts = vote_counts(teacher_votes(client, rows, noise["teachers"],
                                           noise["teacher_steps"]), n_classes)
        sigma = noise["vote_sigma"]
        client.charge(self.release_event(client, {**noise, "subset_size": len(rows)}))
        labels = gnmax_aggregate(counts, sigma, client.noise_rng).labels
        arrays = {"labels": pack_labels(labels, n_classes)}
        if noise["data_dependent"]:  # outside the guarantee: only if the client chose it
            arrays["dd_rdp"] = gnmax_rdp_data_dependent_total(counts, sigma)
        return Message("dpfedct.sa_labels", arrays=arrays)

    def release_event(self, client: DPFedCTClient, noise: Mapping[str, Any]) -> Any:
        from fedlabels.privacy.events import GNMaxEvent

        size = min(int(noise["subset_size"]), len(client.public))
        return GNMaxEvent(noise["vote_sigma"], size, size)

    # ------------------------------------------------------------------ server side
    def queries(self, server: DPFedCTServer) -> int:
        q = server.options.label_queries
        return server.n_public if q is None else min(int(q), server.n_public)

    def calibrate(self, server: DPFedCTServer, grid: Grid | None) -> None:
        from fedlabels.privacy.vote_accounting import GNMAX_ACCOUNTANT, calibrate_gnmax_sigma

        if self.sigma is not None:
            return
        opts, rounds, q = server.options, server.settings.rounds, self.queries(server)
        assert opts.epsilon is not None  # DPFedCTOptions.check: a total ε
        self.sigma = calibrate_gnmax_sigma(opts.epsilon, rounds * q, server.delta)
        server.ledger.calibrated_by = GNMAX_ACCOUNTANT  # calibrate_gnmax_sigma's default
        server.ledger.check_plan([SubsampleAggregateEvent(self.sigma, q, (0,))] * rounds,
                                 f"{rounds} round(s)")

    def round_config(self, server: DPFedCTServer) -> dict[str, Any]:
        assert self.sigma is not None
        opts = server.options
        seed = int(np.random.SeedSequence([server.seed, len(server.events),
                                           0x5A]).generate_state(1)[0] % (2**31 - 1))
        return {"mechanism": self.name, "vote_sigma": self.sigma, "teachers": opts.teachers,
                "teacher_steps": (server.settings.period if opts.teacher_steps is None
                                  else opts.teacher_steps),
                "subset_seed": seed, "subset_size": self.queries(server),
                "data_dependent": opts.data_dependent}

    def collect(self, server: DPFedCTServer, replies: dict[int, Message],
                config: dict[str, Any]) -> np.ndarray:
        n, c, q = server.n_public, server.settings.n_classes, int(config["subset_size"])
        rows = subset_indices(int(config["subset_seed"]), n, q)
        cids = sorted(replies)
        votes = np.stack([unpack_labels(replies[i].arrays["labels"], q, c) for i in cids])
        new = (np.full(n, ABSTAIN, dtype=np.int64) if server.labels is None
               else np.array(server.labels, dtype=np.int64))
        new[rows] = server.consensus(votes)  # labels of earlier rounds kept elsewhere
        return new

    def round_events(self, server: DPFedCTServer, config: dict[str, Any],
                     cids: Sequence[int], replies: dict[int, Message] | None) -> list[Any]:
        ordered = sorted(cids)
        dd = (tuple(tuple(float(v) for v in replies[i].arrays["dd_rdp"]) for i in ordered)
              if replies is not None and config.get("data_dependent") else None)
        return [SubsampleAggregateEvent(float(config["vote_sigma"]), int(config["subset_size"]),
                                        tuple(ordered), dd)]

    def privacy(self, server: DPFedCTServer) -> dict[str, Any]:
        spent = server.ledger.spent()  # the worst client's ε, beside every client's
        return {**account_subsample_aggregate(server.events, server.delta),
            "epsilon": spent.epsilon, "delta": spent.delta,
            "mechanism": self.summary, "vote_aggregator": "GNMax per client (no threshold)",
            "calibrated_by": server.ledger.calibrated_by,  # the server's ledger: whom
            "teachers": server.options.teachers, "label_queries_per_round": (
                self.queries(server) if self.sigma is not None else None),
            "target": server.ledger.target_view("round", server.settings.rounds,
                                                len(server.events), CLIENTS_ENFORCE),
            "rounds_accounted": len(server.events), "guarantee": "formal",
            "guarantee_against": "the server and the other clients (every label a client "
                                 "sends), and anyone who sees the consensus",
            "neighbouring": SA_NEIGHBOURING, "composition": "adaptive, over every label each "
            "client released in every round (exact: Gaussian mechanisms compose to one, μ² adds)",
            "unit": "per client (one record of it), over the whole run; the worst client",
            "assumptions": list(SA_ASSUMPTIONS),
            "threat_model": "the server sees each client's GNMax labels on the round's "
                            "queries of U"}


def account_subsample_aggregate(events: list[Any], delta: float) -> dict[str, Any]:
    """Per client: ε of the GNMax labels it released (data-independent exact Gaussian, the
    guarantee; RDP and, if sent, the data-dependent bound beside it); the worst client."""
    from fedlabels.privacy.events import GNMaxEvent
    from fedlabels.privacy.gnmax import check_orders
    from fedlabels.privacy.vote_accounting import account_gnmax, epsilon_from_rdp

    released: dict[int, int] = {}
    dd: dict[int, np.ndarray] = {}
    orders = check_orders(None)
    for ev in events:
        for j, cid in enumerate(ev.clients):
            released[cid] = released.get(cid, 0) + ev.n_queries
            if ev.dd_rdp is not None:
                dd[cid] = dd.get(cid, np.zeros_like(orders)) + np.asarray(ev.dd_rdp[j])
    if not released:
        return {"epsilon": 0.0, "delta": delta, "labels_released": {}}
    sigma = events[0].sigma
    per_client = {cid: account_gnmax([GNMaxEvent(sigma, k, k)], delta).epsilon
                  for cid, k in released.items()}
    worst = max(per_client, key=lambda cid: per_client[cid])
    out = {**account_gnmax([GNMaxEvent(sigma, released[worst], released[worst])],
                           delta).to_dict(),
           "epsilon_per_client": {str(c): e for c, e in sorted(per_client.items())},
           "labels_released": {str(c): k for c, k in sorted(released.items())},
           "sensitivity": "L2 √2 on each client's teacher vote counts: one record trains one "
                          "teacher, so one vote moves"}
    if len(dd) == len(released):  # every client sent its data-dependent RDP
        per_dd = {cid: min(epsilon_from_rdp(r, delta, orders)[0], per_client[cid])
                  for cid, r in dd.items()}
        out["epsilon_data_dependent"] = max(per_dd.values())
        out["epsilon_data_dependent_per_client"] = {str(c): e for c, e in sorted(per_dd.items())}
        out["epsilon_data_dependent_note"] = DD_NOTE
    else:
        out["epsilon_data_dependent"] = None
    return out
