"""SecureHamming as a message sequence: each client's steps and the server's relaying.

The pairwise primitives live in :mod:`~fedlabels.secure.paillier_hamming` and
:mod:`~fedlabels.secure.ot_hamming`; this module runs them for all pairs of a set of
clients through the server, as Algorithm 1 (line 5) of XCLP needs:

* :class:`HammingParty` — one client's side. Step 1 sends the client's own block
  ``H_self`` (its points against themselves, computed locally) and opens every pairwise
  protocol; each later step answers what the server relayed. Client-to-client messages are
  sealed with :class:`~fedlabels.secure.channels.PeerChannels` (``to_<peer>`` out,
  ``from_<sender>`` in; Paillier's ``res_<holder>``, relayed as ``res_<evaluator>``).
* :func:`server_hamming` — the server's side: from the step-1 replies it relays steps 2-3
  (Paillier) or 2-5 (OT) through a ``send`` callback and combines the masked shares ``T``
  and ``R`` into the Hamming matrix H. Clients that do not answer a step are left out from
  then on; H covers the clients that completed every step.

For a pair j < k, j is the SHADE sender and k the receiver. The Paillier key holder of a
pair is chosen by :func:`paillier_holder` over the step-1 roster (the clients sent step 1,
sorted) so that every client holds the key for about half of its pairs (exactly (m−1)/2
for odd m; decryptions are balanced across clients instead of falling mostly on client 0).
Message keys: Paillier ``enc``, ``pk_n``, ``pk_hs`` (step 1, holders), ``res_<j>`` +
``mask_<j>`` (step 2, evaluators), ``T_<k>`` (step 3, holders); OT ``to_<peer>`` (steps
1-4), ``R_<k>`` (step 4, senders), ``T_<j>`` (step 5, receivers). ``H_self`` travels
compactly: the strict upper triangle only, in the smallest unsigned type that holds L
(:func:`pack_self_block`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.propagation.core import hamming_matrix, unpack_bits
from fedlabels.secure import ot_hamming as ot
from fedlabels.secure import paillier_hamming as ph
from fedlabels.secure.channels import PeerChannels
from fedlabels.secure.keys import check_state, sub_state

Arrays = dict[str, np.ndarray]
#: ``send(step, {cid: arrays})`` -> the arrays of the clients that answered
Send = Callable[[int, dict[int, Arrays]], Mapping[int, Mapping[str, np.ndarray]]]
MODES = ("paillier", "ot")


def paillier_holder(a: int, b: int, roster: list[int]) -> int:
    """The key holder of the pair (a, b): with positions i < j in the sorted ``roster``, the
    lower client if j − i ≤ m // 2, else the higher (a circulant orientation: each client
    holds for ⌊(m−1)/2⌋ or ⌈(m−1)/2⌉ of its m − 1 pairs)."""
    order = sorted(roster)
    lo, hi = sorted((a, b))
    gap = order.index(hi) - order.index(lo)
    return lo if gap <= len(order) // 2 else hi


def _self_dtype(n_bits: int) -> type[np.unsignedinteger[Any]]:
    return np.uint8 if n_bits < 2 ** 8 else np.uint16 if n_bits < 2 ** 16 else np.uint32


def pack_self_block(H: np.ndarray, n_bits: int) -> np.ndarray:
    """A client's own symmetric Hamming block (zero diagonal) as its strict upper triangle,
    in the smallest unsigned type holding L: n(n−1)/2 values instead of n² int32."""
    rows, cols = np.triu_indices(len(H), k=1)
    return np.asarray(H)[rows, cols].astype(_self_dtype(n_bits))


def unpack_self_block(packed: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_self_block`: the full (n, n) int32 block."""
    t = len(packed)
    n = (1 + math.isqrt(1 + 8 * t)) // 2
    if n * (n - 1) // 2 != t:
        raise FedLabelsError(f"SecureHamming: H_self has {t} values, not n(n-1)/2 for any n.")
    H = np.zeros((n, n), dtype=np.int32)
    rows, cols = np.triu_indices(n, k=1)
    H[rows, cols] = packed
    H[cols, rows] = packed
    return H


