"""Roster keys are decoded as RFC 8032 §5.1.3 decodes a point: ``cryptography``'s
``Ed25519PublicKey.from_public_bytes`` takes any 32 bytes, so the check of a site's public
key never fired, and OpenSSL verifies the signature (R = identity, S = 0) under a key of
small order on every message whose hash its order divides. Oracles: that forgery verified
by OpenSSL itself, Euler's criterion for points off the curve, keys OpenSSL makes, and
RFC 8032's first test vector."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from fedlabels.secure.ed25519_point import P, decode_point, key_problem
from fedlabels.secure.identity import ANY_PEER, Identity, SiteTrust
from fedlabels.secure.keys import SecureProtocolError

#: the encodings of the eight points of order 1, 2, 4 and 8 (libsodium's blocklist)
SMALL_ORDER = [bytes.fromhex(h) for h in (
    "0100000000000000000000000000000000000000000000000000000000000000",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000080",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa")]
IDENTITY = SMALL_ORDER[0]


def _forgeable(key: bytes) -> bool:
    """Whether OpenSSL accepts the signature identity ‖ 0 under ``key`` on one of 64
    messages (a key of order o accepts it where o divides the message's hash)."""
    public = Ed25519PublicKey.from_public_bytes(key)
    for i in range(64):
        try:
            public.verify(IDENTITY + bytes(32), b"message %d" % i)
            return True
        except InvalidSignature:
            continue
    return False


@pytest.mark.parametrize("key", SMALL_ORDER, ids=[k[:4].hex() for k in SMALL_ORDER])
def test_small_order_keys_are_refused_and_openssl_verifies_forgeries_under_them(key):
    assert _forgeable(key)
    assert "small order" in str(key_problem(key))


def test_keys_openssl_makes_and_rfc_8032s_vector_are_accepted():
    rfc = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    for key in (rfc, *(Identity().public for _ in range(20))):
        assert key_problem(key) is None
        assert not _forgeable(key)


def test_non_canonical_encodings_are_refused():
    y_is_p = (P).to_bytes(32, "little")  # y = p (≡ 0) and y = p + 1 (≡ 1, the identity)
    y_is_p_plus_1 = (P + 1).to_bytes(32, "little")
    x0_signed = bytearray(IDENTITY)
    x0_signed[31] |= 0x80  # x = 0 with the sign bit set
    for key in (y_is_p, y_is_p_plus_1, bytes(x0_signed)):
        assert "not canonical" in str(key_problem(key))
    assert "32" in str(key_problem(bytes(31)))


def test_points_off_the_curve_are_refused_as_eulers_criterion_says():
    d = -121665 * pow(121666, P - 2, P) % P
    off = 0
    for y in range(2, 60):
        u, v = (y * y - 1) % P, (d * y * y + 1) % P
        square = pow(u * pow(v, P - 2, P) % P, (P - 1) // 2, P) != P - 1
        why = key_problem(y.to_bytes(32, "little"))
        assert (why == "not a point of the curve") == (not square), y
        if square:  # decoded: x² = u / v indeed
            x, yy = decode_point(y.to_bytes(32, "little"))  # type: ignore[misc]
            assert yy == y and (v * x * x - u) % P == 0 and x % 2 == 0
        off += not square
    assert off > 10


def test_a_site_refuses_a_peers_small_order_roster_key_whose_forgery_openssl_accepts():
    """The server forges peer 1's signature (identity ‖ 0) under the small-order key a
    roster holds for it: OpenSSL verifies it, the site refuses the key."""
    me = Identity()
    trust = SiteTrust(0, me, {0: me.public, 1: IDENTITY}, b"run")
    auth = trust.authenticator(0, [0, 1])
    statement = auth._statement("purpose", 1, ANY_PEER, hashlib.sha256(b"v").digest())
    Ed25519PublicKey.from_public_bytes(IDENTITY).verify(IDENTITY + bytes(32), statement)
    with pytest.raises(SecureProtocolError, match="client 1's roster key is of small order"):
        auth.verify(1, "purpose", ANY_PEER, np.frombuffer(IDENTITY + bytes(32), np.uint8),
                    hashlib.sha256(b"v").digest())
