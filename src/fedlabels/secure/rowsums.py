"""SecureRowSums (Section 3.2): pairwise-masked sums where each client learns only its rows.

Each participating client j holds ``Z̄⁽ʲ⁾ ∈ R^{n×C}`` (its labels' influence on every point).
Values are encoded in fixed point (``2^32`` scale, two's complement in Z_{2^64}); with m
participants each value must be below 2^30 / m in magnitude, so the sum cannot wrap. The masks
``M⁽ʲ⁾ = Σ_{k>j} PRG(s_jk) − Σ_{k<j} PRG(s_jk)`` (``s_jk`` from X25519 + HKDF, PRG =
ChaCha20) sum to zero over the participants. Client j sends ``Ẑ⁽ʲ⁾ = (Q(Z̄⁽ʲ⁾) + M⁽ʲ⁾)``
without its own rows ``R_j``; the server adds all of them and returns ``Ẑ[R_j]`` to j, who adds
its own masked rows ``Z̃⁽ʲ⁾[R_j]`` and obtains ``Z[R_j]`` (the masks cancel). The server sees
only uniformly distributed values; each client sees only the sum over its own rows.

Every sum is restricted to the rows of the current participants: client j sends only the
rows of the *other participants* (``send_rows``), never those of a client that dropped out.
A row is summed only if one participant withholds it, so no sum the server forms has
cancelling masks (over a departed client's rows the survivors' masks would cancel and the
server, which knows S_L, could solve for their labels). A new mask stream is used for every
``attempt``, so a restart after a dropout never reuses masks.

The masks are bound to the view: each pairwise key is combined with a digest of the
participants, their row ranges and the attempt as the client was told them
(:func:`view_digest`, :func:`bind_keys`). A server that tells two participants different
row ranges (so that both send a third client's rows) gets masks that do not cancel.

With class-balanced propagation the participants also need the total labelled count per
class. Client j sends ``counts⁽ʲ⁾ + K_j`` (mod 2^64) with ``K_j`` a PRG stream under a key
derived from the agreed LSH seed, which every participant knows and the server does not; the
server adds the members' parts and returns the (still masked) sum, and each client removes
``Σ_j K_j`` (:func:`mask_counts`, :func:`sum_counts`, :func:`unmask_counts`). The server sees
only uniform words; each client learns the members' total class counts.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.secure.keys import prg_uint64

SCALE_BITS = 32
_SCALE = float(2 ** SCALE_BITS)
_LIMIT = float(2 ** 62)


def encode_fixed(Z: np.ndarray, terms: int = 1) -> np.ndarray:
    """Fixed-point encoding of real values into Z_{2^64} (uint64, two's complement).

    ``terms``: how many such encodings will be added (the participants of a SecureRowSums):
    each value must stay below 2^30 / terms in magnitude, so that their sum stays below
    2^62 and decodes exactly instead of wrapping around 2^64 unnoticed.
    """
    values = np.asarray(Z, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise FedLabelsError("SecureRowSums: a value to encode is not finite (NaN or inf).")
    scaled = np.rint(values * _SCALE)
    terms = max(1, int(terms))
    if np.any(np.abs(scaled) >= _LIMIT / terms):
        raise FedLabelsError(f"SecureRowSums: a value of magnitude {np.abs(values).max():.3g} "
                             f"does not fit the fixed-point range of a sum of {terms} "
                             f"(|z| < 2^30 / {terms} = {2.0 ** 30 / terms:.4g}).")
    return scaled.astype(np.int64).view(np.uint64)


def decode_fixed(U: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_fixed`."""
    return np.asarray(U, dtype=np.uint64).view(np.int64).astype(np.float64) / _SCALE


def pairwise_mask(my_id: int, keys: dict[int, bytes], n_values: int,
                  attempt: int) -> np.ndarray:
    """``M⁽ʲ⁾``: + PRG for each higher-id peer, − PRG for each lower one (mod 2^64)."""
    mask = np.zeros(n_values, dtype=np.uint64)
    for peer in sorted(keys):
        if peer == my_id:
            continue
        stream = prg_uint64(keys[peer], n_values, stream=attempt)
        if my_id < peer:
            mask += stream
        else:
            mask -= stream
    return mask


def view_digest(rows: dict[int, np.ndarray], attempt: int) -> bytes:
    """A digest of the view a client was given: participants, each one's contiguous row
    range, and the attempt. Participants told different views derive different masks."""
    text = ";".join(f"{c}:{int(r[0]) if len(r) else 0}:{int(r[-1]) + 1 if len(r) else 0}"
                    for c, r in sorted(rows.items()))
    return hashlib.sha256(f"fedlabels-xclp-view|{int(attempt)}|{text}".encode()).digest()


def bind_keys(keys: dict[int, bytes], view: bytes) -> dict[int, bytes]:
    """The pairwise mask keys bound to ``view`` (:func:`view_digest`)."""
    return {c: hashlib.sha256(b"fedlabels-xclp-mask|" + bytes(k) + view).digest()
            for c, k in keys.items()}


def participant_rows(rows: dict[int, np.ndarray], my_id: int) -> np.ndarray:
    """The rows client ``my_id`` sends: those of every other participant, in order."""
    others = [np.asarray(r, dtype=np.int64) for c, r in sorted(rows.items()) if c != my_id]
    return np.sort(np.concatenate(others)) if others else np.zeros(0, dtype=np.int64)


def mask_rows(Zbar: np.ndarray, own_rows: np.ndarray, my_id: int, keys: dict[int, bytes],
              attempt: int, send_rows: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Client step: (rows ``send_rows`` for the server, kept own masked rows ``Z̃⁽ʲ⁾[R_j]``).

    ``keys`` maps every other participant to the pairwise mask key; ``send_rows`` are the
    other participants' rows (:func:`participant_rows`), never a departed client's. Left out,
    every row but ``own_rows`` is sent: right only when every row belongs to a participant.
    """
    n, c = Zbar.shape
    terms = len({*keys, my_id})  # every row is a sum over all participants
    masked = (encode_fixed(Zbar, terms).ravel() + pairwise_mask(my_id, keys, n * c, attempt))
    masked = masked.reshape(n, c)
    if send_rows is None:
        send_rows = np.setdiff1d(np.arange(n), own_rows)
    return masked[send_rows], masked[own_rows]


def server_sum(parts: dict[int, np.ndarray], rows: dict[int, np.ndarray], n: int,
               n_classes: int) -> np.ndarray:
    """Server step: ``Ẑ = Σ_j Ẑ⁽ʲ⁾`` mod 2^64 over the participants' rows only.

    ``parts`` and ``rows`` have the same keys (the participants); part j holds the rows of
    the others (:func:`participant_rows`). A row no participant owns is never summed and
    stays zero; every summed row lacks its owner's part, so it stays masked.
    """
    if sorted(parts) != sorted(rows):
        raise FedLabelsError(f"SecureRowSums: parts from {sorted(parts)} but rows of "
                             f"{sorted(rows)}; every sum is over the participants' rows only.")
    total = np.zeros((n, n_classes), dtype=np.uint64)
    for cid, part in parts.items():
        send = participant_rows(rows, cid)
        part = np.asarray(part, dtype=np.uint64)
        if part.shape != (len(send), n_classes):
            raise FedLabelsError(f"SecureRowSums: client {cid} sent {part.shape[0]} rows, "
                                 f"expected the other participants' {len(send)}.")
        total[send] += part
    return total


def unmask_rows(returned: np.ndarray, own_masked: np.ndarray) -> np.ndarray:
    """Client step: ``Z[R_j] = Ẑ[R_j] + Z̃⁽ʲ⁾[R_j]`` decoded to floats."""
    return decode_fixed(np.asarray(returned, dtype=np.uint64) + own_masked)


# ----------------------------------------------------------------------------- class counts


def _count_masks(seed: bytes, cid: int, attempt: int, n_classes: int) -> np.ndarray:
    """Client ``cid``'s mask ``K_j`` for the class counts: a PRG stream under a key derived
    from the agreed LSH seed (known to every participant, never to the server)."""
    key = hashlib.sha256(b"fedlabels-xclp-counts|" + bytes(seed)
                         + struct.pack("<II", int(attempt), int(cid))).digest()
    return prg_uint64(key, n_classes)


def mask_counts(counts: np.ndarray, seed: bytes, cid: int, attempt: int) -> np.ndarray:
    """Client step of the class-count sum: ``counts⁽ʲ⁾ + K_j`` mod 2^64 (uniform alone)."""
    counts = np.asarray(counts, dtype=np.int64).view(np.uint64)
    return counts + _count_masks(seed, cid, attempt, len(counts))


def sum_counts(parts: list[np.ndarray]) -> np.ndarray:
    """Server step: the sum of the masked counts mod 2^64 (still masked by ``Σ K_j``)."""
    total = np.zeros(len(parts[0]) if parts else 0, dtype=np.uint64)
    for part in parts:
        total += np.asarray(part, dtype=np.uint64)
    return total


def unmask_counts(total: np.ndarray, seed: bytes, members: list[int],
                  attempt: int) -> np.ndarray:
    """Client step: the members' total class counts, ``Σ_j (counts⁽ʲ⁾ + K_j) − Σ_j K_j``."""
    total = np.asarray(total, dtype=np.uint64).copy()
    for cid in members:
        total -= _count_masks(seed, cid, attempt, len(total))
    counts = total.view(np.int64)
    if np.any(counts < 0) or np.any(counts >= 2 ** 48):  # masked words are ~uniform
        raise FedLabelsError("SecureRowSums: the class counts do not unmask to counts "
                             "(the members or the attempt differ from the sum's).")
    return counts
