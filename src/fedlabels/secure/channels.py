"""Sealed client-to-client messages that the server relays (XCLP's peer channels).

Each pair of clients shares a ChaCha20-Poly1305 key (X25519 + HKDF, purpose ``channel``);
the associated data binds the session, the purpose, the sender and the recipient, so the
server can neither read a relayed message nor move it to another pair, step or session.
A sealed message to peer ``p`` travels as the array ``to_p``; the server forwards it as
``from_<sender>``.

ChaCha20-Poly1305 seals at most 2^31 − 1 bytes at once, so a longer payload (a Paillier
evaluator's ciphertexts for a large pair) is sealed in pieces of :data:`PIECE` bytes, each
with its index and the number of pieces in its associated data: the server can neither
reorder, drop nor duplicate pieces undetected. A payload of one piece is sealed as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from fedlabels.secure.keys import KeyPair, SecureProtocolError, open_sealed, seal, to_u8

if TYPE_CHECKING:
    from fedlabels.secure.identity import Authenticator

#: plaintext bytes per sealed piece (below ChaCha20-Poly1305's limit of 2^31 − 1)
PIECE = 1 << 30
_OVERHEAD = 12 + 16  # nonce and tag of each piece


class PeerChannels:
    """Client ``cid``'s channels to its peers in one XCLP session (derived, no own state);
    ``auth`` signs and checks the values relayed in the clear (None: a site without an
    identity key and roster, unauthenticated)."""

    def __init__(self, keypair: KeyPair, cid: int, session: int,
                 peer_pubs: Mapping[int, bytes], auth: Authenticator | None = None) -> None:
        self.cid = cid
        self.session = session
        self.auth = auth
        self.keys = {c: keypair.shared_key(cid, c, pub, "channel")
                     for c, pub in peer_pubs.items()}

    def _context(self, purpose: str, src: int, dst: int) -> bytes:
        return f"xclp|{self.session}|{purpose}|{src}->{dst}".encode()

    def seal(self, peer: int, purpose: str, payload: bytes) -> np.ndarray:
        """``payload`` for ``peer``, sealed (what goes into ``to_<peer>``)."""
        context = self._context(purpose, self.cid, peer)
        count = max(1, -(-len(payload) // PIECE))
        if count == 1:
            return to_u8(seal(self.keys[peer], payload, context))
        view = memoryview(payload)
        return to_u8(b"".join(seal(self.keys[peer], bytes(view[i * PIECE:(i + 1) * PIECE]),
                                   _piece_context(context, i, count)) for i in range(count)))

    def open(self, arrays: Mapping[str, np.ndarray], peer: int, purpose: str) -> bytes:
        """The payload ``peer`` sealed for this client (relayed as ``from_<peer>``)."""
        return self.open_entry(arrays, f"from_{peer}", peer, purpose)

    def open_entry(self, arrays: Mapping[str, np.ndarray], key: str, peer: int,
                   purpose: str) -> bytes:
        """The payload ``peer`` sealed for this client, relayed under the entry ``key``."""
        if key not in arrays or peer not in self.keys:
            raise SecureProtocolError(f"client {self.cid}: no sealed {purpose!r} message from "
                                      f"client {peer} was relayed (or no key for it).")
        blob = np.asarray(arrays[key]).tobytes()
        context = self._context(purpose, peer, self.cid)
        size = PIECE + _OVERHEAD
        count = max(1, -(-len(blob) // size))
        if count == 1:
            return open_sealed(self.keys[peer], blob, context)
        return b"".join(open_sealed(self.keys[peer], blob[i * size:(i + 1) * size],
                                    _piece_context(context, i, count)) for i in range(count))


def _piece_context(context: bytes, index: int, count: int) -> bytes:
    return context + f"|piece {index}/{count}".encode()
