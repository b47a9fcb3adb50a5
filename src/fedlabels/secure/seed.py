"""Agreeing on the LSH seed without the server learning it (Algorithm 1, line 1).

Commit-then-reveal over the server, with the reveal sealed per pair:

1. every client j draws a 32-byte contribution ``s_j`` (OS CSPRNG) and publishes its X25519
   public key and the commitment ``c_j = SHA-256("fedlabels-commit|seed" ‖ j ‖ s_j)``;
2. after the server has broadcast all keys and commitments, j sends ``s_j`` to every peer
   sealed with their ChaCha20-Poly1305 channel key (X25519 + HKDF);
3. every client opens the reveals, checks each against its commitment (a client cannot pick
   its contribution after seeing the others'), and derives
   ``seed = SHA-256("fedlabels-xclp-lsh-seed" ‖ (i, s_i) for all participants, by id)``.

The server relays only commitments (preimages of 256-bit random values) and ciphertexts, so
it cannot compute the seed, hence not the projection Π: it cannot invert the LSH bits even
if it saw them. The seed is uniform as long as one participant is honest.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedlabels.core.randomness import token_bytes
from fedlabels.secure.keys import SecureProtocolError, check_state, commit, state_bytes, to_u8


class SeedAgreement:
    """One client's part of the seed agreement."""

    def __init__(self, cid: int) -> None:
        self.cid = cid
        self.contribution = token_bytes(32)
        self.commitment = commit(self.contribution, cid)

    def to_state(self) -> dict[str, np.ndarray | int | str]:
        """``type``, ``cid`` and the secret 32-byte ``contribution`` (uint8)."""
        return {"type": "SeedAgreement", "cid": int(self.cid),
                "contribution": to_u8(self.contribution)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SeedAgreement:
        """The party of :meth:`to_state` (same contribution, hence same commitment)."""
        check_state(state, "SeedAgreement", "cid", "contribution")
        obj = cls.__new__(cls)
        obj.cid = int(state["cid"])
        obj.contribution = state_bytes(state, "contribution", 32)
        obj.commitment = commit(obj.contribution, obj.cid)
        return obj

    def derive(self, reveals: dict[int, bytes], commitments: dict[int, bytes]) -> bytes:
        """Check every peer's reveal against its commitment and derive the joint seed."""
        values = dict(reveals)
        values[self.cid] = self.contribution
        missing = sorted(set(commitments) - set(values))
        if missing:
            raise SecureProtocolError(f"seed agreement: no reveal from clients {missing}.")
        h = hashlib.sha256(b"fedlabels-xclp-lsh-seed")
        for cid in sorted(commitments):
            if commit(values[cid], cid) != commitments[cid]:
                raise SecureProtocolError(f"seed agreement: client {cid}'s reveal does not "
                                          "match its commitment.")
            h.update(struct.pack("<I", cid) + values[cid])
        return h.digest()
