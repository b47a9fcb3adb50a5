"""PHE-based SecureHamming (Section 3.2) with packed, transposed plaintexts.

For a pair of clients (j, k), j is the *key holder* and k the *evaluator*:

1. j packs its points' bits **transposed**: for bit position l and a group of g points,
   ``P_l = Σ_i b_{i,l} · B^i`` in base ``B = L + 1`` (a slot holds a distance in [0, L]);
   one Paillier ciphertext per bit position then serves the g points with ``B^g ≤ 2^(|N|−1)``
   (204 for L = 1024 and a 2048-bit key; 2^11-wide slots would give 186). j sends
   ``Enc(P_l)`` for all l (once; every evaluator reuses them).
2. For each of its points x, k computes homomorphically
   ``Σ_{l: x_l=0} P_l + Σ_{l: x_l=1} (1 − P_l) + R``, i.e. every slot i holds
   ``h(b_i, x)`` (no carries: h ≤ L < B), plus a mask R uniform in Z_N, and re-randomises
   the ciphertext. ``Enc(1 − P_l)`` is ``Enc(ONES) · Enc(P_l)^{-1}``. Subset products are
   computed with 8-bit lookup tables (every chunk of 8 bit positions has its 256 partial
   products), so a point costs L/8 multiplications instead of L.
3. j decrypts: ``T = packed(h) + R mod N`` is uniform in Z_N, so j learns nothing; it sends T
   to the server, k sends R; the server unpacks ``T − R mod N`` into the n_j Hamming
   distances. The server learns H and nothing else; k sees only ciphertexts under j's key.

Keys come from ``phe`` (python-paillier, with gmpy2); decryption is phe's CRT formula run
on whole batches, its powers with the secret exponents in constant time by OpenSSL where
available (:meth:`KeyHolder.decrypt_many`, :mod:`~fedlabels.secure.modexp`). Encryption and
re-randomisation use the Damgård–Jurik–Nielsen (DJN 2010) variant with a fixed base
``h_s = (−x²)^N mod N²`` published with the key, evaluated with a precomputed fixed-base
window table; ciphertexts are ordinary Paillier ciphertexts (g = N + 1) that ``phe`` decrypts.
The key holder computes its encryptions' h_s^α modulo p² and q²
(:meth:`KeyHolder.encryption_powers`).
Each step's big-integer work runs on threads (:mod:`~fedlabels.secure.parallel`); the secret
draws come first, in a fixed order, so the thread count changes no byte.

* **Encryption** (the key holder hides its bits from the evaluator, who does not know the
  primes) uses DJN's short exponent of |N|/2 + 128 bits: semantic security under decisional
  composite residuosity plus DJN's small-exponent assumption (as in ABY).
* **Re-randomisation** (the evaluator hides its bits from the key holder, who *does* know the
  primes) uses exponents of |N| + 128 bits (:func:`rerandomisation_bits`): α mod ord(h_s) is
  then within statistical distance 2^-128 of uniform, so the re-randomised ciphertext is
  ``(1 + T·N)·U`` with U statistically close to uniform in ⟨h_s⟩ — independent of the
  evaluator's bits given the uniform T, with no computational assumption (the ciphertexts it
  combines are the holder's own, whose randomness lies in ⟨h_s⟩: semi-honest holder). A
  short exponent would leave the evaluator's secrets to discrete logarithms modulo the
  holder's primes. Cost: (|N| + 128)/w instead of (|N|/2 + 128)/w multiplications per
  re-randomisation (w: the window), see docs/xclp.md.

Keys under :data:`MIN_KEY_BITS` are refused unless ``insecure_small_keys`` is given (tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from typing import Any

import gmpy2
import numpy as np
from phe import paillier

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.randomness import randbelow, randbits
from fedlabels.secure.keys import check_state
from fedlabels.secure.modexp import power_list
from fedlabels.secure.parallel import map_chunks

#: the smallest Paillier modulus accepted without ``insecure_small_keys`` (tests only)
MIN_KEY_BITS = 2048
#: the widest fixed-base window: 2^10 table entries per exponent digit (a re-randomisation
#: table for 2048-bit keys then holds 218 · 1024 ciphertext-sized numbers, about 120 MB)
_MAX_WINDOW = 10
#: the window where the number of evaluations is not known
_DEFAULT_WINDOW = 8
#: ciphertexts per task of the thread pool (:func:`~fedlabels.secure.parallel.map_chunks`)
_CHUNK = 32


def slot_base(n_bits: int) -> int:
    """The packing base B = L + 1: a slot holds one Hamming distance in [0, L]."""
    return n_bits + 1


def slots_per_ciphertext(key_bits: int, n_bits: int) -> int:
    """How many points one ciphertext packs: the largest g with ``B^g ≤ 2^(key_bits−1)``,
    so the packed value (at most ``B^g − 1``) stays below N."""
    base, g = slot_base(n_bits), 1
    while base ** (g + 1) <= 1 << (key_bits - 1):
        g += 1
    return g


def int_to_u8(values: list, n_bytes: int) -> np.ndarray:
    """Big non-negative ints to a (count, n_bytes) uint8 array (little-endian)."""
    out = np.zeros((len(values), n_bytes), dtype=np.uint8)
    for i, v in enumerate(values):
        out[i] = np.frombuffer(int(v).to_bytes(n_bytes, "little"), dtype=np.uint8)
    return out


def u8_to_int(arr: np.ndarray) -> list:
    """Inverse of :func:`int_to_u8` (as gmpy2 mpz)."""
    return [gmpy2.mpz(int.from_bytes(row.tobytes(), "little")) for row in np.atleast_2d(arr)]


def encryption_bits(n_bits: int) -> int:
    """DJN short exponent for encryption under one's own key: |N|/2 + 128 bits."""
    return n_bits // 2 + 128


