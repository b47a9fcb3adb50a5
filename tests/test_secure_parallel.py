"""Paillier SecureHamming's faster paths: threads (same ciphertexts for any thread count,
work really spread), subset tables equal to their definition, and the key holder's CRT
encryption powers equal to the public computation."""

from __future__ import annotations

import threading

import gmpy2
import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import reproducible
from fedlabels.propagation.core import hamming_matrix
from fedlabels.secure import paillier_hamming as ph
from fedlabels.secure import parallel


def _run(L: int, n_j: int, n_k: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    bj = rng.integers(0, 2, (n_j, L)).astype(np.uint8)
    bk = rng.integers(0, 2, (n_k, L)).astype(np.uint8)
    with reproducible(seed):
        holder = ph.KeyHolder(512, insecure_small_keys=True)
        enc = ph.holder_encrypt(holder, bj, L)
        res, masks = ph.evaluate(holder.n, int(holder.hs), 512, enc, n_j, bk, L)
        T = ph.holder_decrypt(holder, res)
    H = ph.server_combine(holder.n, 512, T, masks, n_j, n_k, L)
    plain = hamming_matrix(np.packbits(bj, axis=1), np.packbits(bk, axis=1), L)
    assert np.array_equal(H, plain)
    return enc, res, masks, T


@pytest.mark.parametrize("L, n_j, n_k", [(37, 60, 45), (64, 11, 70)])
def test_any_thread_count_gives_the_same_ciphertexts(monkeypatch, L, n_j, n_k):
    # the secret draws happen before the threads start, in one order: a reproducible
    # source gives the same bytes with 1 and with 3 threads (and the exact H)
    monkeypatch.setenv(parallel.ENV_VAR, "1")
    one = _run(L, n_j, n_k, seed=5)
    monkeypatch.setenv(parallel.ENV_VAR, "3")
    three = _run(L, n_j, n_k, seed=5)
    for a, b in zip(one, three, strict=True):
        assert np.array_equal(a, b)


def test_decryptions_run_on_several_threads(monkeypatch):
    monkeypatch.setenv(parallel.ENV_VAR, "2")
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    cts = ph.int_to_u8([holder.fixed.encrypt(m) for m in range(200)], 128)
    seen: set[str] = set()
    barrier = threading.Barrier(2, timeout=10)  # passes only if two chunks run at once
    real = holder.decrypt_many

    def recording(chunk: list) -> list:
        seen.add(threading.current_thread().name)
        barrier.wait()
        return real(chunk)

    monkeypatch.setattr(holder, "decrypt_many", recording)
    monkeypatch.setattr(ph, "_CHUNK", 100)  # exactly two chunks
    plain = ph.u8_to_int(ph.holder_decrypt(holder, cts))
    assert plain == list(range(200))
    assert len(seen) == 2 and all(name.startswith("fedlabels-crypto") for name in seen)


def test_subset_tables_equal_the_products_they_stand_for():
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    n2 = gmpy2.mpz(holder.n) ** 2
    n_bits = 13  # two chunks, the second with 5 of 8 positions
    C = [holder.fixed.encrypt(7 * i + 1) for i in range(n_bits)]
    enc_ones = (1 + 1234 * gmpy2.mpz(holder.n)) % n2
    tables = ph._subset_tables(C, enc_ones, n_bits, n2, [0, 1])
    for c, table in enumerate(tables):
        assert len(table) == 256
        for x in (0, 1, 0x80, 0xA5, 0xF8, 0xFF):
            want = gmpy2.mpz(1)
            for t in range(8):
                pos = 8 * c + t
                if pos >= n_bits:
                    continue
                bit = (x >> (7 - t)) & 1
                factor = enc_ones * gmpy2.invert(C[pos], n2) if bit else C[pos]
                want = want * factor % n2
            assert table[x] == want, (c, x)


@pytest.mark.parametrize("key_bits", [512, 1024])
def test_holder_encryption_powers_equal_the_public_power(key_bits):
    holder = ph.KeyHolder(key_bits, insecure_small_keys=True)
    n2 = holder.n ** 2
    power = holder.encryption_powers(uses=5)
    bits = ph.encryption_bits(key_bits)
    for alpha in (0, 1, 2 ** bits - 1, (1 << (bits - 1)) | 0xDEADBEEF, 3 ** 200):
        assert power(alpha) == pow(int(holder.hs), alpha, n2) == holder.fixed.power(alpha)


def test_digit_powers_equal_the_direct_power():
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    n, hs, bits = holder.n, int(holder.hs), ph.rerandomisation_bits(512)
    alphas = [0, 1, 2 ** bits - 1, (1 << (bits - 1)) | 0x1234_5678 << 200, 3 ** 300]
    for uses in (1, 40, 10_000):  # windows of different widths, 1 to 10 bits
        fixed = ph.FixedBase(n, hs, bits, uses=uses)
        got = [fixed.power_of_digits(d) for d in fixed.digits(alphas)]
        assert got == [pow(hs, a, n * n) for a in alphas], fixed.window


def test_thread_setting_must_be_a_positive_whole_number(monkeypatch):
    monkeypatch.setenv(parallel.ENV_VAR, "0")
    with pytest.raises(FedLabelsError, match="FEDLABELS_CRYPTO_THREADS must be"):
        parallel.crypto_threads()
    monkeypatch.setenv(parallel.ENV_VAR, "4")
    assert parallel.crypto_threads() == 4
