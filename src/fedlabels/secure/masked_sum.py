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

Ring size: :func:`ring_bits` is the smallest k with 2^{k−1} above the largest magnitude the
sum may take, so the signed residue of the sum mod 2^k (:func:`ring_sum`) is the integer sum
itself; the caller bounds that magnitude (with overwhelming probability, for noise).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping

import numpy as np

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


def ring_dtype(bits: int) -> np.dtype:
    """The narrowest unsigned integer type that holds a residue mod 2^``bits``."""
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        if bits <= 8 * np.dtype(dtype).itemsize:
            return np.dtype(dtype)
    raise FedLabelsError(f"a ring of {bits} bits is beyond {MAX_BITS}.")


def _modulus_mask(bits: int) -> np.uint64:
    return np.uint64((1 << bits) - 1)


def group_view(rnd: int, attempt: int, group: Iterable[int]) -> bytes:
    """A digest of what a member was told: the round, the attempt and the members."""
    members = ",".join(str(int(c)) for c in sorted(group))
    return hashlib.sha256(f"fedlabels-secagg-view|{int(rnd)}|{int(attempt)}|{members}"
                          .encode()).digest()


def mask_keys(keypair: KeyPair, my_id: int, peer_publics: Mapping[int, bytes],
              view: bytes) -> dict[int, bytes]:
    """The pairwise mask keys with every peer (X25519 + HKDF), bound to ``view``."""
    return bind_keys({c: keypair.shared_key(my_id, c, pub, "secagg-mask")
                      for c, pub in peer_publics.items() if c != my_id}, view)


def mask_vector(values: np.ndarray, my_id: int, keys: Mapping[int, bytes], attempt: int,
                bits: int) -> np.ndarray:
    """``values`` (integers) plus this member's pairwise mask, mod 2^``bits``, as
    :func:`ring_dtype`."""
    x = np.asarray(values).ravel()
    if x.dtype.kind not in "iu":
        raise FedLabelsError(f"a masked sum takes integers, got {x.dtype}.")
    word = x.astype(np.int64).view(np.uint64)  # two's complement: x mod 2^64
    masked = (word + pairwise_mask(my_id, dict(keys), x.size, attempt)) & _modulus_mask(bits)
    return masked.astype(ring_dtype(bits))


def ring_sum(parts: Iterable[np.ndarray], bits: int, size: int) -> np.ndarray:
    """The sum of the members' masked vectors mod 2^``bits`` as signed integers (int64)
    in [−2^{k−1}, 2^{k−1})."""
    total = np.zeros(size, dtype=np.uint64)
    for part in parts:
        arr = np.asarray(part)
        if arr.dtype != ring_dtype(bits) or arr.size != size:
            raise FedLabelsError(f"a masked vector must be {size} residues of type "
                                 f"{ring_dtype(bits)}, got {arr.size} of {arr.dtype}.")
        total += arr.ravel().astype(np.uint64)
    total &= _modulus_mask(bits)
    signed = total.astype(np.int64) if bits < 64 else total.view(np.int64)
    if bits < 64:
        signed = np.where(signed >= 2 ** (bits - 1), signed - 2 ** bits, signed)
    return signed.astype(np.int64)


__all__ = ["MAX_BITS", "group_view", "mask_keys", "mask_vector", "ring_bits", "ring_dtype",
           "ring_sum"]
