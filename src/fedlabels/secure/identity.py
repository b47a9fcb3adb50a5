"""Sites' long-term identity keys: signatures on what a site publishes through the server.

The server relays the values one site relies on from another (its X25519 key and seed
commitment, a Paillier key holder's key and encrypted bits). Unsigned, a server that
deviates could insert a peer of its own (a Sybil) or swap a relayed value for its own; as
Bonawitz et al. (2017) do, every site therefore holds a long-term Ed25519 identity key
(private key from the OS CSPRNG, :mod:`fedlabels.core.randomness`) and every site knows the
federation's *roster* (client id → identity public key) from its own configuration,
distributed out of band, never from a server message.

A site signs each relayed value bound to the run (a ``run_id`` agreed out of band with the
roster, the XCLP session number and the group the server announced), the purpose and both
ids (``dst`` = :data:`ANY_PEER` for a value broadcast to every peer, such as the X25519
key), so a signature cannot be replayed across runs, sessions, groups, purposes or roles. A
site verifies before it uses a relayed value and refuses (:class:`SecureProtocolError`, one
line naming the peer) a peer outside its roster, a missing or a wrong signature, and a
roster key that is not canonical, no point or of small order
(:mod:`fedlabels.secure.ed25519_point`: OpenSSL verifies a forged signature under a
small-order key).

In the simulator the session builder is the trusted setup (:func:`trusted_setup`): it draws
every client's identity key and the run id and hands each client role its own private key
and the roster (:meth:`FederationTrust.site`), never the server role. In a deployment a
site makes its own key and sends only its public half; the sites pin the roster's
fingerprint (:mod:`fedlabels.secure.roster`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from fedlabels.core.randomness import token_bytes
from fedlabels.secure.keys import SecureProtocolError, to_u8

#: ``dst`` of a value a site broadcasts to every peer of its group (its X25519 key)
ANY_PEER = -1
SIGNATURE_BYTES = 64


class Identity:
    """A site's long-term Ed25519 identity key (private key from the OS CSPRNG)."""

    def __init__(self, private: bytes | None = None) -> None:
        """A fresh key, or the one of the 32 raw bytes ``private`` (a site's key file)."""
        self._sk = Ed25519PrivateKey.from_private_bytes(
            token_bytes(32) if private is None else bytes(private))
        self.public = self._sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def private_bytes(self) -> bytes:
        """The 32 raw private-key bytes (secret: an owner-only file of the site's)."""
        return self._sk.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def sign(self, data: bytes) -> bytes:
        return self._sk.sign(data)


def digest(*parts: bytes | np.ndarray) -> bytes:
    """SHA-256 of length-prefixed ``parts`` (what a signature covers of a relayed value)."""
    h = hashlib.sha256()
    for part in parts:
        raw = np.asarray(part).tobytes() if isinstance(part, np.ndarray) else bytes(part)
        h.update(struct.pack("<Q", len(raw)) + raw)
    return h.digest()


@dataclass(frozen=True)
class SiteTrust:
    """What one site holds from the out-of-band setup: its own identity, the roster, the
    run id."""

    cid: int
    identity: Identity = field(repr=False)
    roster: Mapping[int, bytes]
    run_id: bytes

    def authenticator(self, session: int, group: Iterable[int]) -> Authenticator:
        return Authenticator(self, session, sorted(int(c) for c in group))


@dataclass(frozen=True)
class FederationTrust:
    """The simulator's trusted setup: every client's identity, the roster and the run id."""

    identities: Mapping[int, Identity] = field(repr=False)
    run_id: bytes

    @property
    def roster(self) -> dict[int, bytes]:
        return {c: i.public for c, i in self.identities.items()}

    def site(self, cid: int) -> SiteTrust:
        """Client ``cid``'s share: its own private key, the roster (public), the run id."""
        return SiteTrust(cid, self.identities[cid], self.roster, self.run_id)


