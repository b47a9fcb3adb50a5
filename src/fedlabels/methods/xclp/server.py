"""Server side of XCLP (Algorithm 1) over a :class:`~fedlabels.method.base.Grid`.

One run is a sequence of exchanges, one method per phase: :meth:`XCLPServerCore.setup`
(keys, seed commitments), :meth:`~XCLPServerCore.seed` (sealed seed reveals, relayed),
:meth:`~XCLPServerCore.hamming` (plain bits, or SecureHamming relayed by
:func:`~fedlabels.secure.hamming_protocol.server_hamming`),
:meth:`~XCLPServerCore.graph_and_solve` (kNN graph from H, the labelled columns S_L),
:meth:`~XCLPServerCore.influence` (S_L⁽ʲ⁾ to client j), :meth:`~XCLPServerCore.rowsums`
(masked Z̄, restarted without clients that drop inside it) and
:meth:`~XCLPServerCore.result` (Ẑ[R_j] back to j).

A client that does not answer a message (absent from the replies ``grid.exchange`` returns,
as a deployment's grid does for a lost client) has dropped out at that phase: it is left
out of the graph if the Hamming matrix is not complete yet, else its labels do not
propagate and its rows are left out of every sum; SecureRowSums restarts with a fresh mask
stream without it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.comm.codec import encode_message
from fedlabels.comm.id_lists import members_text
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.base import Grid
from fedlabels.methods.xclp.options import XCLPProtocolOptions
from fedlabels.propagation.core import check_params, knn_graph, knn_graph_from_hamming, solve_cg

#: where a client can drop out (``XCLPOutcome.dropped`` values)
PHASES = ("setup", "seed", "before-hamming", "during-hamming", "before-rowsums",
          "within-rowsums", "result")
#: n_j * n_k * L above which --secure ot is refused for a client pair: batched OT sends about
#: 1.4 bytes per (point of j, point of k, bit), so this is about 0.8 GiB of traffic per pair
MAX_OT_PAIR_WORK = 600_000_000


@dataclass
class XCLPOutcome:
    """What the server records about one XCLP run (no labels, no features)."""

    participants: list[int]
    graph_members: list[int]
    rowsum_members: list[int]
    dropped: dict[int, str]
    rowsum_attempts: int
    n_points: int
    seconds: dict[str, float]
    H: np.ndarray | None = None
    bytes_up: int = 0  # serialized XCLP protocol messages, as the engines count them
    bytes_down: int = 0


@dataclass
class _Run:
    """The server's working state during one XCLP run."""

    grid: Grid
    rnd: int
    config: dict[str, Any]  # session and secure mode, sent with every message
    members: list[int]  # clients still taking part
    dropped: dict[int, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    n_pts: dict[int, int] = field(default_factory=dict)
    setup: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # keys, commitments
    sealed: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # seed reveals
    labeled_idx: dict[int, np.ndarray] = field(default_factory=dict)
    packed: np.ndarray | None = None  # plain LSH bits (secure=none)
    H: np.ndarray | None = None  # Hamming matrix (secure modes)
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    S_L: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    rows: dict[int, np.ndarray] = field(default_factory=dict)  # each member's rows
    attempts: int = 0  # SecureRowSums attempts
    total: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint64))
    counts: np.ndarray | None = None  # balance=class: masked sum of the class counts
    bytes_up: int = 0
    bytes_down: int = 0


def _protocol_bytes(messages: Iterable[Message]) -> int:
    """Serialized size of the protocol messages (as the engines count communication)."""
    return sum(len(encode_message(m)) for m in messages if m.category == "protocol")


