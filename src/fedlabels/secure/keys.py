"""Key agreement, authenticated channels and a stream-cipher PRG (all from ``cryptography``).

* Every client holds one X25519 key pair per run and publishes the public key through the
  server (Algorithm 1, line 1).
* A pair of clients derives pairwise secrets with X25519 + HKDF-SHA256; the HKDF ``info``
  binds the purpose and both client ids, so the channel key, the mask key and anything else
  are independent.
* Client-to-client messages travel through the server sealed with ChaCha20-Poly1305 under
  the pair's channel key: the server relays bytes it can neither read nor alter undetected.
* :func:`prg_uint64` expands a 32-byte key into a uint64 stream with ChaCha20 (the PRG of the
  pairwise masks in SecureRowSums).

Security assumptions: the server is honest-but-curious (the paper's non-hostile server);
clients do not collude with it. The X25519 public keys are authenticated as Bonawitz et al.
(2017) do: a site with an identity key (:mod:`fedlabels.secure.identity`: Ed25519, the
roster of every site's identity public key distributed out of band) signs its key, bound to
the run, and refuses a peer's key without its roster key's signature, so a server that
deviates can neither insert a peer of its own nor run a man-in-the-middle. A site without an
identity key (a role built with no trust) relays its key unsigned: there the server must
relay faithfully.

Stateful parties (:class:`KeyPair`, :class:`~fedlabels.secure.seed.SeedAgreement`, the
SecureHamming parties) have ``to_state()`` / ``from_state()``: flat dicts of numpy arrays
(key material as raw uint8 bytes) and scalars, so a client can be persisted between messages
without pickle. These states hold secrets: keep them on the client.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import token_bytes


class SecureProtocolError(FedLabelsError):
    """A cryptographic check failed (bad commitment, forged message, cancelled masks ...)."""


class KeyPair:
    """A client's X25519 key pair, its private key drawn from :mod:`fedlabels.core.randomness`."""

    def __init__(self) -> None:
        self._set(X25519PrivateKey.from_private_bytes(token_bytes(32)))

    def _set(self, sk: X25519PrivateKey) -> None:
        self._sk = sk
        self.public = sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def to_state(self) -> dict[str, np.ndarray | str]:
        """``{"type": "KeyPair", "sk": the 32 raw private-key bytes as uint8}`` (secret)."""
        raw = self._sk.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return {"type": "KeyPair", "sk": to_u8(raw)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> KeyPair:
        """The key pair of :meth:`to_state` (same public key, same shared keys)."""
        check_state(state, "KeyPair", "sk")
        obj = cls.__new__(cls)
        obj._set(X25519PrivateKey.from_private_bytes(state_bytes(state, "sk", 32)))
        return obj

    def shared_key(self, my_id: int, peer_id: int, peer_public: bytes, purpose: str) -> bytes:
        """A 32-byte key shared with ``peer_id`` for ``purpose`` (same at both ends)."""
        try:  # a key of the wrong length, or of low order (an all-zero shared secret)
            raw = self._sk.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
        except ValueError:
            raise SecureProtocolError(f"client {peer_id}'s X25519 public key is not a valid "
                                      "key (wrong length or low order); refusing.") from None
        lo, hi = sorted((int(my_id), int(peer_id)))
        info = b"fedlabels-xclp|" + purpose.encode() + struct.pack("<II", lo, hi)
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(raw)


def seal(key: bytes, payload: bytes, context: bytes) -> bytes:
    """Encrypt-and-authenticate ``payload`` (random 12-byte nonce prepended)."""
    nonce = token_bytes(12)
    return nonce + ChaCha20Poly1305(key).encrypt(nonce, payload, context)


def open_sealed(key: bytes, blob: bytes, context: bytes) -> bytes:
    """Inverse of :func:`seal`; raises :class:`SecureProtocolError` if tampered with."""
    from cryptography.exceptions import InvalidTag

    if len(blob) < 12 + 16:  # nonce and tag: anything shorter was cut in transit
        raise SecureProtocolError(f"a relayed client message of {len(blob)} bytes is too "
                                  "short to be sealed (truncated in transit).")
    try:
        return ChaCha20Poly1305(key).decrypt(blob[:12], blob[12:], context)
    except InvalidTag:
        raise SecureProtocolError("a relayed client message failed authentication "
                                  "(corrupted or forged in transit).") from None


def prg_bytes(key: bytes, n_bytes: int, stream: int = 0) -> bytes:
    """``n_bytes`` of ChaCha20 keystream for ``key``; ``stream`` selects an independent one."""
    nonce = struct.pack("<QQ", 0, int(stream))  # 64-bit block counter 0, 64-bit stream id
    enc = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
    return enc.update(b"\0" * int(n_bytes))


def prg_uint64(key: bytes, count: int, stream: int = 0) -> np.ndarray:
    """``count`` pseudorandom uint64 values (little-endian) from :func:`prg_bytes`."""
    return np.frombuffer(prg_bytes(key, 8 * int(count), stream), dtype="<u8").copy()


def commit(value: bytes, owner: int, label: bytes = b"seed") -> bytes:
    """A hiding, binding commitment to a high-entropy 32-byte ``value`` (SHA-256)."""
    return hashlib.sha256(b"fedlabels-commit|" + label + struct.pack("<I", owner)
                          + value).digest()


def to_u8(blob: bytes) -> np.ndarray:
    """Bytes as a uint8 array (what :class:`~fedlabels.comm.Message` carries)."""
    return np.frombuffer(blob, dtype=np.uint8).copy()


def check_state(state: Mapping[str, Any], type_name: str, *keys: str) -> None:
    """Raise :class:`FedLabelsError` unless ``state`` is a ``type_name`` state with ``keys``."""
    got = state.get("type")
    if got != type_name:
        raise FedLabelsError(f"expected a {type_name} state, got type {got!r}.")
    missing = [k for k in keys if k not in state]
    if missing:
        raise FedLabelsError(f"{type_name} state lacks the entries {missing}.")


def state_bytes(state: Mapping[str, Any], key: str, n_bytes: int | None = None) -> bytes:
    """The raw bytes of the uint8 array ``state[key]`` (optionally of an exact length)."""
    arr = np.asarray(state[key])
    if arr.dtype != np.uint8 or (n_bytes is not None and arr.size != n_bytes):
        raise FedLabelsError(f"state entry {key!r} must be {n_bytes or 'some'} uint8 bytes, "
                             f"got {arr.dtype} of shape {arr.shape}.")
    return arr.tobytes()


def sub_state(state: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The entries of ``state`` under ``prefix`` (a nested party's state), prefix removed."""
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
