"""XCLP (Cross-Client Label Propagation, Algorithm 1) and per-client LP as fedlabels methods.

One XCLP run is a sequence of message exchanges driven by :class:`XCLPServerCore`:

``xclp.setup``  keys, seed commitments (secure) — ``xclp.seed`` sealed seed reveals —
``xclp.hamming`` (1 to 5 steps: SecureHamming, or plain bits for ``secure=none``) —
server builds the kNN graph from H and solves for the labelled columns S_L —
``xclp.influence`` (S_L⁽ʲ⁾ to client j) — ``xclp.rowsums`` (masked Z̄, restarted without
clients that drop inside it) — ``xclp.result`` (Ẑ[R_j] back to j).

Every payload is a real serialized :class:`~fedlabels.comm.Message`, so the bytes the
simulator counts are what would travel. Client-to-client messages are sealed and relayed by
the server. In the one-shot ``xclp`` method the whole protocol runs in the first round;
later rounds only re-evaluate (use ``--rounds 1``).

Evaluation: the test set is split into m slices, slice j is client j's "new data" (the
paper's inference setting, Section 4.1); a client's accuracy is that of its XCLP labels on its
slice (``test_points=N`` keeps only its first N points). Dropouts are simulated with
``drop="CID:PHASE,..."`` (phases ``before-hamming``, ``during-hamming``,
``before-rowsums``, ``within-rowsums``): the client stops answering
(it returns an ``xclp.dropped`` control message, the simulator's stand-in for a timeout).
A dropped client falls back to per-client LP for its own evaluation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.errors import FedLabelsError
from fedlabels.propagation.core import (
    GraphSpec,
    check_label_matrix,
    check_params,
    hamming_matrix,
    knn_graph,
    knn_graph_from_hamming,
    label_propagation,
    labels_and_confidence,
    lsh_bits,
    lsh_projection,
    one_hot,
    solve_cg,
    unpack_bits,
)
from fedlabels.protocols.base import ClientRole, Grid, Method, MethodContext, ServerRole

SECURE_MODES = ("none", "ot", "paillier")
DROP_PHASES = ("before-hamming", "during-hamming", "before-rowsums", "within-rowsums")
DROPPED = "xclp.dropped"
MAX_OTS_PER_PAIR = 50_000_000


# ----------------------------------------------------------------------------- options


@dataclass(frozen=True)
class XCLPOptions:
    """XCLP settings, read from ``Settings.extra`` (``--opt`` / CLI flags)."""

    n_bits: int = 1024
    k: int = 10
    alpha: float = 0.99
    power: float = 3.0
    secure: str = "none"
    key_bits: int = 2048
    labeled_fraction: float = 0.1
    lsh_seed: int = 0
    test_points: int | None = None
    drop: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_extra(cls, extra: dict[str, Any]) -> XCLPOptions:
        def get(name: str, default: Any) -> Any:
            return extra.get(name, default)

        secure = str(get("secure", "none")).lower()
        if secure not in SECURE_MODES:
            raise FedLabelsError(f"--secure must be one of {', '.join(SECURE_MODES)}, got "
                                 f"{secure!r}.")
        frac = get("labeled_fraction", 0.1)
        if not isinstance(frac, int | float) or not 0.0 <= float(frac) <= 1.0:
            raise FedLabelsError(f"--labeled-fraction must be a number in [0, 1], got "
                                 f"{frac!r}.")
        key_bits = get("key_bits", 2048)
        if not isinstance(key_bits, int) or key_bits < 256:
            raise FedLabelsError(f"key_bits must be an int >= 256 (use >= 2048 for real "
                                 f"runs), got {key_bits!r}.")
        opts = cls(n_bits=get("lsh_bits", 1024), k=get("knn", 10),
                   alpha=float(get("alpha", 0.99)), power=float(get("power", 3.0)),
                   secure=secure, key_bits=key_bits, labeled_fraction=float(frac),
                   lsh_seed=int(get("lsh_seed", 0)), test_points=get("test_points", None),
                   drop=parse_drops(get("drop", "")))
        if opts.test_points is not None and (not isinstance(opts.test_points, int)
                                             or opts.test_points < 0):
            raise FedLabelsError(f"test_points must be an int >= 0, got {opts.test_points!r}.")
        check_params(opts.k + 1, opts.k, opts.alpha, opts.n_bits)
        return opts

    @property
    def graph(self) -> GraphSpec:
        return GraphSpec(k=self.k, n_bits=self.n_bits, power=self.power)


def parse_drops(text: Any) -> dict[int, str]:
    """``"2:during-hamming,4:within-rowsums"`` → {2: "during-hamming", 4: "within-rowsums"}."""
    if isinstance(text, dict):
        items = list(text.items())
    elif text in (None, "", 0):
        return {}
    else:
        items = []
        for part in str(text).split(","):
            cid, sep, phase = part.strip().partition(":")
            if not sep:
                raise FedLabelsError(f"drop option {part!r}: use CID:PHASE with PHASE in "
                                     f"{', '.join(DROP_PHASES)}.")
            items.append((cid, phase))
    out = {}
    for cid, phase in items:
        if phase not in DROP_PHASES:
            raise FedLabelsError(f"unknown dropout phase {phase!r}; use one of "
                                 f"{', '.join(DROP_PHASES)}.")
        out[int(cid)] = str(phase)
    return out


def split_labels(y: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Keep labels for a seeded ``fraction`` of the points; -1 marks unlabelled ones."""
    rng = np.random.default_rng(seed)
    n_lab = round(fraction * len(y))
    partial = np.full(len(y), -1, dtype=np.int64)
    keep = rng.permutation(len(y))[:n_lab]
    partial[keep] = y[keep]
    return partial