class HammingParty:
    """Client ``cid``'s part of SecureHamming over its packed LSH bits ``packed``.

    Paillier keys under 2048 bits need ``insecure_small_keys`` (tests only).
    """

    def __init__(self, mode: str, cid: int, packed: np.ndarray, n_bits: int,
                 key_bits: int, insecure_small_keys: bool = False) -> None:
        if mode not in MODES:
            raise FedLabelsError(f"SecureHamming mode must be one of {MODES}, got {mode!r}.")
        if mode == "paillier":
            ph.check_key_bits(key_bits, insecure_small_keys)
        self.mode, self.cid, self.n_bits, self.key_bits = mode, int(cid), n_bits, key_bits
        self.insecure_small_keys = bool(insecure_small_keys)
        self.packed = np.asarray(packed, dtype=np.uint8)
        self.holder: ph.KeyHolder | None = None
        self.roster: list[int] = []  # Paillier: the step-1 clients, which fix the key roles
        self.receivers: dict[int, ot.ShadeReceiver] = {}  # SHADE with each lower peer
        self.senders: dict[int, ot.ShadeSender] = {}  # SHADE with each higher peer

    @property
    def bits(self) -> np.ndarray:
        """The (n, L) 0/1 bits."""
        return unpack_bits(self.packed, self.n_bits)

    def step(self, step: int, peers: list[int], n_points: Mapping[int, int],
             arrays: Mapping[str, np.ndarray], channels: PeerChannels | None) -> Arrays:
        """This client's reply to step ``step`` (peers: the clients still taking part)."""
        lower = [c for c in peers if c < self.cid]
        higher = [c for c in peers if c > self.cid]
        if step == 1:
            H_self = hamming_matrix(self.packed, self.packed, self.n_bits)
            out: Arrays = {"H_self": pack_self_block(H_self, self.n_bits)}
            if self.mode == "paillier":
                self.roster = sorted({*peers, self.cid})
                out.update(self._paillier_first(self.holds_for(peers), channels))
            else:
                out.update(self._ot_first(lower, n_points, _need(channels)))
            return out
        if self.mode == "paillier":
            return self._paillier_step(step, peers, n_points, arrays, _need(channels))
        return self._ot_step(step, lower, higher, n_points, arrays, _need(channels))

    def holds_for(self, peers: list[int]) -> list[int]:
        """Paillier: the peers (of ``peers``) for which this client holds the key."""
        return [c for c in peers if c != self.cid
                and paillier_holder(self.cid, c, self.roster) == self.cid]

    # ---------------------------------------------------------------- Paillier
    def _paillier_first(self, evaluators: list[int], channels: PeerChannels | None) -> Arrays:
        if not evaluators:  # a key holder only if some pair assigns it the key
            return {}
        self.holder = ph.KeyHolder(self.key_bits,
                                   insecure_small_keys=self.insecure_small_keys)
        nb = self.key_bits // 8
        out = {"enc": ph.holder_encrypt(self.holder, self.bits, self.n_bits),
               "pk_n": ph.int_to_u8([self.holder.n], nb)[0],
               "pk_hs": ph.int_to_u8([int(self.holder.hs)], 2 * nb)[0]}
        auth = channels.auth if channels is not None else None
        if auth is not None:  # signed for each evaluator: the server relays them in the clear
            value = _enc_digest(out["pk_n"], out["pk_hs"], out["enc"])
            out.update({f"encsig_{k}": auth.sign("paillier-enc", k, value) for k in evaluators})
        return out

    def _paillier_step(self, step: int, peers: list[int], n_points: Mapping[int, int],
                       arrays: Mapping[str, np.ndarray], channels: PeerChannels) -> Arrays:
        out: Arrays = {}
        mine = self.holds_for(peers)
        if step == 2:  # evaluator for every peer that holds the key of our pair
            bits = self.bits
            for j in (c for c in peers if c != self.cid and c not in mine):
                if channels.auth is not None:  # the holder's own key and bits, for us
                    channels.auth.verify(j, "paillier-enc", self.cid, arrays.get(f"encsig_{j}"),
                                         _enc_digest(arrays[f"pk_n_{j}"], arrays[f"pk_hs_{j}"],
                                                     arrays[f"enc_{j}"]))
                n = int.from_bytes(arrays[f"pk_n_{j}"].tobytes(), "little")
                hs = int.from_bytes(arrays[f"pk_hs_{j}"].tobytes(), "little")
                res, masks = ph.evaluate(n, hs, self.key_bits, arrays[f"enc_{j}"],
                                         n_points[j], bits, self.n_bits)
                # ciphertexts under j's key, sealed for j: the server relays them but cannot
                # swap in its own (say j's enc) and have j decrypt them
                out[f"res_{j}"] = channels.seal(j, "paillier-res", res.tobytes())
                out[f"mask_{j}"] = masks  # uniform masks R, for the server
        elif step == 3:  # key holder: decrypt what each of its evaluators returned
            for k in mine:
                holder = _need(self.holder)
                width = 2 * holder.key_bits // 8
                raw = channels.open_entry(arrays, f"res_{k}", k, "paillier-res")
                expected = n_points[k] * -(-len(self.packed) // ph.slots_per_ciphertext(
                    holder.key_bits, self.n_bits))
                if len(raw) != expected * width:
                    raise FedLabelsError(f"SecureHamming: client {k} returned "
                                         f"{len(raw) // width} ciphertexts, expected "
                                         f"{expected}.")
                res = np.frombuffer(raw, dtype=np.uint8).reshape(expected, width)
                out[f"T_{k}"] = ph.holder_decrypt(holder, res)
        return out

    # ---------------------------------------------------------------- OT (SHADE)
    def _ot_first(self, lower: list[int], n_points: Mapping[int, int],
                  channels: PeerChannels) -> Arrays:
        out: Arrays = {}
        bits = self.bits
        for j in lower:  # SHADE receiver for every j < me: base-OT first message
            self.receivers[j] = ot.ShadeReceiver(bits, n_points[j], self.n_bits)
            out[f"to_{j}"] = channels.seal(j, "ot1", self.receivers[j].step1().tobytes())
        return out

    def _ot_step(self, step: int, lower: list[int], higher: list[int],
                 n_points: Mapping[int, int], arrays: Mapping[str, np.ndarray],
                 channels: PeerChannels) -> Arrays:
        out: Arrays = {}
        if step == 2:  # SHADE sender for k > me: base-OT replies
            bits = self.bits
            for k in higher:
                A = np.frombuffer(channels.open(arrays, k, "ot1"), dtype=np.uint8)
                self.senders[k] = ot.ShadeSender(bits, n_points[k], self.n_bits)
                out[f"to_{k}"] = channels.seal(k, "ot2", self.senders[k].step1(A).tobytes())
        elif step == 3:  # receiver: the IKNP matrix U
            for j in lower:
                B = np.frombuffer(channels.open(arrays, j, "ot2"), dtype=np.uint8)
                U = self.receivers[j].step2(B)
                out[f"to_{j}"] = channels.seal(j, "ot3",
                                               np.int64(U.shape[1]).tobytes() + U.tobytes())
        elif step == 4:  # sender: corrections to k, R to the server
            for k in higher:
                raw = channels.open(arrays, k, "ot3")
                cols = int(np.frombuffer(raw[:8], dtype=np.int64)[0])
                U = np.frombuffer(raw[8:], dtype=np.uint8).reshape(-1, cols)
                e, R = self.senders[k].step2(U)
                out[f"to_{k}"] = channels.seal(k, "ot4", e.tobytes())
                out[f"R_{k}"] = R
        elif step == 5:  # receiver: T to the server
            for j in lower:
                e = np.frombuffer(channels.open(arrays, j, "ot4"),
                                  dtype=ot.wire_dtype(self.n_bits))
                out[f"T_{j}"] = self.receivers[j].step3(e)
        return out

    # ---------------------------------------------------------------- state
    def to_state(self) -> dict[str, Any]:
        """Plain state (secret: key material and bits): the party's settings and bits, the
        Paillier key under ``holder.``, SHADE parties under ``recv.<j>.`` / ``send.<k>.``."""
        state: dict[str, Any] = {"type": "HammingParty", "mode": self.mode, "cid": self.cid,
                                 "n_bits": int(self.n_bits), "key_bits": int(self.key_bits),
                                 "insecure_small_keys": self.insecure_small_keys,
                                 "packed": self.packed.copy(),
                                 "roster": np.asarray(self.roster, dtype=np.int64)}
        parts: list[tuple[str, Any]] = [("holder.", self.holder)] if self.holder else []
        parts += [(f"recv.{j}.", r) for j, r in self.receivers.items()]
        parts += [(f"send.{k}.", s) for k, s in self.senders.items()]
        for prefix, party in parts:
            state.update({prefix + key: value for key, value in party.to_state().items()})
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> HammingParty:
        """The party of :meth:`to_state`, ready for the step that was due next."""
        check_state(state, "HammingParty", "mode", "cid", "n_bits", "key_bits", "packed")
        obj = cls(str(state["mode"]), int(state["cid"]), np.array(state["packed"]),
                  int(state["n_bits"]), int(state["key_bits"]),
                  bool(state.get("insecure_small_keys", False)))
        obj.roster = [int(c) for c in np.asarray(state.get("roster", []))]
        if any(key.startswith("holder.") for key in state):
            obj.holder = ph.KeyHolder.from_state(sub_state(state, "holder."))
        obj.receivers = {j: ot.ShadeReceiver.from_state(sub_state(state, f"recv.{j}."))
                         for j in _ids(state, "recv.")}
        obj.senders = {k: ot.ShadeSender.from_state(sub_state(state, f"send.{k}."))
                       for k in _ids(state, "send.")}
        return obj


