"""Modular powers with a secret exponent: OpenSSL's constant-time exponentiation.

A Paillier key holder decrypts with the exponents p − 1 and q − 1 modulo p² and q². gmpy2's
``powmod`` (GMP's ``mpz_powm``) takes a time that depends on the exponent's bits;
OpenSSL's ``BN_mod_exp_mont_consttime`` does not, and on x86-64 it is also faster at these
sizes: a decryption under a 2048-bit key (two such powers) took 2.57 ms against 3.44 ms side by
side (``benchmarks/paillier_decryption.py``, docs/xclp.md), where gmpy2's own constant-time
``powmod_sec`` costs 1.6× its ``powmod``.

The library is the ``libcrypto`` this Python already uses (its ``ssl`` and ``hashlib``),
called through :mod:`ctypes`, which releases the GIL during each call (threads run side by
side). Where no shared ``libcrypto`` is loaded (a Python linked to OpenSSL statically, or a
system without ``/proc`` to find it in, such as macOS), :func:`power_list` falls back to
gmpy2's batched ``powmod_base_list``; :func:`backend` says which one runs. The numbers are
the same either way.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import gmpy2

_P = ctypes.c_void_p


class _LibCrypto:
    """The few ``BIGNUM`` functions used, with their C signatures."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        def fn(name: str, restype: Any, *argtypes: Any) -> Any:
            found = getattr(lib, name)  # AttributeError: not in this libcrypto
            found.restype, found.argtypes = restype, list(argtypes)
            return found

        int_ = ctypes.c_int
        self.BN_CTX_new = fn("BN_CTX_new", _P)
        self.BN_CTX_free = fn("BN_CTX_free", None, _P)
        self.BN_new = fn("BN_new", _P)
        self.BN_clear_free = fn("BN_clear_free", None, _P)
        self.BN_bin2bn = fn("BN_bin2bn", _P, ctypes.c_char_p, int_, _P)
        self.BN_bn2binpad = fn("BN_bn2binpad", int_, _P, ctypes.c_char_p, int_)
        self.BN_MONT_CTX_new = fn("BN_MONT_CTX_new", _P)
        self.BN_MONT_CTX_free = fn("BN_MONT_CTX_free", None, _P)
        self.BN_MONT_CTX_set = fn("BN_MONT_CTX_set", int_, _P, _P, _P)
        self.BN_mod_exp_mont_consttime = fn("BN_mod_exp_mont_consttime", int_,
                                            _P, _P, _P, _P, _P, _P)


def _loaded_libcrypto() -> str | None:
    """The path of the ``libcrypto`` shared library this process has loaded (Linux)."""
    try:  # loads the interpreter's OpenSSL, where it is shared
        import _hashlib  # noqa: F401
    except ImportError:  # a Python built without OpenSSL
        return None
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if os.path.basename(path).startswith("libcrypto.so"):
            return path
    return None


@cache
def _libcrypto() -> _LibCrypto | None:
    """The interpreter's own OpenSSL libcrypto where it is a shared library, else ``None``.

    Only the library this process has already loaded: a search of the system's libraries
    could find another build, and on macOS the system's ``libcrypto.dylib`` aborts the
    process that loads it."""
    path = _loaded_libcrypto()
    if path is None:
        return None
    try:
        return _LibCrypto(ctypes.CDLL(path))
    except (OSError, AttributeError):  # not loadable, or too old (no consttime power)
        return None


def backend() -> str:
    """``"openssl"`` where :func:`power_list` uses libcrypto, else ``"gmpy2"``."""
    return "openssl" if _libcrypto() is not None else "gmpy2"


def power_list(bases: Sequence[int], exponent: int, modulus: int) -> list[gmpy2.mpz]:
    """``[b ** exponent % modulus for b in bases]`` for an odd ``modulus`` and
    ``0 <= b < modulus``, in constant time where OpenSSL is available."""
    if modulus < 3 or modulus % 2 == 0 or exponent < 0:
        raise ValueError(f"power_list needs an odd modulus above 2 and an exponent >= 0 "
                         f"(got a modulus of {int(modulus).bit_length()} bits, "
                         f"{'even' if modulus % 2 == 0 else 'odd'}, exponent sign "
                         f"{'-' if exponent < 0 else '+'}).")
    if any(not 0 <= b < modulus for b in bases):
        raise ValueError("power_list needs every base in [0, modulus).")
    lib = _libcrypto()
    if lib is None:
        return list(gmpy2.powmod_base_list(list(bases), exponent, modulus))
    size = (int(modulus).bit_length() + 7) // 8
    ctx, mont = lib.BN_CTX_new(), lib.BN_MONT_CTX_new()
    m = lib.BN_bin2bn(int(modulus).to_bytes(size, "big"), size, None)
    e_size = max(1, (int(exponent).bit_length() + 7) // 8)
    e = lib.BN_bin2bn(int(exponent).to_bytes(e_size, "big"), e_size, None)
    result, base = lib.BN_new(), lib.BN_new()
    out: list[gmpy2.mpz] = []
    try:
        if not all((ctx, mont, m, e, result, base)) or \
                lib.BN_MONT_CTX_set(mont, m, ctx) != 1:
            raise MemoryError("OpenSSL could not allocate its big-number context")
        buf = ctypes.create_string_buffer(size)
        for b in bases:
            if lib.BN_bin2bn(int(b).to_bytes(size, "big"), size, base) is None or \
                    lib.BN_mod_exp_mont_consttime(result, base, e, m, ctx, mont) != 1 or \
                    lib.BN_bn2binpad(result, buf, size) != size:
                raise ArithmeticError("OpenSSL's modular power failed")
            out.append(gmpy2.mpz(int.from_bytes(buf.raw, "big")))
    finally:
        for number in (base, result, e, m):
            lib.BN_clear_free(number)
        lib.BN_MONT_CTX_free(mont)
        lib.BN_CTX_free(ctx)
    return out
