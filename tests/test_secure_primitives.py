"""Secure building blocks: SecureHamming (Paillier, OT) exactness, SecureRowSums, seed agreement.

Paillier tests here are FUNCTIONAL tests with short (512-bit) keys for speed; real runs use
2048-bit keys (the default ``key_bits``; see docs/xclp.md and benchmarks/xclp_scale.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from fedlabels.core.errors import FedLabelsError
from fedlabels.propagation.core import hamming_matrix
from fedlabels.secure import ot_hamming as ot
from fedlabels.secure import paillier_hamming as ph
from fedlabels.secure.keys import KeyPair, SecureProtocolError, open_sealed, seal
from fedlabels.secure.rowsums import (
    decode_fixed,
    encode_fixed,
    mask_rows,
    server_sum,
    unmask_rows,
)
from fedlabels.secure.seed import SeedAgreement


def _bits(rng, n, L):
    return rng.integers(0, 2, (n, L)).astype(np.uint8)


def _plain(a, b, L):
    return hamming_matrix(np.packbits(a, axis=1), np.packbits(b, axis=1), L)


#: the p-value a chi-square uniformity test must exceed. The values tested are drawn from
#: the OS CSPRNG afresh each run, so their p-value is uniform on [0, 1] and a threshold of
#: 1e-3 failed one run in a thousand per check (seen once in `make test`); a broken mask
#: (zeros, a small range) gives p ~ 0 on these few thousand bytes either way
UNIFORM_P = 1e-6


def _uniform_bytes(arrays) -> float:
    data = np.concatenate([np.ascontiguousarray(a).view(np.uint8).ravel() for a in arrays])
    return chisquare(np.bincount(data, minlength=256)).pvalue


@pytest.mark.parametrize(("L", "n_j", "n_k"), [(1, 3, 2), (45, 40, 7), (64, 9, 11)])
def test_paillier_hamming_is_exact(L, n_j, n_k):
    rng = np.random.default_rng(L)
    bj, bk = _bits(rng, n_j, L), _bits(rng, n_k, L)
    holder = ph.KeyHolder(512, insecure_small_keys=True)  # functional test: short key
    enc = ph.holder_encrypt(holder, bj, L)
    res, masks = ph.evaluate(holder.n, int(holder.hs), 512, enc, n_j, bk, L)
    T = ph.holder_decrypt(holder, res)
    H = ph.server_combine(holder.n, 512, T, masks, n_j, n_k, L)
    assert np.array_equal(H, _plain(bj, bk, L))


def test_paillier_packing_serves_many_points_per_ciphertext():
    assert ph.slots_per_ciphertext(2048, 1024) == 204  # base L + 1; 11-bit slots: 186
    assert 1025 ** 204 <= 2 ** 2047 < 1025 ** 205
    rng = np.random.default_rng(0)
    packed = ph.pack_groups(_bits(rng, 5, 16), 3, 16)
    assert [len(g) for g in packed] == [16, 16]  # one integer per bit position and group


def test_paillier_decrypted_values_look_uniform():
    rng = np.random.default_rng(3)
    L, n_j, n_k = 16, 20, 60
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    enc = ph.holder_encrypt(holder, _bits(rng, n_j, L), L)
    res, masks = ph.evaluate(holder.n, int(holder.hs), 512, enc, n_j, _bits(rng, n_k, L), L)
    T = ph.holder_decrypt(holder, res)
    # what j decrypts (T) and each value the server receives (T, R) is uniform in Z_N; the
    # pair differs by the packed distances only (T - R = packed h), so test them one by one
    assert _uniform_bytes([T[:, :60]]) > UNIFORM_P
    assert _uniform_bytes([masks[:, :60]]) > UNIFORM_P


@pytest.mark.parametrize(("L", "n_j", "n_k"), [(1, 2, 3), (45, 6, 5), (17, 30, 25)])
def test_ot_shade_hamming_is_exact(L, n_j, n_k):
    rng = np.random.default_rng(L + 1)
    bj, bk = _bits(rng, n_j, L), _bits(rng, n_k, L)
    rcv, snd = ot.ShadeReceiver(bk, n_j, L), ot.ShadeSender(bj, n_k, L)
    U = rcv.step2(snd.step1(rcv.step1()))
    e, R = snd.step2(U)
    T = rcv.step3(e)
    assert np.array_equal(ot.server_combine(T, R, L), _plain(bj, bk, L))
    if R.size >= 200:  # R = sum of random pads: uniform in Z_M
        M = 1 << ot.modulus_bits(L)
        assert chisquare(np.bincount(R.ravel(), minlength=M)).pvalue > UNIFORM_P


def test_base_ot_delivers_only_the_chosen_key():
    choices = np.random.default_rng(0).integers(0, 2, ot.KAPPA).astype(np.uint8)
    sender, receiver = ot.BaseOTSender(), ot.BaseOTReceiver(choices)
    B, got = receiver.reply(sender.first())
    pairs = sender.keys(B)
    for c, k, (k0, k1) in zip(choices, got, pairs, strict=True):
        assert k == (k1 if c else k0) and k != (k0 if c else k1)


@pytest.fixture(scope="module")
def honest_base_ot():
    """One honest base-OT run: (sender, the receiver's choices, its replies B)."""
    choices = np.random.default_rng(1).integers(0, 2, ot.KAPPA).astype(np.uint8)
    sender = ot.BaseOTSender()
    B, _ = ot.BaseOTReceiver(choices).reply(sender.first())
    return sender, choices, B


def test_base_ot_refuses_elements_outside_the_prime_order_subgroup(honest_base_ot):
    """A base-OT sender that sends A outside the order-q subgroup (e.g. −A, a non-residue)
    would learn every choice bit from the Legendre symbol of B = g^b or A·g^b — the IKNP
    secret s. Both parties refuse such elements; honest ones pass Euler's criterion."""
    from fedlabels.secure import base_ot

    P = int(base_ot._P)
    q = (P - 1) // 2
    sender, choices, B = honest_base_ot
    honest = [int.from_bytes(B[256 * i:256 * (i + 1)].tobytes(), "big") for i in range(0, 128, 16)]
    assert pow(int(sender.A), q, P) == 1 and all(pow(b, q, P) == 1 for b in honest)
    bad = {"zero": 0, "identity": 1, "order two": P - 1, "non-residue": P - int(sender.A),
           "p itself": P, "above p": (1 << 2048) - 1}
    for name, value in bad.items():
        assert not (1 < value < P and pow(value, q, P) == 1), name  # Euler's criterion
        raw = np.frombuffer(value.to_bytes(256, "big"), dtype=np.uint8)
        with pytest.raises(SecureProtocolError, match="prime-order subgroup"):
            ot.BaseOTReceiver(choices).reply(raw)
        forged = B.copy()
        forged[256 * 7:256 * 8] = raw  # one bad B among the 128
        with pytest.raises(SecureProtocolError, match="prime-order subgroup"):
            sender.keys(forged)


def test_base_ot_refuses_a_wrong_number_of_elements(honest_base_ot):
    sender, choices, B = honest_base_ot
    with pytest.raises(SecureProtocolError, match="expected 128 group elements"):
        sender.keys(B[:-256])
    with pytest.raises(SecureProtocolError, match="expected 1 group elements"):
        ot.BaseOTReceiver(choices).reply(sender.first()[:-1])


@pytest.mark.parametrize("width", [1, 5, 8])
def test_base_ot_fixed_base_powers_equal_powmod(width):
    """The windowed fixed-base table gives gmpy2's powers for every exponent width edge."""
    import secrets

    import gmpy2

    from fedlabels.secure import base_ot

    base = gmpy2.mpz(secrets.randbelow(int(base_ot._P) - 2) + 2)
    table = base_ot._FixedBase(base, width)
    top = (1 << base_ot._EXP_BITS) - 1
    exponents = [0, 1, 2, top, top - 1, 1 << (base_ot._EXP_BITS - 1)]
    exponents += [secrets.randbits(base_ot._EXP_BITS) for _ in range(20)]
    for e in map(gmpy2.mpz, exponents):
        assert table.power(e) == gmpy2.powmod(base, e, base_ot._P)
        assert base_ot._g_power(e) == gmpy2.powmod(base_ot._G, e, base_ot._P)
    with pytest.raises(ValueError):
        table.power(gmpy2.mpz(top + 1))


def test_rowsums_equal_plain_sum_and_each_client_gets_its_rows():
    rng = np.random.default_rng(4)
    n, C, ids = 30, 4, [0, 2, 5]
    keys = {i: KeyPair() for i in ids}
    rows = {0: np.arange(0, 10), 2: np.arange(10, 18), 5: np.arange(18, 30)}
    Zbar = {i: rng.normal(scale=10, size=(n, C)) for i in ids}
    parts, own = {}, {}
    for i in ids:
        pk = {j: keys[i].shared_key(i, j, keys[j].public, "rowsums") for j in ids if j != i}
        parts[i], own[i] = mask_rows(Zbar[i], rows[i], i, pk, attempt=0)
        assert parts[i].shape == (n - len(rows[i]), C)
    total = server_sum(parts, rows, n, C)
    plain = sum(Zbar.values())
    for i in ids:
        np.testing.assert_allclose(unmask_rows(total[rows[i]], own[i]), plain[rows[i]],
                                   atol=1e-8)
    # what the server sees passes a chi-square uniformity test on byte values
    assert _uniform_bytes([*parts.values(), total]) > UNIFORM_P
    # and a restart with another attempt uses fresh masks
    pk = {j: keys[0].shared_key(0, j, keys[j].public, "rowsums") for j in (2, 5)}
    again, _ = mask_rows(Zbar[0], rows[0], 0, pk, attempt=1)
    assert not np.array_equal(again, parts[0])


def test_fixed_point_round_trip():
    Z = np.array([[0.0, -1.5, 1e-6, 123456.789]])
    np.testing.assert_allclose(decode_fixed(encode_fixed(Z)), Z, atol=2 ** -31)


def test_rowsums_refuses_values_whose_sum_would_wrap():
    """Three participants with values of 0.9·2^30 each: every one fits alone, but the row
    sums (2.7·2^30·2^32 > 2^63) wrapped around 2^64 and decoded to -1.4e9 silently. The
    bound now scales with the number of participants; values inside it sum exactly."""
    rows = {c: np.array([c]) for c in range(3)}
    keys = {c: {d: bytes([min(c, d), max(c, d)]) * 16 for d in rows if d != c} for c in rows}

    def run(value: float) -> list[float]:
        Z = np.full((3, 2), value)
        parts, own = {}, {}
        for c in rows:
            parts[c], own[c] = mask_rows(Z, rows[c], c, keys[c], 0,
                                         np.setdiff1d(np.arange(3), rows[c]))
        total = server_sum(parts, rows, 3, 2)
        return [float(unmask_rows(total[rows[c]], own[c])[0, 0]) for c in rows]

    with pytest.raises(FedLabelsError, match="sum of 3"):
        run(0.9 * 2 ** 30)
    inside = 0.99 * 2 ** 30 / 3
    assert run(inside) == [3 * round(inside * 2 ** 32) / 2 ** 32] * 3  # exact, no wrap
    for bad in (np.nan, np.inf):
        with pytest.raises(FedLabelsError, match="not finite"):
            encode_fixed(np.array([[1.0, bad]]))


def test_seed_agreement_and_commitment_check():
    parties = {i: SeedAgreement(i) for i in (0, 1, 3)}
    commits = {i: p.commitment for i, p in parties.items()}
    seeds = {i: p.derive({j: q.contribution for j, q in parties.items() if j != i}, commits)
             for i, p in parties.items()}
    assert len(set(seeds.values())) == 1 and len(seeds[0]) == 32
    forged = {1: b"\0" * 32, 3: parties[3].contribution}
    with pytest.raises(SecureProtocolError, match="commitment"):
        parties[0].derive(forged, commits)


def test_sealed_channel_rejects_tampering():
    a, b = KeyPair(), KeyPair()
    kab, kba = a.shared_key(0, 1, b.public, "channel"), b.shared_key(1, 0, a.public, "channel")
    assert kab == kba
    blob = bytearray(seal(kab, b"hello", b"ctx"))
    assert open_sealed(kba, bytes(blob), b"ctx") == b"hello"
    blob[-1] ^= 1
    with pytest.raises(SecureProtocolError):
        open_sealed(kba, bytes(blob), b"ctx")


def test_channels_refuse_malformed_relays_in_one_line():
    """A truncated sealed message, a missing relay and an invalid or low-order X25519 key
    are a SecureProtocolError (one line), not a ValueError or KeyError traceback."""
    from fedlabels.secure.channels import PeerChannels

    a, b = KeyPair(), KeyPair()
    key = a.shared_key(0, 1, b.public, "channel")
    for cut in (b"", b"short", seal(key, b"hello", b"ctx")[:27]):
        with pytest.raises(SecureProtocolError, match="too short"):
            open_sealed(key, cut, b"ctx")
    for bad in (bytes(32), bytes(31), b"\x01" + bytes(31)):  # low order (0, 1), wrong length
        with pytest.raises(SecureProtocolError, match="not a valid key"):
            a.shared_key(0, 1, bad, "channel")
    ca = PeerChannels(a, 0, 3, {1: b.public})
    cb = PeerChannels(b, 1, 3, {0: a.public})
    assert cb.open({"from_0": ca.seal(1, "seed", b"s")}, 0, "seed") == b"s"
    with pytest.raises(SecureProtocolError, match="no sealed 'seed' message"):
        cb.open({}, 0, "seed")


def test_channels_seal_long_payloads_in_bound_pieces(monkeypatch):
    """Payloads above ChaCha20-Poly1305's 2^31 − 1 bytes (a large pair's Paillier
    ciphertexts) raised OverflowError; they are sealed in pieces (here of 16 bytes) whose
    order, number and completeness the associated data binds."""
    from fedlabels.secure import channels as ch

    assert ch.PIECE < 2 ** 31 - 1
    a, b = KeyPair(), KeyPair()
    ca = ch.PeerChannels(a, 0, 3, {1: b.public})
    cb = ch.PeerChannels(b, 1, 3, {0: a.public})
    monkeypatch.setattr(ch, "PIECE", 16)
    size = 16 + 28
    for payload in (b"", b"x" * 16, bytes(range(50)), bytes(range(64))):
        blob = ca.seal(1, "res", payload)
        assert len(blob) == max(1, -(-len(payload) // 16)) * 28 + len(payload)
        assert cb.open({"from_0": blob}, 0, "res") == payload
    blob = ca.seal(1, "res", bytes(range(50))).tobytes()  # four pieces
    pieces = [blob[i:i + size] for i in range(0, len(blob), size)]
    for forged in (pieces[1] + pieces[0] + b"".join(pieces[2:]),  # reordered
                   b"".join(pieces[:-1]), b"".join(pieces[1:]),  # last or first dropped
                   pieces[0], blob + pieces[-1]):  # one piece alone, a duplicate
        with pytest.raises(SecureProtocolError):
            cb.open({"from_0": np.frombuffer(forged, np.uint8)}, 0, "res")


def test_paillier_batch_decryption_equals_phe():
    """decrypt_many (batched CRT, OpenSSL's or gmpy2's powers) against phe's own encryption
    and decryption."""
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    rng = np.random.default_rng(5)
    values = [0, 1, holder.n - 1, *(int(v) for v in rng.integers(0, 2 ** 62, 20))]
    cts = [holder.public.raw_encrypt(v) for v in values]  # phe's encryption, its randomness
    assert holder.decrypt_many(cts) == values
    assert holder.decrypt_many(cts) == [holder._private.raw_decrypt(c) for c in cts]
    assert [holder.decrypt(c) for c in cts] == values
    assert holder.decrypt_many([]) == []


@pytest.mark.parametrize("L", [1, 3, 45, 63, 1024])
def test_slots_unpack_to_the_base_digits(L):
    """unpack_slots gives the base-(L + 1) digits of every value (oracle: repeated divmod)."""
    base, count = L + 1, ph.slots_per_ciphertext(512, L)
    rng = np.random.default_rng(L)
    digits = rng.integers(0, base, (7, count))
    digits[0], digits[1] = 0, L  # the smallest and the largest packed values
    values = [sum(int(d) * base ** i for i, d in enumerate(row)) for row in digits]
    assert max(values) < 2 ** 511  # below any 512-bit modulus
    assert np.array_equal(ph.unpack_slots(values, count, L), digits)
    for size in (1, count // 2 + 1):  # a partial last group
        assert np.array_equal(ph.unpack_slots([v % base ** size for v in values], size, L),
                              digits[:, :size])


def test_paillier_hamming_is_exact_over_several_groups():
    """Three groups of 66 points (L = 200, 512-bit key), the last one partial."""
    rng = np.random.default_rng(7)
    L, n_j, n_k = 200, 140, 4
    assert ph.slots_per_ciphertext(512, L) == 66
    bj, bk = _bits(rng, n_j, L), _bits(rng, n_k, L)
    bk[0] = 1 - bj[0]  # the largest distance, L, at the edge of a slot
    bk[1] = bj[65]
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    enc = ph.holder_encrypt(holder, bj, L)
    assert len(enc) == 3 * L
    res, masks = ph.evaluate(holder.n, int(holder.hs), 512, enc, n_j, bk, L)
    H = ph.server_combine(holder.n, 512, ph.holder_decrypt(holder, res), masks, n_j, n_k, L)
    assert np.array_equal(H, _plain(bj, bk, L))
    assert H[0, 0] == L and H[65, 1] == 0




def test_unpack_ignores_what_lies_above_the_slots():
    """A value at or above B^count (not a packed distance) unpacks to its lowest ``count``
    digits, without error (oracle: repeated divmod)."""
    L, count = 1024, 5
    value = 2 ** 500 + 12345678901234567
    expected, rest = [], value
    for _ in range(count):
        rest, digit = divmod(rest, L + 1)
        expected.append(digit)
    assert ph.unpack_slots([value], count, L).tolist() == [expected]
