"""Secret randomness: keys, masks, nonces and seed shares come from the OS's CSPRNG.

Everything a party must keep unpredictable to the others is drawn here, where it is used,
from :mod:`secrets` — never from the run seed or anything another party knows. (Splits,
initialisation and minibatch order are not secret and stay seeded and reproducible.)

Tests that need bit-identical runs of a randomised protocol install a reproducible source
explicitly with :func:`reproducible`; nothing else does, and :func:`is_reproducible` tells
code that must report it (a result drawn that way protects nothing).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


class _SystemSource:
    """The operating system's CSPRNG (:mod:`secrets`)."""

    reproducible = False

    def token_bytes(self, n: int) -> bytes:
        return secrets.token_bytes(n)


class ReproducibleSource:
    """A deterministic byte stream (SHA-256 in counter mode) — for tests only.

    Its position can be saved and restored (:meth:`getstate`, :meth:`setstate`) so a test can
    replay a party's draws exactly.
    """

    reproducible = True

    def __init__(self, seed: int) -> None:
        self.key = hashlib.sha256(b"fedlabels insecure reproducible %d" % seed).digest()
        self.counter = 0

    def token_bytes(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            out += hashlib.sha256(self.key + self.counter.to_bytes(8, "little")).digest()
            self.counter += 1
        return bytes(out[:n])

    def getstate(self) -> int:
        return self.counter

    def setstate(self, state: int) -> None:
        self.counter = state


_source: _SystemSource | ReproducibleSource = _SystemSource()


def token_bytes(n: int) -> bytes:
    """``n`` secret random bytes."""
    return _source.token_bytes(n)


def randbits(k: int) -> int:
    """A secret uniform integer in [0, 2**k)."""
    if k <= 0:
        return 0
    value = int.from_bytes(token_bytes((k + 7) // 8), "little")
    return value >> (8 * ((k + 7) // 8) - k)


def randbelow(n: int) -> int:
    """A secret uniform integer in [0, n) (rejection sampling, no modulo bias)."""
    if n <= 0:
        raise ValueError("randbelow needs n > 0")
    k = n.bit_length()
    while True:
        value = randbits(k)
        if value < n:
            return value


def numpy_generator() -> np.random.Generator:
    """A numpy Generator seeded with 256 secret bits (for vectorised noise and masks)."""
    return np.random.default_rng(int.from_bytes(token_bytes(32), "little"))


def is_reproducible() -> bool:
    """Whether a reproducible (insecure) source is installed."""
    return _source.reproducible


def current_source() -> _SystemSource | ReproducibleSource:
    return _source


@contextmanager
def out_of_band() -> Iterator[None]:
    """An out-of-band step (a run's trusted setup: identity keys, run id), which a
    deployment makes before the run: under :func:`reproducible` (tests) its draws come from
    a stream of their own, keyed from the test's, and leave the run's stream where it was,
    so the simulator and a deployment prepared beforehand draw the same secrets in the run.
    Outside tests: the OS source, unchanged."""
    global _source
    previous = _source
    if not isinstance(previous, ReproducibleSource):
        yield
        return
    side = ReproducibleSource(0)
    side.key = hashlib.sha256(b"fedlabels out of band|" + previous.key).digest()
    _source = side
    try:
        yield
    finally:
        _source = previous


@contextmanager
def reproducible(seed: int) -> Iterator[ReproducibleSource]:
    """Within the block, secret randomness is a deterministic stream: INSECURE, tests only."""
    global _source
    previous = _source
    _source = ReproducibleSource(seed)
    try:
        yield _source
    finally:
        _source = previous