class XCLPServerCore:
    """Server side of Algorithm 1; :meth:`run` drives the phases for one session."""

    def __init__(self, options: XCLPProtocolOptions, n_classes: int) -> None:
        self.opts = options
        self.n_classes = n_classes
        self.keep_H = False  # tests: keep the Hamming matrix in the outcome

    def run(self, grid: Grid, rnd: int, participants: list[int], session: int,
            setup_arrays: dict[str, np.ndarray] | None = None) -> XCLPOutcome:
        t0 = time.perf_counter()
        run = _Run(grid, rnd, {"session": session, "secure": self.opts.secure},
                   members=sorted(participants))
        self.setup(run, setup_arrays or {})
        self.seed(run)
        run.seconds["setup"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        self.hamming(run)
        run.seconds["secure_hamming"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        self.graph_and_solve(run)
        graph_members = list(run.members)
        run.seconds["graph_and_solve"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        self.influence(run)
        self.rowsums(run)
        self.result(run)
        run.seconds["rowsums"] = time.perf_counter() - t3
        run.seconds["total"] = time.perf_counter() - t0
        return XCLPOutcome(participants=list(participants), graph_members=graph_members,
                           rowsum_members=list(run.members), dropped=run.dropped,
                           rowsum_attempts=run.attempts, n_points=int(run.offsets[-1]),
                           seconds=run.seconds, H=run.H if self.keep_H else None,
                           bytes_up=run.bytes_up, bytes_down=run.bytes_down)

    # ---------------------------------------------------------------- exchanges
    @staticmethod
    def _exchange(run: _Run, messages: dict[int, Message], phase: str) -> dict[int, Message]:
        """Send, and record every client that did not answer as dropped at ``phase``."""
        replies = run.grid.exchange(messages, run.rnd)
        run.bytes_down += _protocol_bytes(messages.values())
        run.bytes_up += _protocol_bytes(replies.values())
        for cid in messages:
            if cid not in replies:
                run.dropped[cid] = phase
        return {cid: replies[cid] for cid in sorted(messages) if cid in replies}

    def _broadcast(self, run: _Run, message: Message, phase: str) -> dict[int, Message]:
        """``message`` to every member; the members become those that answered."""
        replies = self._exchange(run, dict.fromkeys(run.members, message), phase)
        run.members = sorted(replies)
        return replies

    # ---------------------------------------------------------------- phases
    def setup(self, run: _Run, setup_arrays: dict[str, np.ndarray]) -> None:
        """Sizes, public keys and seed commitments (secure modes: the group announced to
        every member, the sites' identity signatures where they have identity keys)."""
        group = {"participants": members_text(run.members)} if self.opts.secure != "none" else {}
        replies = self._broadcast(run, Message("xclp.setup", arrays=dict(setup_arrays),
                                               config={**run.config, **group}), "setup")
        run.n_pts = {c: int(replies[c].config["n"]) for c in run.members}
        run.setup = {c: replies[c].arrays for c in run.members}
        opts = self.opts  # k < n before the expensive secure phase
        check_params(sum(run.n_pts.values()), opts.knn, opts.alpha, opts.lsh_bits)
        if self.opts.secure == "ot":
            P, n = run.members, run.n_pts
            worst = max((n[a] * n[b] * self.opts.lsh_bits for a in P for b in P if a < b),
                        default=0)
            if worst > MAX_OT_PAIR_WORK:
                raise FedLabelsError(
                    f"--secure ot needs n_j * n_k * L = {worst:,} masked values for one client "
                    f"pair (about {1.4 * worst / 2**30:.1f} GiB of traffic); the limit is "
                    f"{MAX_OT_PAIR_WORK:,}. Use --secure paillier (communication ~ n_j * L "
                    "ciphertexts), or fewer points / a smaller --lsh-bits.")

    def seed(self, run: _Run) -> None:
        """Broadcast keys, commitments (and their signatures); collect each client's sealed
        seed reveals."""
        if self.opts.secure == "none":
            return
        P = run.members
        arrays = {**{f"pub_{c}": run.setup[c]["pub"] for c in P},
                  **{f"commit_{c}": run.setup[c]["commit"] for c in P},
                  **{f"sig_{c}": run.setup[c]["sig"] for c in P if "sig" in run.setup[c]}}
        replies = self._broadcast(run, Message("xclp.seed", arrays=arrays, config={
            **run.config, "participants": members_text(P)}), "seed")
        run.sealed = {c: replies[c].arrays for c in run.members}

    def hamming(self, run: _Run) -> None:
        """LSH bits (secure=none) or SecureHamming: the Hamming matrix of the members."""
        secure = self.opts.secure
        peers_cfg = {f"n_{c}": run.n_pts[c] for c in run.members}

        def message(step: int, arrays: dict[str, np.ndarray], members: list[int]) -> Message:
            return Message("xclp.hamming", arrays=arrays,
                           config={**run.config, **peers_cfg, "step": step,
                                   "peers": members_text(members), "lsh_seed": self.opts.lsh_seed})

        P = run.members
        first = {c: message(1, {f"from_{p}": run.sealed[p][f"to_{c}"] for p in P if p != c}
                            if secure != "none" else {}, P) for c in P}
        replies = self._exchange(run, first, "before-hamming")
        run.members = sorted(replies)
        run.labeled_idx = {c: np.asarray(replies[c].arrays["labeled_idx"], dtype=np.int64)
                           for c in run.members}
        if secure == "none":
            run.packed = np.concatenate([replies[c].arrays["bits"] for c in run.members])
            return
        from fedlabels.secure.hamming_protocol import server_hamming

        def send(step: int, arrays: dict[int, dict[str, np.ndarray]]
                 ) -> dict[int, dict[str, np.ndarray]]:
            members = sorted(arrays)
            rep = self._exchange(run, {c: message(step, arrays[c], members) for c in members},
                                 "during-hamming")
            return {c: m.arrays for c, m in rep.items()}

        run.members, run.H = server_hamming(
            secure, {c: replies[c].arrays for c in run.members}, send, self.opts.key_bits,
            self.opts.lsh_bits, roster=P)

    def graph_and_solve(self, run: _Run) -> None:
        """The kNN graph of the members' points and S_L = (I − αW)⁻¹ E_L."""
        opts, P = self.opts, run.members
        run.offsets = np.cumsum([0] + [run.n_pts[c] for c in P])
        n = int(run.offsets[-1])
        check_params(n, opts.knn, opts.alpha, opts.lsh_bits)
        if not any(len(run.labeled_idx[c]) for c in P):
            raise FedLabelsError("no labelled point among the participating clients; label "
                                 "propagation needs at least one (raise --labeled-fraction).")
        # secure=none: the server holds the bits of exactly the members P
        W = (knn_graph_from_hamming(run.H, opts.graph) if run.H is not None
             else knn_graph(np.asarray(run.packed), opts.graph))
        cols = np.concatenate([run.labeled_idx[c] + run.offsets[i] for i, c in enumerate(P)])
        E = np.zeros((n, len(cols)))
        E[cols, np.arange(len(cols))] = 1.0
        run.S_L = solve_cg(W, E, opts.alpha)  # n × l: the labelled columns of (I − αW)^{-1}
        run.rows = {c: np.arange(run.offsets[i], run.offsets[i + 1]) for i, c in enumerate(P)}

    def influence(self, run: _Run) -> None:
        """S_L⁽ʲ⁾ (the columns of j's labelled points) and j's row offset to each client j."""
        P, S_L, offsets = run.members, run.S_L, run.offsets
        starts = np.cumsum([0] + [len(run.labeled_idx[c]) for c in P])
        msgs = {c: Message("xclp.influence", arrays={"S_L": S_L[:, starts[i]:starts[i + 1]]},
                           config={**run.config, "offset": int(offsets[i]),
                                   "n": int(offsets[-1])})
                for i, c in enumerate(P)}
        run.members = sorted(self._exchange(run, msgs, "before-rowsums"))

    def rowsums(self, run: _Run) -> None:
        """SecureRowSums over the rows of the current members only, restarted without the
        clients that drop within it (a departed client's rows are never summed: there the
        survivors' masks would cancel)."""
        from fedlabels.secure.rowsums import server_sum, sum_counts

        while True:
            if not run.members:
                raise FedLabelsError("every client dropped out before SecureRowSums "
                                     "completed; no labels can be propagated.")
            members = run.members
            spans = ",".join(f"{run.rows[c][0]}:{run.rows[c][-1] + 1}" for c in members)
            msg = Message("xclp.rowsums", config={**run.config, "attempt": run.attempts,
                                                  "participants": members_text(members),
                                                  "row_ranges": spans})
            replies = self._broadcast(run, msg, "within-rowsums")
            run.attempts += 1
            if run.members == members:
                break
        run.total = server_sum({c: replies[c].arrays["part"] for c in run.members},
                                {c: run.rows[c] for c in run.members}, int(run.offsets[-1]),
                                self.n_classes)
        if self.opts.balance == "class":  # the members' class counts, still masked
            run.counts = sum_counts([replies[c].arrays["counts"] for c in run.members])

    def result(self, run: _Run) -> None:
        """Ẑ[R_j] to each client j that completed SecureRowSums (and the masked class counts
        with the members and attempt that unmask them, for ``balance=class``)."""
        extra: dict[str, np.ndarray] = {}
        config = dict(run.config)
        if run.counts is not None:
            extra = {"counts": run.counts}
            config.update(participants=members_text(run.members), attempt=run.attempts - 1)
        self._exchange(run, {c: Message("xclp.result",
                                        arrays={"rows": run.total[run.rows[c]], **extra},
                                        config=config) for c in run.members}, "result")