def _enc_digest(pk_n: np.ndarray, pk_hs: np.ndarray, enc: np.ndarray) -> bytes:
    """What a key holder's signature covers: its Paillier key and its encrypted bits."""
    from fedlabels.secure.identity import digest

    enc = np.asarray(enc)
    return digest(pk_n, pk_hs, np.asarray(enc.shape, dtype="<i8"), enc)


def _ids(state: Mapping[str, Any], prefix: str) -> list[int]:
    return sorted({int(key[len(prefix):].split(".", 1)[0]) for key in state
                   if key.startswith(prefix)})


def _need(value: Any) -> Any:
    if value is None:
        raise FedLabelsError("SecureHamming: a step arrived before the state it needs "
                             "(peer channels or the Paillier key).")
    return value


# ----------------------------------------------------------------------------- server


def server_hamming(mode: str, first: Mapping[int, Mapping[str, np.ndarray]], send: Send,
                   key_bits: int, n_bits: int, roster: list[int] | None = None
                   ) -> tuple[list[int], np.ndarray]:
    """Relay the steps after step 1 and combine: (clients that completed, their H).

    ``first`` holds the step-1 replies; ``roster`` the clients step 1 was sent to (it fixes
    the Paillier key roles; default: those that replied). H's blocks follow the sorted ids.
    """
    if mode not in MODES:
        raise FedLabelsError(f"SecureHamming mode must be one of {MODES}, got {mode!r}.")
    members = sorted(first)
    blocks = {(c, c): unpack_self_block(np.asarray(first[c]["H_self"])) for c in members}
    if mode == "paillier":
        members = _paillier_rounds(members, first, send, blocks, key_bits, n_bits,
                                   sorted(roster if roster is not None else members))
    else:
        members = _ot_rounds(members, first, send, blocks, key_bits, n_bits)
    H = np.block([[blocks[(a, b)] if (a, b) in blocks else blocks[(b, a)].T
                   for b in members] for a in members])
    return members, H


