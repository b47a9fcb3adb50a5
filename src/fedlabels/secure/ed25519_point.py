"""Whether 32 bytes are an Ed25519 public key a site may hold in its roster.

``cryptography``'s ``Ed25519PublicKey.from_public_bytes`` takes any 32 bytes, and OpenSSL's
verification (cofactorless) accepts, under a key of small order (order 1, 2, 4 or 8: the
identity encoding ``01 00 .. 00`` is one), the signature R = identity, S = 0 on every
message whose hash is a multiple of the key's order: anyone can sign as such a key. So the
key is decoded here as RFC 8032 §5.1.3 decodes a point, in Python integers, and refused
where it is not canonical (y ≥ p, or x = 0 with the sign bit set), is no point of the curve,
or has small order (8·A is the identity).
"""

from __future__ import annotations

import functools

#: the field's prime 2^255 - 19 and the curve's d = -121665 / 121666
P = 2**255 - 19
D = -121665 * pow(121666, P - 2, P) % P
#: a square root of -1 mod P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """The sum of two points of -x² + y² = 1 + d x² y² (affine; the formula is complete for
    Ed25519: d is not a square, so no denominator is 0)."""
    (x1, y1), (x2, y2) = a, b
    t = D * x1 * x2 * y1 * y2 % P
    x3 = (x1 * y2 + y1 * x2) * pow(1 + t, P - 2, P) % P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P
    return x3, y3


def decode_point(key: bytes) -> tuple[int, int] | str:
    """The point (x, y) that ``key`` encodes (RFC 8032 §5.1.3), or why it encodes none."""
    if len(key) != 32:
        return f"{len(key)} bytes, not 32"
    y = int.from_bytes(key, "little") & ((1 << 255) - 1)
    sign = key[31] >> 7
    if y >= P:
        return "not canonical (y is not below 2^255 - 19)"
    u, v = (y * y - 1) % P, (D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    if v * x * x % P == (P - u) % P:
        x = x * SQRT_M1 % P
    elif v * x * x % P != u:
        return "not a point of the curve"
    if x == 0 and sign:
        return "not canonical (x = 0 with the sign bit set)"
    if x % 2 != sign:
        x = P - x
    return x, y


@functools.lru_cache(maxsize=1024)  # a roster's keys are checked at every verification
def key_problem(key: bytes) -> str | None:
    """Why ``key`` may not be a roster's Ed25519 public key (not 32 bytes, not canonical,
    no point, small order), or None."""
    point = decode_point(bytes(key))
    if isinstance(point, str):
        return point
    for _ in range(3):
        point = _add(point, point)
    if point == (0, 1):
        return "of small order (8·A is the identity), so anyone could sign as it"
    return None


__all__ = ["decode_point", "key_problem"]
