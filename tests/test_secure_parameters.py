"""Issue 12, defect 4: Paillier re-randomisation strength, key sizes, OT with L >= 65,536.

* re-randomisation exponents have |N| + 128 bits (statistically hiding against the key
  holder, who knows the primes); on the old code they had |N|/2 + 128 bits;
* Paillier keys under 2048 bits need the declared ``insecure_small_keys`` switch (the
  512-bit keys below are FUNCTIONAL tests that pass it);
* SHADE with L = 65,536 (17-bit slots) is exact; the old code crashed on a uint16 overflow.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedlabels.core.errors import FedLabelsError
from fedlabels.methods.xclp.options import FedAvgXCLPOptions, XCLPOptions
from fedlabels.propagation.core import hamming_matrix
from fedlabels.secure import ot_hamming as ot
from fedlabels.secure import paillier_hamming as ph
from fedlabels.secure.channels import PeerChannels
from fedlabels.secure.hamming_protocol import HammingParty, server_hamming
from fedlabels.secure.keys import KeyPair, SecureProtocolError


def _bits(rng: np.random.Generator, n: int, L: int) -> np.ndarray:
    return rng.integers(0, 2, (n, L)).astype(np.uint8)


def _plain(a: np.ndarray, b: np.ndarray, L: int) -> np.ndarray:
    return hamming_matrix(np.packbits(a, axis=1), np.packbits(b, axis=1), L)


# ----------------------------------------------------------------------------- Paillier


def test_rerandomisation_uses_full_length_exponents_and_stays_exact(monkeypatch):
    rng = np.random.default_rng(3)
    L, n_j, n_k, key_bits = 40, 30, 6, 512
    bj, bk = _bits(rng, n_j, L), _bits(rng, n_k, L)
    holder = ph.KeyHolder(key_bits, insecure_small_keys=True)
    enc = ph.holder_encrypt(holder, bj, L)
    requested: list[int] = []

    def recording_randbits(k: int) -> int:
        requested.append(k)
        return real_randbits(k)

    real_randbits = ph.randbits
    monkeypatch.setattr(ph, "randbits", recording_randbits)
    res, masks = ph.evaluate(holder.n, int(holder.hs), key_bits, enc, n_j, bk, L)
    monkeypatch.undo()
    n_groups = -(-n_j // ph.slots_per_ciphertext(key_bits, L))
    assert len(requested) == n_k * n_groups  # one re-randomisation per result ciphertext
    assert min(requested) >= holder.n.bit_length() + 128  # old code: |N|/2 + 128
    T = ph.holder_decrypt(holder, res)
    H = ph.server_combine(holder.n, key_bits, T, masks, n_j, n_k, L)
    assert np.array_equal(H, _plain(bj, bk, L))
    assert ph.rerandomisation_bits(2048) == 2176 and ph.encryption_bits(2048) == 1152


def test_window_table_equals_the_direct_power(monkeypatch):
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    n, hs, exp_bits = holder.n, int(holder.hs), ph.rerandomisation_bits(512)
    alpha = (1 << (exp_bits - 1)) | 0x1234_5678_9ABC_DEF0 << 300 | 12345
    monkeypatch.setattr(ph, "randbits", lambda k: alpha % (1 << k))
    for uses in (1, 40, 10_000, None):  # windows of different widths
        fixed = ph.FixedBase(n, hs, exp_bits, uses=uses)
        assert fixed.random_factor() == pow(hs, alpha, n * n), fixed.window


def test_small_keys_need_the_insecure_switch():
    assert XCLPOptions().key_bits == ph.MIN_KEY_BITS == 2048
    for cls, method in ((XCLPOptions, "xclp"), (FedAvgXCLPOptions, "fedavg-xclp")):
        with pytest.raises(FedLabelsError, match="insecure_small_keys=true"):
            cls.from_mapping({"secure": "paillier", "key_bits": 1024}, method)
        opts = cls.from_mapping({"secure": "paillier", "key_bits": 512,
                                 "insecure_small_keys": True}, method)
        assert opts.given() == {"secure": "paillier", "key_bits": 512,
                                "insecure_small_keys": True}  # what the result records
    assert XCLPOptions.from_mapping({"secure": "ot", "key_bits": 512}, "xclp").key_bits == 512
    with pytest.raises(FedLabelsError, match="key_bits >= 2048"):
        ph.KeyHolder(512)
    with pytest.raises(FedLabelsError, match="insecure_small_keys"):
        HammingParty("paillier", 0, np.zeros((2, 1), np.uint8), 8, 1024)


def test_evaluator_refuses_a_modulus_of_another_size():
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    bits = np.zeros((2, 8), dtype=np.uint8)
    enc = ph.holder_encrypt(holder, bits, 8)
    with pytest.raises(FedLabelsError, match="agreed on key_bits=1024"):
        ph.evaluate(holder.n, int(holder.hs), 1024, enc, 2, bits, 8)


# ----------------------------------------------------------------------------- OT, big L


def test_wire_dtype_widens_at_65536_bits():
    assert ot.wire_dtype(65_535) is np.uint16 and ot.modulus_bits(65_535) == 16
    assert ot.wire_dtype(65_536) is np.uint32 and ot.modulus_bits(65_536) == 17


def _run_hamming(mode: str, bits: dict[int, np.ndarray], L: int,
                 deviate=None) -> np.ndarray:
    """SecureHamming among ``bits``' clients in process (the server relays ``send``;
    ``deviate(step, arrays, first)`` may change what it relays)."""
    ids = sorted(bits)
    keys = {c: KeyPair() for c in ids}
    channels = {c: PeerChannels(keys[c], c, 0, {p: keys[p].public for p in ids if p != c})
                for c in ids}
    n_points = {c: len(b) for c, b in bits.items()}
    parties = {c: HammingParty(mode, c, np.packbits(bits[c], axis=1), L, 512,
                               insecure_small_keys=True) for c in ids}
    first = {c: parties[c].step(1, ids, n_points, {}, channels[c]) for c in ids}

    def send(step, arrays):
        if deviate is not None:
            arrays = deviate(step, arrays, first)
        members = sorted(arrays)
        return {c: parties[c].step(step, members, n_points, arrays[c], channels[c])
                for c in members}

    members, H = server_hamming(mode, first, send, 512, L)
    assert members == ids
    return H


@pytest.mark.parametrize(("mode", "L"), [("ot", 65_536), ("ot", 70_001), ("paillier", 33)])
def test_secure_hamming_message_sequence_is_exact(mode, L):
    rng = np.random.default_rng(L)
    bits = {0: _bits(rng, 2, L), 1: _bits(rng, 2, L)}
    H = _run_hamming(mode, bits, L)
    everything = np.concatenate([bits[0], bits[1]])
    assert np.array_equal(H, _plain(everything, everything, L))


def test_paillier_holder_decrypts_only_what_its_evaluator_sealed():
    """A server that relays the holder's own broadcast ciphertexts ``enc`` back as the
    evaluator's ``res`` got them decrypted into T: the holder's bits in the clear. The
    evaluator now seals ``res`` for the holder, who refuses anything else."""
    L = 16
    rng = np.random.default_rng(3)
    bits = {0: _bits(rng, 3, L), 1: _bits(rng, 2, L)}  # client 0 holds the pair's key

    def swap_in_enc(step, arrays, first):
        if step == 3:
            n_cts = len(bits[1]) * 1  # the evaluator's share: one group of 3 points
            arrays = {c: dict(a) for c, a in arrays.items()}
            arrays[0]["res_1"] = np.ascontiguousarray(first[0]["enc"][:n_cts])
        return arrays

    with pytest.raises(SecureProtocolError):
        _run_hamming("paillier", bits, L, deviate=swap_in_enc)


def test_ot_shade_with_65536_bits_is_exact_and_uses_uint32():
    rng = np.random.default_rng(1)
    L, n_j, n_k = 65_536, 2, 2
    bj, bk = _bits(rng, n_j, L), _bits(rng, n_k, L)
    bj[0] = 1
    bk[0] = 0  # distance exactly L = 65,536: needs the 17th bit
    rcv, snd = ot.ShadeReceiver(bk, n_j, L), ot.ShadeSender(bj, n_k, L)
    U = rcv.step2(snd.step1(rcv.step1()))
    e, R = snd.step2(U)
    T = rcv.step3(e)
    assert e.dtype == R.dtype == T.dtype == np.uint32
    H = ot.server_combine(T, R, L)
    assert H[0, 0] == L
    assert np.array_equal(H, _plain(bj, bk, L))