def test_slice(n_test: int, n_clients: int, cid: int) -> np.ndarray:
    """Client ``cid``'s share of the test set (its "new data" to be labelled)."""
    return np.array_split(np.arange(n_test), n_clients)[cid]


def _ctx(session: int, purpose: str, src: int, dst: int) -> bytes:
    return f"xclp|{session}|{purpose}|{src}->{dst}".encode()


def _ids(text: Any) -> list[int]:
    return [int(t) for t in str(text).split(",") if t != ""]


# ----------------------------------------------------------------------------- client


class XCLPClientCore(ClientRole):
    """Client side of Algorithm 1; subclasses supply the features and the partial labels."""

    def __init__(self, *args: Any, options: XCLPOptions, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opts = options
        self.dropped = False
        for kind in ("setup", "seed", "hamming", "influence", "rowsums", "result"):
            self.handlers[f"xclp.{kind}"] = self._guard(kind)
        self.xclp_labels: np.ndarray | None = None
        self.xclp_confidence: np.ndarray | None = None

    # hooks ---------------------------------------------------------------------------
    def xclp_features(self, message: Message) -> np.ndarray:
        raise NotImplementedError

    def xclp_partial_labels(self) -> np.ndarray:
        raise NotImplementedError

    # dispatch with simulated dropouts -------------------------------------------------
    def _guard(self, kind: str) -> Any:
        handler = getattr(self, f"_on_{kind}")

        def run(message: Message) -> Message:
            if self.dropped:
                return Message(DROPPED, category="control")
            phase = self.opts.drop.get(self.cid)
            step = int(message.config.get("step", 1))
            if phase is not None and int(message.config.get("session", 0)) == 0 and (
                    (phase == "before-hamming" and kind == "hamming" and step == 1)
                    or (phase == "during-hamming" and kind == "hamming" and step == 2)
                    or (phase == "before-rowsums" and kind == "influence")
                    or (phase == "within-rowsums" and kind == "rowsums")):
                self.dropped = True
                return Message(DROPPED, category="control")
            return handler(message)

        return run

    # phases ---------------------------------------------------------------------------
    def _on_setup(self, message: Message) -> Message:
        from_cfg = message.config
        self.session = int(from_cfg.get("session", 0))
        self.dropped = False
        self.V = np.asarray(self.xclp_features(message), dtype=np.float32)
        self.y_partial = self.xclp_partial_labels()
        if len(self.V) == 0:
            raise FedLabelsError(f"client {self.cid} has no data; every XCLP participant "
                                 "needs at least one point.")
        self.mode = str(from_cfg["secure"])
        self.peer_pubs: dict[int, bytes] = {}
        arrays: dict[str, np.ndarray] = {}
        if self.mode != "none":
            from fedlabels.secure.keys import KeyPair, to_u8
            from fedlabels.secure.seed import SeedAgreement

            self.keypair = KeyPair()
            self.seed_agreement = SeedAgreement(self.cid)
            arrays = {"pub": to_u8(self.keypair.public),
                      "commit": to_u8(self.seed_agreement.commitment)}
        return Message("xclp.setup.reply", arrays=arrays, config={"n": len(self.V)})

    def _on_seed(self, message: Message) -> Message:
        from fedlabels.secure.keys import seal, to_u8

        peers = [c for c in _ids(message.config["participants"]) if c != self.cid]
        self.commitments = {c: message.arrays[f"commit_{c}"].tobytes()
                            for c in _ids(message.config["participants"])}
        self.peer_pubs = {c: message.arrays[f"pub_{c}"].tobytes() for c in peers}
        self.channel = {c: self.keypair.shared_key(self.cid, c, self.peer_pubs[c], "channel")
                        for c in peers}
        out = {f"to_{c}": to_u8(seal(self.channel[c], self.seed_agreement.contribution,
                                     _ctx(self.session, "seed", self.cid, c)))
               for c in peers}
        return Message("xclp.seed.reply", arrays=out)

    def _open(self, message: Message, peer: int, purpose: str) -> bytes:
        from fedlabels.secure.keys import open_sealed

        return open_sealed(self.channel[peer], message.arrays[f"from_{peer}"].tobytes(),
                           _ctx(self.session, purpose, peer, self.cid))

    def _seal(self, peer: int, purpose: str, payload: bytes) -> np.ndarray:
        from fedlabels.secure.keys import seal, to_u8

        return to_u8(seal(self.channel[peer], payload,
                          _ctx(self.session, purpose, self.cid, peer)))

    def _on_hamming(self, message: Message) -> Message:
        step = int(message.config["step"])
        peers = [c for c in _ids(message.config["peers"]) if c != self.cid]
        if step == 1:
            return self._hamming_first(message, peers)
        if self.mode == "paillier":
            return self._paillier_step(message, step, peers)
        return self._ot_step(message, step, peers)

    def _hamming_first(self, message: Message, peers: list[int]) -> Message:
        labeled = np.flatnonzero(self.y_partial >= 0).astype(np.int32)
        n_bits = self.opts.n_bits
        if self.mode == "none":
            seed: bytes | int = int(message.config["lsh_seed"])
        else:
            reveals = {c: self._open(message, c, "seed") for c in peers}
            seed = self.seed_agreement.derive(
                reveals, {c: self.commitments[c] for c in [*peers, self.cid]})
        self.lsh_seed_used = seed  # stays on the client (tests compare with plaintext)
        self.packed = lsh_bits(self.V, lsh_projection(seed, n_bits, self.V.shape[1]))
        arrays: dict[str, np.ndarray] = {"labeled_idx": labeled}
        if self.mode == "none":  # plaintext baseline: the bits go to the server
            arrays["bits"] = self.packed
            return Message("xclp.hamming.reply", arrays=arrays)
        self.bits = unpack_bits(self.packed, n_bits)
        arrays["H_self"] = hamming_matrix(self.packed, self.packed, n_bits)
        if self.mode == "paillier":
            from fedlabels.secure.paillier_hamming import KeyHolder, holder_encrypt, int_to_u8

            if any(c > self.cid for c in peers):
                self.holder = KeyHolder(self.opts.key_bits)
                arrays["enc"] = holder_encrypt(self.holder, self.bits, n_bits)
                nb = self.opts.key_bits // 8
                arrays["pk_n"] = int_to_u8([self.holder.n], nb)[0]
                arrays["pk_hs"] = int_to_u8([int(self.holder.hs)], 2 * nb)[0]
        else:
            from fedlabels.secure.ot_hamming import ShadeReceiver

            self.ot_recv = {}
            for j in (c for c in peers if c < self.cid):  # I am SHADE receiver for j < me
                n_j = int(message.config[f"n_{j}"])
                self.ot_recv[j] = ShadeReceiver(self.bits, n_j, n_bits)
                arrays[f"to_{j}"] = self._seal(j, "ot1", self.ot_recv[j].step1().tobytes())
        return Message("xclp.hamming.reply", arrays=arrays)

    def _paillier_step(self, message: Message, step: int, peers: list[int]) -> Message:
        from fedlabels.secure import paillier_hamming as ph

        n_bits, kb = self.opts.n_bits, self.opts.key_bits
        arrays: dict[str, np.ndarray] = {}
        if step == 2:  # evaluator for every holder j < me
            for j in (c for c in peers if c < self.cid):
                n = int.from_bytes(message.arrays[f"pk_n_{j}"].tobytes(), "little")
                hs = int.from_bytes(message.arrays[f"pk_hs_{j}"].tobytes(), "little")
                res, masks = ph.evaluate(n, hs, kb, message.arrays[f"enc_{j}"],
                                         int(message.config[f"n_{j}"]), self.bits, n_bits)
                arrays[f"res_{j}"] = res     # ciphertexts under j's key, relayed to j
                arrays[f"mask_{j}"] = masks  # uniform masks R, for the server
        elif step == 3:  # key holder: decrypt what each evaluator k > me returned
            for k in (c for c in peers if c > self.cid):
                arrays[f"T_{k}"] = ph.holder_decrypt(self.holder, message.arrays[f"res_{k}"])
        return Message("xclp.hamming.reply", arrays=arrays)

    def _ot_step(self, message: Message, step: int, peers: list[int]) -> Message:
        from fedlabels.secure.ot_hamming import ShadeSender

        n_bits = self.opts.n_bits
        arrays: dict[str, np.ndarray] = {}
        lower = [c for c in peers if c < self.cid]
        higher = [c for c in peers if c > self.cid]
        if step == 2:  # SHADE sender for k > me: base-OT replies
            self.ot_send = {}
            for k in higher:
                A = np.frombuffer(self._open(message, k, "ot1"), dtype=np.uint8)
                self.ot_send[k] = ShadeSender(self.bits, int(message.config[f"n_{k}"]),
                                              n_bits)
                arrays[f"to_{k}"] = self._seal(k, "ot2", self.ot_send[k].step1(A).tobytes())
        elif step == 3:  # receiver: send U
            for j in lower:
                B = np.frombuffer(self._open(message, j, "ot2"), dtype=np.uint8)
                U = self.ot_recv[j].step2(B)
                message_cols = np.int64(U.shape[1]).tobytes()
                arrays[f"to_{j}"] = self._seal(j, "ot3", message_cols + U.tobytes())
        elif step == 4:  # sender: corrections to k, R to the server
            for k in higher:
                raw = self._open(message, k, "ot3")
                cols = int(np.frombuffer(raw[:8], dtype=np.int64)[0])
                U = np.frombuffer(raw[8:], dtype=np.uint8).reshape(-1, cols)
                e, R = self.ot_send[k].step2(U)
                arrays[f"to_{k}"] = self._seal(k, "ot4", e.tobytes())
                arrays[f"R_{k}"] = R
        elif step == 5:  # receiver: T to the server
            for j in lower:
                e = np.frombuffer(self._open(message, j, "ot4"), dtype=np.uint16)
                arrays[f"T_{j}"] = self.ot_recv[j].step3(e)
        return Message("xclp.hamming.reply", arrays=arrays)

    def _on_influence(self, message: Message) -> Message:
        self.S_L = np.asarray(message.arrays["S_L"], dtype=np.float64)
        self.own_rows = np.arange(int(message.config["offset"]),
                                  int(message.config["offset"]) + len(self.V))
        return Message("xclp.influence.reply", config={"ok": True})

    def _on_rowsums(self, message: Message) -> Message:
        from fedlabels.secure.rowsums import encode_fixed, mask_rows

        members = _ids(message.config["participants"])
        labeled = np.flatnonzero(self.y_partial >= 0)
        Y_L = one_hot(self.y_partial[labeled], self.settings.n_classes)
        Zbar = self.S_L @ Y_L  # n × C: this client's labels' influence on every point
        if self.mode == "none":
            enc = encode_fixed(Zbar)
            keep = np.zeros(len(enc), dtype=bool)
            keep[self.own_rows] = True
            self.own_masked = enc[keep]
            return Message("xclp.rowsums.reply", arrays={"part": enc[~keep]})
        keys = {c: self.keypair.shared_key(self.cid, c, self.peer_pubs[c], "rowsums")
                for c in members if c != self.cid}
        part, self.own_masked = mask_rows(Zbar, self.own_rows, self.cid, keys,
                                          attempt=int(message.config["attempt"]))
        return Message("xclp.rowsums.reply", arrays={"part": part})

    def _on_result(self, message: Message) -> Message:
        from fedlabels.secure.rowsums import unmask_rows

        Z = unmask_rows(message.arrays["rows"], self.own_masked)
        self.xclp_labels, self.xclp_confidence = labels_and_confidence(Z)
        self.xclp_scores = Z
        return Message("xclp.result.reply", category="control")


# ----------------------------------------------------------------------------- server


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


class XCLPServerCore:
    """Server side of Algorithm 1 over a :class:`~fedlabels.protocols.base.Grid`."""

    def __init__(self, options: XCLPOptions, n_classes: int) -> None:
        self.opts = options
        self.n_classes = n_classes
        self.keep_H = False

    @staticmethod
    def _alive(replies: dict[int, Message]) -> list[int]:
        return sorted(c for c, m in replies.items() if m.kind != DROPPED)

    def run(self, grid: Grid, rnd: int, participants: list[int], session: int,
            setup_arrays: dict[str, np.ndarray] | None = None) -> XCLPOutcome:
        opts, secure = self.opts, self.opts.secure
        t0 = time.perf_counter()
        seconds: dict[str, float] = {}
        dropped: dict[int, str] = {}
        base_cfg = {"session": session, "secure": secure}
        setup = Message("xclp.setup", arrays=dict(setup_arrays or {}), config=base_cfg)
        replies = grid.exchange({c: setup for c in participants}, rnd)
        P = self._alive(replies)
        n_pts = {c: int(replies[c].config["n"]) for c in P}
        if secure == "ot":
            worst = max((n_pts[a] * n_pts[b] * opts.n_bits for a in P for b in P if a < b),
                        default=0)
            if worst > MAX_OTS_PER_PAIR:
                raise FedLabelsError(
                    f"--secure ot needs n_j * n_k * L = {worst:,} oblivious transfers for one "
                    f"client pair (about {18 * worst / 2**30:.1f} GiB of traffic); the limit is "
                    f"{MAX_OTS_PER_PAIR:,}. Use --secure paillier (communication ~ n_j * L "
                    "ciphertexts), or fewer points / a smaller --lsh-bits.")
        if secure != "none":
            pubs = {f"pub_{c}": replies[c].arrays["pub"] for c in P}
            commits = {f"commit_{c}": replies[c].arrays["commit"] for c in P}
            msg = Message("xclp.seed", arrays={**pubs, **commits},
                          config={**base_cfg, "participants": ",".join(map(str, P))})
            replies = grid.exchange({c: msg for c in P}, rnd)
            sealed = {c: replies[c].arrays for c in self._alive(replies)}
            P = sorted(sealed)
        seconds["setup"] = time.perf_counter() - t0

        # ---- SecureHamming
        t1 = time.perf_counter()
        peers_cfg = {f"n_{c}": n_pts[c] for c in P}

        def hamming_msg(c: int, step: int, arrays: dict[str, np.ndarray],
                        members: list[int]) -> Message:
            return Message("xclp.hamming", arrays=arrays,
                           config={**base_cfg, **peers_cfg, "step": step,
                                   "peers": ",".join(map(str, members)),
                                   "lsh_seed": opts.lsh_seed})

        first = {}
        for c in P:
            arrays = {}
            if secure != "none":
                arrays = {f"from_{p}": sealed[p][f"to_{c}"] for p in P if p != c}
            first[c] = hamming_msg(c, 1, arrays, P)
        replies = grid.exchange(first, rnd)
        alive = self._alive(replies)
        for c in set(P) - set(alive):
            dropped[c] = "before-hamming"
        P = alive
        labeled_idx = {c: np.asarray(replies[c].arrays["labeled_idx"], dtype=np.int64)
                       for c in P}
        H = None
        if secure == "none":
            packed = np.concatenate([replies[c].arrays["bits"] for c in P])
        else:
            blocks: dict[tuple[int, int], np.ndarray] = {
                (c, c): np.asarray(replies[c].arrays["H_self"]) for c in P}
            if secure == "paillier":
                P = self._paillier(grid, rnd, P, replies, hamming_msg, blocks, dropped)
            else:
                P = self._ot(grid, rnd, P, replies, hamming_msg, blocks, dropped, n_pts)
            H = np.block([[blocks[(a, b)] if (a, b) in blocks else blocks[(b, a)].T
                           for b in P] for a in P])
        seconds["secure_hamming"] = time.perf_counter() - t1

        # ---- graph and influence (server steps)
        t2 = time.perf_counter()
        offsets = np.cumsum([0] + [n_pts[c] for c in P])
        n = int(offsets[-1])
        check_params(n, opts.k, opts.alpha, opts.n_bits)
        if not any(len(labeled_idx[c]) for c in P):
            raise FedLabelsError("no labelled point among the participating clients; label "
                                 "propagation needs at least one (raise --labeled-fraction).")
        # secure=none: the server holds the bits of exactly the members P
        W = knn_graph(packed, opts.graph) if H is None else knn_graph_from_hamming(H, opts.graph)
        cols = np.concatenate([labeled_idx[c] + offsets[i] for i, c in enumerate(P)])
        E = np.zeros((n, len(cols)))
        E[cols, np.arange(len(cols))] = 1.0
        S_L = solve_cg(W, E, opts.alpha)  # n × l, the labelled columns of (I − αW)^{-1}
        seconds["graph_and_solve"] = time.perf_counter() - t2

        # ---- influence columns to each client
        t3 = time.perf_counter()
        starts = np.cumsum([0] + [len(labeled_idx[c]) for c in P])
        msgs = {c: Message("xclp.influence",
                           arrays={"S_L": S_L[:, starts[i]:starts[i + 1]]},
                           config={**base_cfg, "offset": int(offsets[i]), "n": n})
                for i, c in enumerate(P)}
        replies = grid.exchange(msgs, rnd)
        members = self._alive(replies)
        for c in set(P) - set(members):
            dropped[c] = "before-rowsums"

        # ---- SecureRowSums, restarted without clients that drop within it
        from fedlabels.secure.rowsums import server_sum

        rows = {c: np.arange(offsets[i], offsets[i + 1]) for i, c in enumerate(P)}
        attempt = 0
        while True:
            if not members:
                raise FedLabelsError("every client dropped out before SecureRowSums "
                                     "completed; no labels can be propagated.")
            msg = Message("xclp.rowsums", config={**base_cfg, "attempt": attempt,
                                                  "participants": ",".join(map(str, members))})
            replies = grid.exchange({c: msg for c in members}, rnd)
            alive = self._alive(replies)
            attempt += 1
            if len(alive) == len(members):
                break
            for c in set(members) - set(alive):
                dropped[c] = "within-rowsums"
            members = alive
        total = server_sum({c: replies[c].arrays["part"] for c in members},
                           {c: rows[c] for c in members}, n, self.n_classes)
        grid.exchange({c: Message("xclp.result", arrays={"rows": total[rows[c]]},
                                  config=base_cfg) for c in members}, rnd)
        seconds["rowsums"] = time.perf_counter() - t3
        seconds["total"] = time.perf_counter() - t0
        return XCLPOutcome(participants=list(participants), graph_members=list(P),
                           rowsum_members=list(members), dropped=dropped,
                           rowsum_attempts=attempt, n_points=n, seconds=seconds,
                           H=H if self.keep_H else None)

    # -- SecureHamming variants (server relays, then combines T and R)
    def _paillier(self, grid: Grid, rnd: int, P: list[int], replies: dict[int, Message],
                  hamming_msg: Any, blocks: dict, dropped: dict[int, str]) -> list[int]:
        from fedlabels.secure.paillier_hamming import server_combine

        kb, n_bits = self.opts.key_bits, self.opts.n_bits
        pk = {c: (replies[c].arrays["pk_n"], replies[c].arrays["pk_hs"],
                  replies[c].arrays["enc"]) for c in P if "enc" in replies[c].arrays}
        n_pts = {c: int(replies[c].arrays["H_self"].shape[0]) for c in P}
        msgs = {}
        for k in P:
            arrays = {}
            for j in (c for c in P if c < k):
                arrays.update({f"pk_n_{j}": pk[j][0], f"pk_hs_{j}": pk[j][1],
                               f"enc_{j}": pk[j][2]})
            msgs[k] = hamming_msg(k, 2, arrays, P)
        rep2 = grid.exchange(msgs, rnd)
        alive = self._alive(rep2)
        for c in set(P) - set(alive):
            dropped[c] = "during-hamming"
        P = alive
        msgs = {j: hamming_msg(j, 3, {f"res_{k}": rep2[k].arrays[f"res_{j}"]
                                      for k in P if k > j}, P) for j in P}
        rep3 = grid.exchange(msgs, rnd)
        alive = self._alive(rep3)
        for c in set(P) - set(alive):
            dropped[c] = "during-hamming"
        P = alive
        for j in P:
            n = int.from_bytes(pk[j][0].tobytes(), "little") if j in pk else 0
            for k in (c for c in P if c > j):
                blocks[(j, k)] = server_combine(n, kb, rep3[j].arrays[f"T_{k}"],
                                                rep2[k].arrays[f"mask_{j}"], n_pts[j],
                                                n_pts[k], n_bits)
        return P

    def _ot(self, grid: Grid, rnd: int, P: list[int], replies: dict[int, Message],
            hamming_msg: Any, blocks: dict, dropped: dict[int, str],
            n_pts: dict[int, int]) -> list[int]:
        from fedlabels.secure.ot_hamming import server_combine

        prev = {c: replies[c].arrays for c in P}
        history = []
        for step in (2, 3, 4, 5):
            msgs = {c: hamming_msg(c, step, {f"from_{p}": prev[p][f"to_{c}"] for p in P
                                             if p != c and f"to_{c}" in prev[p]}, P)
                    for c in P}
            rep = grid.exchange(msgs, rnd)
            alive = self._alive(rep)
            for c in set(P) - set(alive):
                dropped[c] = "during-hamming"
            P = alive
            prev = {c: rep[c].arrays for c in P}
            history.append(prev)
        R_from, T_from = history[2], history[3]
        for j in P:
            for k in (c for c in P if c > j):
                blocks[(j, k)] = server_combine(T_from[k][f"T_{j}"], R_from[j][f"R_{k}"],
                                                self.opts.n_bits)
        return P


# ----------------------------------------------------------------------------- methods


class XCLPClient(XCLPClientCore):
    """One-shot XCLP on raw features: private points (partly labelled) + a test slice."""

    def __init__(self, *args: Any, options: XCLPOptions, label_seed: int, **kwargs: Any):
        super().__init__(*args, options=options, **kwargs)
        n_clients = int(self.settings.extra.get("n_clients", 1))
        self.slice = test_slice(len(self.y_test), n_clients, self.cid)
        if options.test_points is not None:
            self.slice = self.slice[:options.test_points]
        self.partial = split_labels(self.data.y, options.labeled_fraction, label_seed)

    def xclp_features(self, message: Message) -> np.ndarray:
        return np.concatenate([self.data.X, self.X_test[self.slice]])

    def xclp_partial_labels(self) -> np.ndarray:
        return np.concatenate([self.partial, np.full(len(self.slice), -1, dtype=np.int64)])

    def _fallback(self) -> np.ndarray:
        """Per-client LP on this client's own data (used by dropped clients)."""
        V = self.xclp_features(Message("local"))
        y = self.xclp_partial_labels()
        if not np.any(y >= 0) or len(V) <= self.opts.k:
            return np.zeros(len(V), dtype=np.int64)
        labels, _, _ = label_propagation(V, y, self.settings.n_classes, k=self.opts.k,
                                         alpha=self.opts.alpha, n_bits=self.opts.n_bits,
                                         seed=self.opts.lsh_seed, power=self.opts.power)
        return labels

    def evaluate(self, message: Message) -> Message:
        n_priv = len(self.data)
        labels = self.xclp_labels if self.xclp_labels is not None else self._fallback()
        test_acc = float(np.mean(labels[n_priv:] == self.y_test[self.slice])) \
            if len(self.slice) else float("nan")
        unl = self.partial < 0
        trans = float(np.mean(labels[:n_priv][unl] == self.data.y[unl])) if unl.any() else 1.0
        return Message("evaluate.reply", category="evaluation",
                       config={"accuracy": test_acc, "unlabeled_accuracy": trans,
                               "fallback": self.xclp_labels is None})


class XCLPServer(ServerRole):
    def __init__(self, core: XCLPServerCore) -> None:
        self.core = core
        self.outcome: XCLPOutcome | None = None

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        if self.outcome is not None:  # one-shot: later rounds only re-evaluate
            return {}
        self.outcome = self.core.run(grid, rnd, grid.client_ids, session=0)
        return {"n_points": float(self.outcome.n_points),
                "xclp_seconds": self.outcome.seconds["total"]}

    def result_extra(self) -> dict[str, Any]:
        if self.outcome is None:
            return {}
        o = self.outcome
        return {"xclp": {"secure": self.core.opts.secure, "lsh_bits": self.core.opts.n_bits,
                         "knn": self.core.opts.k, "alpha": self.core.opts.alpha,
                         "labeled_fraction": self.core.opts.labeled_fraction,
                         "test_points": self.core.opts.test_points,
                         "n_points": o.n_points, "graph_members": o.graph_members,
                         "rowsum_members": o.rowsum_members,
                         "dropped": {str(k): v for k, v in o.dropped.items()},
                         "rowsum_attempts": o.rowsum_attempts, "seconds": o.seconds}}


def _check_clients(clients: list[ClientData]) -> list[ClientData]:
    for cid, c in enumerate(clients):
        if len(c) == 0:
            raise FedLabelsError(f"client {cid} has no data; every XCLP participant needs at "
                                 "least one point (use fewer clients or more data).")
    return clients


class XCLP(Method):
    name = "xclp"
    description = ("XCLP: cross-client label propagation over a SimHash kNN graph "
                   "(--secure none|ot|paillier), one shot")

    def uses_public(self) -> bool:
        return False

    def client_datasets(self, clients: list[ClientData]) -> list[ClientData]:
        return _check_clients(clients)

    def validate(self, n_clients: int, settings: Any, learners: list[Any]) -> None:
        XCLPOptions.from_extra(settings.extra)

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        opts = XCLPOptions.from_extra(ctx.settings.extra)
        return XCLPServer(XCLPServerCore(opts, ctx.settings.n_classes))

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        opts = XCLPOptions.from_extra(ctx.settings.extra)
        settings = _with_clients(ctx)
        return XCLPClient(cid, data, learner, settings, None, X_test, y_test, options=opts,
                          label_seed=ctx.seeds[cid])


def _with_clients(ctx: MethodContext) -> Any:
    from dataclasses import replace

    return replace(ctx.settings, extra={**ctx.settings.extra, "n_clients": len(ctx.seeds)})


# ----------------------------------------------------------------------------- per-client LP


class PerClientLPClient(XCLPClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handlers["perclient.run"] = self.run_lp

    def run_lp(self, message: Message) -> Message:
        V, y = self.xclp_features(message), self.xclp_partial_labels()
        check_label_matrix(y, self.settings.n_classes)
        self.xclp_labels, self.xclp_confidence, _ = label_propagation(
            V, y, self.settings.n_classes, k=self.opts.k, alpha=self.opts.alpha,
            n_bits=self.opts.n_bits, seed=self.opts.lsh_seed, power=self.opts.power)
        return Message("perclient.done", category="control")


class PerClientLPServer(ServerRole):
    def __init__(self) -> None:
        self.done = False

    def run_round(self, rnd: int, grid: Grid) -> dict[str, float]:
        if not self.done:
            msg = Message("perclient.run", category="control")
            grid.exchange({c: msg for c in grid.client_ids}, rnd)
            self.done = True
        return {}


class PerClientLP(XCLP):
    name = "perclient-lp"
    description = "per-client label propagation (each client alone; the XCLP baseline)"

    def make_server(self, ctx: MethodContext, n_public: int, learners: list[Any],
                    client_sizes: list[int]) -> ServerRole:
        return PerClientLPServer()

    def make_client(self, cid: int, data: ClientData, learner: Any, ctx: MethodContext,
                    X_public: np.ndarray | None, X_test: np.ndarray,
                    y_test: np.ndarray) -> ClientRole:
        opts = XCLPOptions.from_extra(ctx.settings.extra)
        return PerClientLPClient(cid, data, learner, _with_clients(ctx), None, X_test, y_test,
                                 options=opts, label_seed=ctx.seeds[cid])
