"""Secure aggregation of integer vectors in the ring Z_{2^k} (Bonawitz et al. 2017, no recovery).

Every member j of a group G adds to its integer vector x_j the pairwise mask
M_j = Σ_{i>j} PRG(s_ji) − Σ_{i<j} PRG(s_ji) (mod 2^k)
(:func:`fedlabels.secure.rowsums.pairwise_mask`) under keys from X25519 + HKDF, bound to
the group's *view* (the round, the attempt and the members, :func:`group_view`) by
:func:`fedlabels.secure.rowsums.bind_keys`. The masks cancel only in the sum over exactly
G, with every member having been told the same view; the server sees each
y_j = x_j + M_j, uniform in Z_{2^k} whatever x_j, and learns Σ_j x_j mod 2^k.

There is no dropout recovery: a sum that lacks a member keeps that member's masks and is
uniform; the server starts a new attempt with the members left, and the view (hence every
mask) of a new attempt is new.

Wire format: each member sends its residues packed to exactly k bits
(:func:`pack_residues`, ⌈d·k/8⌉ bytes, least significant bit first); the server unpacks each
after checking its length (:func:`unpack_residues`), so a vector of another length is a
one-line refusal naming its sender.

Ring size: :func:`ring_bits` is the smallest k with 2^{k−1} above the largest magnitude the
sum may take, so the signed residue of the sum mod 2^k (:func:`ring_sum`) is the integer sum
itself; the caller bounds that magnitude (with overwhelming probability, for noise).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping

import numpy as np

from fedlabels.comm.id_lists import members_text
from fedlabels.core.errors import FedLabelsError
from fedlabels.secure.keys import KeyPair
from fedlabels.secure.rowsums import bind_keys, pairwise_mask

#: the largest ring: sums are formed in uint64
MAX_BITS = 64


def ring_bits(worst: float) -> int:
    """The smallest k such that every integer of magnitude <= ``worst`` is a distinct signed
    residue mod 2^k (2^{k−1} > worst); refused beyond 64 bits."""
    if not (math.isfinite(worst) and worst >= 0):
        raise FedLabelsError(f"the largest magnitude of a masked sum must be a finite number "
                             f">= 0, got {worst!r}.")
    bits = max(2, math.floor(math.log2(worst + 1)) + 2) if worst >= 1 else 2
    while 2 ** (bits - 1) <= worst:  # (log2's float rounding)
        bits += 1
    if bits > MAX_BITS:
        raise FedLabelsError(f"a masked sum of magnitude up to {worst:.3g} needs a ring of "
                             f"{bits} bits, beyond {MAX_BITS}; use a coarser --grid.")
    return bits


#: values packed per chunk (a multiple of 8, so every chunk is whole bytes): bounds the
#: bit matrix of :func:`pack_residues` and :func:`unpack_residues` to 4 MiB
_CHUNK = 1 << 16


def packed_size(size: int, bits: int) -> int:
    """The bytes of ``size`` residues mod 2^``bits`` packed to ``bits`` bits each."""
    return -(-int(size) * int(bits) // 8)


def pack_residues(residues: np.ndarray, bits: int) -> np.ndarray:
    """Residues mod 2^``bits`` (unsigned, each below 2^``bits``) packed to exactly ``bits``
    bits each, least significant bit first: :func:`packed_size` bytes (uint8)."""
    _check_bits(bits)
    words = np.ascontiguousarray(np.asarray(residues).ravel(), dtype="<u8")
    out = []
    for start in range(0, words.size, _CHUNK):
        chunk = words[start:start + _CHUNK].view(np.uint8).reshape(-1, 8)
        plane = np.unpackbits(chunk, axis=1, bitorder="little")[:, :bits]
        out.append(np.packbits(plane.ravel(), bitorder="little"))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint8)


def unpack_residues(packed: np.ndarray, bits: int, size: int, who: str = "a masked vector"
                    ) -> np.ndarray:
    """Inverse of :func:`pack_residues`: ``size`` residues (uint64). Refused in one line
    naming ``who`` unless ``packed`` is exactly :func:`packed_size` bytes."""
    _check_bits(bits)
    arr = np.asarray(packed).ravel()
    want = packed_size(size, bits)
    if arr.dtype != np.uint8 or arr.size != want:
        raise FedLabelsError(f"{who} must be {want} bytes ({size} residues of {bits} bits "
                             f"packed), got {arr.size} values of {arr.dtype}; refusing it.")
    out = np.empty(size, dtype="<u8")
    step = _CHUNK * bits // 8  # the bytes of one chunk
    for i, start in enumerate(range(0, size, _CHUNK)):
        n = min(_CHUNK, size - start)
        plane = np.unpackbits(arr[i * step:i * step + packed_size(n, bits)], count=n * bits,
                              bitorder="little").reshape(n, bits)
        full = np.zeros((n, 64), dtype=np.uint8)
        full[:, :bits] = plane
        out[start:start + n] = np.packbits(full, axis=1, bitorder="little").view("<u8").ravel()
    return out.astype(np.uint64)


def _check_bits(bits: int) -> None:
    if not 1 <= int(bits) <= MAX_BITS:
        raise FedLabelsError(f"a ring has 1 to {MAX_BITS} bits, got {bits}.")


def _modulus_mask(bits: int) -> np.uint64:
    return np.uint64((1 << bits) - 1)


def group_view(rnd: int, attempt: int, group: Iterable[int]) -> bytes:
    """A digest of what a member was told: the round, the attempt and the members."""
    text = f"fedlabels-secagg-view|{int(rnd)}|{int(attempt)}|{members_text(group)}"
    return hashlib.sha256(text.encode()).digest()


def mask_keys(keypair: KeyPair, my_id: int, peer_publics: Mapping[int, bytes],
              view: bytes) -> dict[int, bytes]:
    """The pairwise mask keys with every peer (X25519 + HKDF), bound to ``view``."""
    return bind_keys({c: keypair.shared_key(my_id, c, pub, "secagg-mask")
                      for c, pub in peer_publics.items() if c != my_id}, view)


def mask_vector(values: np.ndarray, my_id: int, keys: Mapping[int, bytes], attempt: int,
                bits: int) -> np.ndarray:
    """``values`` (integers) plus this member's pairwise mask, mod 2^``bits``, packed
    (:func:`pack_residues`)."""
    x = np.asarray(values).ravel()
    if x.dtype.kind not in "iu":
        raise FedLabelsError(f"a masked sum takes integers, got {x.dtype}.")
    word = x.astype(np.int64).view(np.uint64)  # two's complement: x mod 2^64
    masked = (word + pairwise_mask(my_id, dict(keys), x.size, attempt)) & _modulus_mask(bits)
    return pack_residues(masked, bits)


def ring_sum(parts: Mapping[int, np.ndarray], bits: int, size: int) -> np.ndarray:
    """The sum of the members' packed masked vectors (member -> :func:`mask_vector`) mod
    2^``bits`` as signed integers (int64) in [−2^{k−1}, 2^{k−1}); a vector of another
    length is refused naming its member."""
    total = np.zeros(size, dtype=np.uint64)
    for cid in sorted(parts):
        total += unpack_residues(parts[cid], bits, size, f"client {cid}'s masked vector")
    total &= _modulus_mask(bits)
    signed = total.astype(np.int64) if bits < 64 else total.view(np.int64)
    if bits < 64:
        signed = np.where(signed >= 2 ** (bits - 1), signed - 2 ** bits, signed)
    return signed.astype(np.int64)


__all__ = ["MAX_BITS", "group_view", "mask_keys", "mask_vector",
           "pack_residues", "packed_size", "ring_bits", "ring_sum", "unpack_residues"]