def site_trust(cid: int, private: bytes, arrays: Mapping[str, np.ndarray],
               where: str = "the shared file") -> SiteTrust:
    """A deployed site's trust: its own key file's ``private`` bytes and the roster and run
    id of the shared file (:func:`~fedlabels.secure.roster.roster_arrays`, every key checked
    as it is read; ``where``: the file, for errors); refused unless the roster holds this
    site's own public key at its own id."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.secure.roster import key_fingerprint, read_roster

    roster, run_id = read_roster(arrays, where)
    identity = Identity(private)
    if roster.get(int(cid)) != identity.public:
        listed = roster.get(int(cid))
        held = "no key" if listed is None else f"key {key_fingerprint(listed)[:16]}"
        raise FedLabelsError(f"site {cid}'s identity key is not the roster's key for client "
                             f"{cid} (the roster has {held}, this site's key is "
                             f"{key_fingerprint(identity.public)[:16]}); refusing: use the "
                             "shared file of the prepare that took this site's key, and ask "
                             "the coordinator why its roster differs.")
    return SiteTrust(int(cid), identity, roster, run_id)


def trusted_setup(cids: Iterable[int]) -> FederationTrust:
    """Fresh identity keys for ``cids`` and a fresh 16-byte run id (the out-of-band step)."""
    return FederationTrust({int(c): Identity() for c in cids}, token_bytes(16))


class Authenticator:
    """Signing and checking relayed values within one XCLP session of one group."""

    def __init__(self, trust: SiteTrust, session: int, group: list[int]) -> None:
        outside = [c for c in group if c not in trust.roster]
        if outside:
            raise SecureProtocolError(f"client {trust.cid}: clients {outside} of the XCLP "
                                      "group the server announced are not in this site's "
                                      "roster; refusing.")
        self.trust, self.session, self.group = trust, int(session), group

    def _statement(self, purpose: str, src: int, dst: int, value_digest: bytes) -> bytes:
        head = struct.pack("<qqq", self.session, int(src), int(dst))
        group = struct.pack(f"<{len(self.group)}q", *self.group)
        return (b"fedlabels-xclp-sig|" + self.trust.run_id + head + purpose.encode() + b"|"
                + hashlib.sha256(group).digest() + value_digest)

    def sign(self, purpose: str, dst: int, value_digest: bytes) -> np.ndarray:
        """This site's signature on a value it publishes (``value_digest``: :func:`digest`)."""
        return to_u8(self.trust.identity.sign(
            self._statement(purpose, self.trust.cid, dst, value_digest)))

    def verify(self, peer: int, purpose: str, dst: int, signature: np.ndarray | None,
               value_digest: bytes) -> None:
        """Raise :class:`SecureProtocolError` naming ``peer`` unless ``signature`` is
        ``peer``'s roster key's signature on the value for this run, purpose and ``dst``."""
        me = self.trust.cid
        key = self.trust.roster.get(int(peer))
        if key is None:
            raise SecureProtocolError(f"client {me}: client {peer} is not in this site's "
                                      f"roster; refusing its {purpose}.")
        if signature is None:
            raise SecureProtocolError(f"client {me}: client {peer}'s {purpose} came without "
                                      "its signature; refusing.")
        from fedlabels.secure.ed25519_point import key_problem

        why = key_problem(bytes(key))  # OpenSSL verifies a forgery under a small-order key
        if why is not None:
            raise SecureProtocolError(f"client {me}: client {peer}'s roster key is {why}; "
                                      f"refusing its {purpose}.")
        try:
            Ed25519PublicKey.from_public_bytes(key).verify(
                np.asarray(signature).tobytes(), self._statement(purpose, peer, dst,
                                                                 value_digest))
        except InvalidSignature:
            raise SecureProtocolError(f"client {me}: client {peer}'s {purpose} does not carry "
                                      "its roster key's signature for this run (forged, "
                                      "replayed or altered); refusing.") from None