def _paillier_rounds(P: list[int], first: Mapping[int, Mapping[str, np.ndarray]], send: Send,
                     blocks: dict[tuple[int, int], np.ndarray], key_bits: int,
                     n_bits: int, roster: list[int]) -> list[int]:
    pk = {c: (first[c]["pk_n"], first[c]["pk_hs"], first[c]["enc"])
          for c in P if "enc" in first[c]}
    n_pts = {c: len(blocks[(c, c)]) for c in P}

    def held_by(j: int, members: list[int]) -> list[int]:
        return [k for k in members if k != j and paillier_holder(j, k, roster) == j]

    msgs = {}
    for k in P:  # each holder's key and ciphertexts to its evaluators
        arrays: Arrays = {}
        for j in (c for c in P if k in held_by(c, P)):
            arrays.update({f"pk_n_{j}": pk[j][0], f"pk_hs_{j}": pk[j][1], f"enc_{j}": pk[j][2]})
            if f"encsig_{k}" in first[j]:  # the holder's signature for this evaluator
                arrays[f"encsig_{j}"] = first[j][f"encsig_{k}"]
        msgs[k] = arrays
    rep2 = send(2, msgs)
    P = sorted(rep2)
    rep3 = send(3, {j: {f"res_{k}": rep2[k][f"res_{j}"] for k in held_by(j, P)} for j in P})
    P = sorted(rep3)
    for j in P:
        n = int.from_bytes(pk[j][0].tobytes(), "little") if j in pk else 0
        for k in held_by(j, P):
            blocks[(j, k)] = ph.server_combine(n, key_bits, rep3[j][f"T_{k}"],
                                               rep2[k][f"mask_{j}"], n_pts[j], n_pts[k],
                                               n_bits)
    return P


def _ot_rounds(P: list[int], first: Mapping[int, Mapping[str, np.ndarray]], send: Send,
               blocks: dict[tuple[int, int], np.ndarray], key_bits: int,
               n_bits: int) -> list[int]:
    prev = {c: first[c] for c in P}
    history = []
    for step in (2, 3, 4, 5):  # relay every sealed to_<c> as from_<sender>
        rep = send(step, {c: {f"from_{p}": prev[p][f"to_{c}"] for p in P
                              if p != c and f"to_{c}" in prev[p]} for c in P})
        P = sorted(rep)
        prev = {c: rep[c] for c in P}
        history.append(prev)
    R_from, T_from = history[2], history[3]
    for j in P:
        for k in (c for c in P if c > j):
            blocks[(j, k)] = ot.server_combine(T_from[k][f"T_{j}"], R_from[j][f"R_{k}"], n_bits)
    return P
