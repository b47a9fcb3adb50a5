"""Modular powers for decryption (fedlabels.secure.modexp): OpenSSL's constant-time
exponentiation where libcrypto is found, gmpy2's batch otherwise; the numbers are gmpy2's
``powmod`` either way (the oracle)."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any

import gmpy2
import pytest

from fedlabels.secure import modexp


def _cases(bits: int) -> tuple[gmpy2.mpz, list[gmpy2.mpz], list[int]]:
    modulus = gmpy2.mpz(secrets.randbits(bits)) | (1 << (bits - 1)) | 1  # odd, exactly `bits`
    bases = [gmpy2.mpz(0), gmpy2.mpz(1), gmpy2.mpz(2), modulus - 1,
             *(gmpy2.mpz(secrets.randbelow(int(modulus))) for _ in range(20))]
    exponents = [0, 1, 2, int(modulus) - 1, secrets.randbits(bits // 2),
                 secrets.randbits(bits + 64)]  # an exponent longer than the modulus too
    return modulus, bases, exponents


@pytest.mark.parametrize("bits", [64, 521, 1024, 2048, 3001])
@pytest.mark.parametrize("use_openssl", [True, False])
def test_powers_equal_gmpy2_powmod(bits: int, use_openssl: bool,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if not use_openssl:
        monkeypatch.setattr(modexp, "_libcrypto", lambda: None)
        assert modexp.backend() == "gmpy2"
    elif modexp.backend() != "openssl":
        pytest.skip("no shared libcrypto in this Python (the gmpy2 case covers it)")
    modulus, bases, exponents = _cases(bits)
    for e in exponents:
        got = modexp.power_list(bases, e, modulus)
        assert got == [gmpy2.powmod(b, e, modulus) for b in bases]
        assert all(isinstance(g, type(gmpy2.mpz(0))) for g in got)
    assert modexp.power_list([], 5, modulus) == []


def test_the_interpreters_own_libcrypto_is_used_where_it_is_shared() -> None:
    loaded = modexp._loaded_libcrypto()
    if loaded is None:
        pytest.skip("this Python has no shared libcrypto loaded")
    assert modexp.backend() == "openssl"
    assert "libcrypto" in loaded


def test_threads_compute_side_by_side_with_their_own_contexts() -> None:
    """Each call holds its own OpenSSL contexts: four threads at once get their own answers."""
    modulus, bases, _ = _cases(2048)
    exponents = [secrets.randbits(1024) for _ in range(4)]
    got: dict[int, list[Any]] = {}

    def work(i: int) -> Callable[[], None]:
        return lambda: got.__setitem__(i, modexp.power_list(bases, exponents[i], modulus))

    threads = [threading.Thread(target=work(i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, e in enumerate(exponents):
        assert got[i] == [gmpy2.powmod(b, e, modulus) for b in bases]


@pytest.mark.parametrize("use_openssl", [True, False])
def test_an_even_modulus_or_a_base_out_of_range_is_an_error_not_a_wrong_number(
        use_openssl: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not use_openssl:
        monkeypatch.setattr(modexp, "_libcrypto", lambda: None)
    for bases, exponent, modulus, match in (([3], 5, 1 << 64, "odd modulus"),
                                            ([3], 5, 1, "odd modulus"),
                                            ([3], -1, 11, "exponent"),
                                            ([11], 5, 11, r"\[0, modulus\)"),
                                            ([-1], 5, 11, r"\[0, modulus\)")):
        with pytest.raises(ValueError, match=match):
            modexp.power_list(bases, exponent, modulus)