def rerandomisation_bits(n_bits: int) -> int:
    """Re-randomisation exponent: |N| + 128 bits, statistically hiding (module docstring)."""
    return n_bits + 128


def check_key_bits(key_bits: int, insecure_small_keys: bool = False) -> None:
    """Refuse a Paillier modulus under :data:`MIN_KEY_BITS` unless explicitly allowed."""
    if key_bits < 256:
        raise FedLabelsError(f"Paillier keys must have at least 256 bits, got {key_bits}.")
    if key_bits < MIN_KEY_BITS and not insecure_small_keys:
        raise FedLabelsError(
            f"Paillier keys under {MIN_KEY_BITS} bits are insecure (got key_bits={key_bits}): "
            f"use key_bits >= {MIN_KEY_BITS} (the default), or, for tests only, the option "
            "insecure_small_keys=true (--opt insecure_small_keys=true; recorded in the "
            "result's options).")


def _window(exp_bits: int, uses: int | None) -> int:
    """The window w minimising table building plus ``uses`` evaluations (8 if unknown)."""
    if uses is None:
        return _DEFAULT_WINDOW
    return min(range(1, _MAX_WINDOW + 1),
               key=lambda w: -(-exp_bits // w) * (2 ** w - 2 + uses))


class FixedBase:
    """Fast ``h_s^α mod N²`` for random α of ``exp_bits`` bits (windowed fixed-base table).

    ``uses``, the expected number of evaluations, picks the window (8 bits when not given,
    at most 10).
    """

    def __init__(self, n: int, hs: int, exp_bits: int, uses: int | None = None) -> None:
        self.n = gmpy2.mpz(n)
        self.n2 = self.n * self.n
        self.exp_bits = exp_bits
        self.window = _window(exp_bits, uses)
        self.table: list[list] = []
        base = gmpy2.mpz(hs)
        for _ in range(-(-exp_bits // self.window)):
            row = [gmpy2.mpz(1), base]
            for _ in range(2 ** self.window - 2):
                row.append(row[-1] * base % self.n2)
            self.table.append(row)
            base = row[-1] * base % self.n2  # base^(2^w)

    def random_factor(self) -> gmpy2.mpz:
        """``h_s^α`` with α uniform of ``exp_bits`` bits."""
        return self.power(randbits(self.exp_bits))

    def power(self, alpha: int) -> gmpy2.mpz:
        """``h_s^α`` for a given ``0 ≤ α < 2^exp_bits``: one multiplication per nonzero digit."""
        acc = gmpy2.mpz(1)
        mask = 2 ** self.window - 1
        for row in self.table:
            digit = alpha & mask
            if digit:
                acc = acc * row[digit] % self.n2
            alpha >>= self.window
        return acc

    def digits(self, alphas: Sequence[int]) -> list[list[int]]:
        """The base-2^window digits of each exponent, least significant first (numpy, so
        the products in :meth:`power_of_digits` are all that runs per digit)."""
        rows, w = len(self.table), self.window
        raw = np.frombuffer(b"".join(int(a).to_bytes(-(-rows * w // 8), "little")
                                     for a in alphas), dtype=np.uint8)
        bits = np.unpackbits(raw.reshape(len(alphas), -1), axis=1, bitorder="little")
        weights = np.left_shift(1, np.arange(w, dtype=np.int64))
        return (bits[:, :rows * w].reshape(len(alphas), rows, w).astype(np.int64)
                @ weights).tolist()

    def power_of_digits(self, digits: Sequence[int]) -> gmpy2.mpz:
        """``h_s^α`` from α's :meth:`digits` (the same number as :meth:`power`)."""
        acc, n2 = gmpy2.mpz(1), self.n2
        for row, digit in zip(self.table, digits, strict=True):
            if digit:
                acc = acc * row[digit] % n2
        return acc

    def encrypt(self, m: int) -> gmpy2.mpz:
        """Paillier encryption of ``m`` (g = N + 1) with DJN randomness."""
        return (1 + gmpy2.mpz(m) * self.n) % self.n2 * self.random_factor() % self.n2

    def rerandomize(self, c: gmpy2.mpz) -> gmpy2.mpz:
        return c * self.random_factor() % self.n2


def _random_prime(bits: int) -> gmpy2.mpz:
    """A prime of exactly ``bits`` bits, the two top bits set, from secret randomness."""
    while True:
        start = randbits(bits) | (3 << (bits - 2)) | 1
        prime = gmpy2.next_prime(start)
        if prime.bit_length() == bits:
            return prime


def generate_keypair(key_bits: int) -> tuple[Any, Any]:
    """A phe Paillier key pair with |N| = ``key_bits`` from :mod:`fedlabels.core.randomness`."""
    half = key_bits // 2
    while True:
        p, q = _random_prime(half), _random_prime(key_bits - half)
        n = p * q
        if p != q and n.bit_length() == key_bits:
            public = paillier.PaillierPublicKey(int(n))
            return public, paillier.PaillierPrivateKey(public, int(p), int(q))


class KeyHolder:
    """One client's Paillier key (phe) plus the DJN base it publishes."""

    def __init__(self, key_bits: int = MIN_KEY_BITS, *, insecure_small_keys: bool = False
                 ) -> None:
        check_key_bits(key_bits, insecure_small_keys)
        self.public, self._private = generate_keypair(key_bits)
        n = gmpy2.mpz(self.public.n)
        x = gmpy2.mpz(randbelow(int(n) - 2) + 2)
        h = (-(x * x)) % n
        self.hs = gmpy2.powmod(h, n, n * n)
        self.key_bits = key_bits

    def to_state(self) -> dict[str, np.ndarray | int | str]:
        """``type``, ``key_bits``, the secret primes ``p``, ``q`` and the DJN base ``hs``.

        Big ints are little-endian uint8 arrays (|N|/8 bytes per prime, 2·|N|/8 for ``hs``).
        """
        nb = self.key_bits // 8
        return {"type": "KeyHolder", "key_bits": int(self.key_bits),
                "p": int_to_u8([self._private.p], nb)[0],
                "q": int_to_u8([self._private.q], nb)[0],
                "hs": int_to_u8([int(self.hs)], 2 * nb)[0]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> KeyHolder:
        """The key holder of :meth:`to_state`: same key, same ``hs``, same decryptions."""
        check_state(state, "KeyHolder", "key_bits", "p", "q", "hs")
        p, q, hs = (int(u8_to_int(np.asarray(state[k], dtype=np.uint8))[0])
                    for k in ("p", "q", "hs"))
        obj = cls.__new__(cls)
        obj.key_bits = int(state["key_bits"])
        obj.public = paillier.PaillierPublicKey(p * q)
        try:
            obj._private = paillier.PaillierPrivateKey(obj.public, p, q)
        except ValueError as exc:
            raise FedLabelsError(f"KeyHolder state: invalid Paillier key ({exc}).") from None
        obj.hs = gmpy2.mpz(hs)
        return obj

    @cached_property
    def fixed(self) -> FixedBase:
        """Encryption under this key as anyone would compute it (no use of the primes)."""
        return FixedBase(self.n, int(self.hs), encryption_bits(self.key_bits))

    def encryption_powers(self, uses: int) -> Callable[[int], gmpy2.mpz]:
        """``α ↦ h_s^α mod N²`` for encryption exponents, with the primes: modulo p² and q²
        (a third of the cost per multiplication), the exponent reduced modulo p − 1 and
        q − 1 (multiples of the order of h_s there), joined by CRT — the same number as
        :meth:`FixedBase.power`. ``uses`` (how many) sizes the windows."""
        p, q = gmpy2.mpz(self._private.p), gmpy2.mpz(self._private.q)
        p2, q2 = p * p, q * q
        fp = FixedBase(p, self.hs % p2, int(p - 1).bit_length(), uses)
        fq = FixedBase(q, self.hs % q2, int(q - 1).bit_length(), uses)
        join = gmpy2.invert(p2, q2)

        def power(alpha: int) -> gmpy2.mpz:
            xp, xq = fp.power(alpha % (p - 1)), fq.power(alpha % (q - 1))
            return xp + p2 * ((xq - xp) * join % q2)
        return power

    @property
    def n(self) -> int:
        return int(self.public.n)

    def decrypt(self, c: gmpy2.mpz) -> int:
        return int(self.decrypt_many([gmpy2.mpz(c)])[0])

    def decrypt_many(self, cs: Sequence) -> list:
        """Decryptions of ``cs`` (as :meth:`decrypt`, phe's CRT formula): two powers per
        ciphertext, modulo p² and q², with the secret exponents p − 1 and q − 1 in constant
        time (:func:`~fedlabels.secure.modexp.power_list`: OpenSSL, else gmpy2)."""
        key = self._private
        p, q = gmpy2.mpz(key.p), gmpy2.mpz(key.q)
        hp, hq, p_inv = gmpy2.mpz(key.hp), gmpy2.mpz(key.hq), gmpy2.mpz(key.p_inverse)
        p2, q2 = p * p, q * q
        mp = power_list([c % p2 for c in cs], p - 1, p2)
        mq = power_list([c % q2 for c in cs], q - 1, q2)
        out = []
        for a, b in zip(mp, mq, strict=True):
            xp = (a - 1) // p * hp % p
            xq = (b - 1) // q * hq % q
            out.append(xp + (xq - xp) * p_inv % q * p)
        return out


def pack_groups(bits: np.ndarray, group: int, n_bits: int) -> list[list[int]]:
    """Transposed packing: for each group of points, one integer per bit position,
    ``P_l = Σ_i b_{i,l} · B^i`` (B = L + 1)."""
    base = slot_base(n_bits)
    powers = np.array([base ** i for i in range(group)], dtype=object)
    return [[int(v) for v in np.asarray(bits[start:start + group]).T.astype(object)
             @ powers[:min(group, len(bits) - start)]]
            for start in range(0, len(bits), group)]


def unpack_slots(values: list, count: int, n_bits: int) -> np.ndarray:
    """The ``count`` base-B digits (slots) of each packed integer: ``(len(values), count)``.

    The numbers are split in halves by ``divmod`` until a part has at most as many digits
    as fit an int64, whose digits numpy then takes for all values at once.
    """
    base = slot_base(n_bits)
    leaf = max(1, int(62 / math.log2(base)))  # digits per int64 part
    out = np.empty((len(values), count), dtype=np.int64)

    def split(parts: list, first: int, digits: int) -> None:
        if digits <= leaf:  # (digits above ``count`` are dropped, as bits above slots were)
            top = base ** digits
            rest = np.array([int(v % top) for v in parts], dtype=np.int64)
            for d in range(first, first + digits):
                rest, out[:, d] = np.divmod(rest, base)
            return
        low = leaf * -(-(digits // leaf) // 2) if digits >= 2 * leaf else digits // 2
        cut = gmpy2.mpz(base) ** low
        halves = [gmpy2.f_divmod(v, cut) for v in parts]
        split([r for _, r in halves], first, low)
        split([h for h, _ in halves], first + low, digits - low)

    split([gmpy2.mpz(v) for v in values], 0, count)
    return out


def holder_encrypt(holder: KeyHolder, bits: np.ndarray, n_bits: int) -> np.ndarray:
    """Step 1 (key holder): ``Enc(P_l)`` for every group and bit position, as bytes."""
    group = slots_per_ciphertext(holder.key_bits, n_bits)
    plain = [p for packed in pack_groups(bits, group, n_bits) for p in packed]
    alphas = [randbits(encryption_bits(holder.key_bits)) for _ in plain]  # secret draws first
    power = holder.encryption_powers(len(plain))
    n = gmpy2.mpz(holder.n)
    n2 = n * n

    def encrypt(items: Sequence[tuple[int, int]]) -> list:
        return [(1 + gmpy2.mpz(m) * n) % n2 * power(a) % n2 for m, a in items]

    cts = map_chunks(encrypt, list(zip(plain, alphas, strict=True)), _CHUNK)
    return int_to_u8(cts, 2 * holder.key_bits // 8)


def _subset_tables(C: list, enc_ones: gmpy2.mpz, n_bits: int, n2: gmpy2.mpz,
                   chunks: Sequence[int]) -> list[list]:
    """For each chunk c of 8 bit positions, the 256 products selected by a byte x (MSB
    first: bit t is position l = 8c + t): ``Π_{x_l=0} C_l · Π_{x_l=1} Enc(ONES) / C_l``.

    Entry x is entry ``x`` without its lowest set bit times that position's ratio
    ``Enc(ONES) · C_l^{-2}``: 255 multiplications per chunk (the base, all zeros, has 7).
    """
    tables = []
    for c in chunks:
        positions = range(8 * c, min(8 * c + 8, n_bits))
        base, ratios = gmpy2.mpz(1), []
        for pos in positions:
            base = base * C[pos] % n2
            inv = gmpy2.invert(C[pos], n2)
            ratios.append(enc_ones * inv % n2 * inv % n2)
        table = [base]
        for x in range(1, 256):
            low = x & -x
            t = 8 - low.bit_length()  # low = 2^(7 − t)
            prev = table[x ^ low]
            table.append(prev * ratios[t] % n2 if t < len(ratios) else prev)
        tables.append(table)
    return tables


def evaluate(n: int, hs: int, key_bits: int, enc_bits: np.ndarray, n_holder_points: int,
             my_bits: np.ndarray, n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 2 (evaluator): masked, re-randomised packed distances and the masks.

    The holder's modulus must have the agreed ``key_bits``; re-randomisation exponents have
    |N| + 128 bits. Returns ``(ciphertexts (n_mine · groups, 2·|N|/8) uint8, masks
    (n_mine · groups, |N|/8) uint8)``, ordered point-major.
    """
    if int(n).bit_length() != key_bits:
        raise FedLabelsError(f"SecureHamming: the key holder's Paillier modulus has "
                             f"{int(n).bit_length()} bits, the run agreed on "
                             f"key_bits={key_bits}.")
    if int(n) % 2 == 0:  # a product of two large primes is odd: the relayed key was altered
        raise FedLabelsError("SecureHamming: the key holder's Paillier modulus is even, so "
                             "not a product of two primes: the key relayed to this client was "
                             "altered; refusing.")
    group = slots_per_ciphertext(key_bits, n_bits)
    n_groups = -(-n_holder_points // group)
    fixed = FixedBase(n, hs, rerandomisation_bits(key_bits), uses=len(my_bits) * n_groups)
    N, N2 = fixed.n, fixed.n2
    cts = u8_to_int(enc_bits)
    if len(cts) != n_groups * n_bits:
        raise FedLabelsError(f"SecureHamming: expected {n_groups * n_bits} ciphertexts, got "
                             f"{len(cts)}.")
    rows = np.packbits(my_bits, axis=1).tolist()  # byte c, bit t (MSB first): l = 8c + t
    n_chunks = len(rows[0]) if rows else 0
    # the secret draws first, in a fixed order (per group, per point: mask, exponent)
    draws = [[(randbelow(int(N)), randbits(fixed.exp_bits)) for _ in rows]
             for _ in range(n_groups)]
    results: list[list] = []
    for g in range(n_groups):
        size = min(group, n_holder_points - g * group)
        ones = sum(slot_base(n_bits) ** i for i in range(size))
        enc_ones = (1 + gmpy2.mpz(ones) * N) % N2
        C = cts[g * n_bits:(g + 1) * n_bits]
        try:
            tables = map_chunks(partial(_subset_tables, C, enc_ones, n_bits, N2),
                                range(n_chunks), 4)
        except ZeroDivisionError:  # gmpy2.invert: a ciphertext shares a factor with N
            raise FedLabelsError("SecureHamming: a ciphertext of the key holder is not "
                                 "invertible modulo N²: its relayed key or ciphertexts were "
                                 "altered; refusing.") from None

        def points(items: Sequence[tuple[list[int], tuple[int, int]]],
                   tables: list[list] = tables) -> list:
            out = []
            digits = fixed.digits([alpha for _, (_, alpha) in items])
            for (row, (r, _)), alpha_digits in zip(items, digits, strict=True):
                acc = tables[0][row[0]]
                for c in range(1, n_chunks):
                    acc = acc * tables[c][row[c]] % N2
                acc = acc * ((1 + r * N) % N2) % N2
                # one re-randomisation each
                out.append(acc * fixed.power_of_digits(alpha_digits) % N2)
            return out

        results.append(map_chunks(points, list(zip(rows, draws[g], strict=True)), _CHUNK))
    flat = [results[g][q] for q in range(len(rows)) for g in range(n_groups)]
    mask_vals = [draws[g][q][0] for q in range(len(rows)) for g in range(n_groups)]
    return int_to_u8(flat, 2 * key_bits // 8), int_to_u8(mask_vals, key_bits // 8)


def holder_decrypt(holder: KeyHolder, results: np.ndarray) -> np.ndarray:
    """Step 3 (key holder): decrypt the evaluator's ciphertexts; T is uniform in Z_N."""
    plain = map_chunks(holder.decrypt_many, u8_to_int(results), _CHUNK)
    return int_to_u8(plain, holder.key_bits // 8)


def server_combine(n: int, key_bits: int, T: np.ndarray, R: np.ndarray,
                   n_holder_points: int, n_eval_points: int, n_bits: int) -> np.ndarray:
    """Server: ``H[holder points, evaluator points] = unpack(T − R mod N)``."""
    group = slots_per_ciphertext(key_bits, n_bits)
    n_groups = -(-n_holder_points // group)
    Ts, Rs = u8_to_int(T), u8_to_int(R)
    H = np.empty((n_holder_points, n_eval_points), dtype=np.int32)
    for g in range(n_groups):  # ciphertext q · n_groups + g: evaluator point q, group g
        size = min(group, n_holder_points - g * group)
        packed = [(Ts[i] - Rs[i]) % n for i in range(g, len(Ts), n_groups)]
        H[g * group:g * group + size, :] = unpack_slots(packed, size, n_bits).T
    return H
