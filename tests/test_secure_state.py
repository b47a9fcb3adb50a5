"""to_state / from_state of the secure parties: every protocol survives a restore at each step.

Each restore goes through the wire codec (``encode_message`` / ``decode_message``), as a
client persisted between Flower messages would. Paillier keys are short (512 bits) for speed.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import numpy as np
import pytest

from fedlabels.comm import Message, decode_message, encode_message
from fedlabels.core.errors import FedLabelsError
from fedlabels.secure import ot_hamming as ot
from fedlabels.secure import paillier_hamming as ph
from fedlabels.secure.keys import KeyPair, open_sealed, seal
from fedlabels.secure.rowsums import decode_fixed, encode_fixed, mask_rows, server_sum, unmask_rows
from fedlabels.secure.seed import SeedAgreement


def _assert_plain(state: dict[str, Any]) -> None:
    for key, value in state.items():
        assert isinstance(key, str)
        assert isinstance(value, np.ndarray) or type(value) in (int, float, str, bool), key
        if isinstance(value, np.ndarray):
            assert value.dtype.kind in "biuf", (key, value.dtype)


def _wire(state: dict[str, Any]) -> dict[str, Any]:
    _assert_plain(state)
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    config = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    decoded = decode_message(encode_message(Message("state", arrays=arrays, config=config)))
    return {**decoded.arrays, **decoded.config}


def _restore(party: Any) -> Any:
    """``party`` persisted as plain values, sent over the wire and rebuilt."""
    return type(party).from_state(_wire(party.to_state()))


def _same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]) if isinstance(a[key], np.ndarray) \
            else a[key] == b[key], key


def _bits(rng: np.random.Generator, n: int, L: int) -> np.ndarray:
    return rng.integers(0, 2, (n, L)).astype(np.uint8)


def _hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a[:, None, :] != b[None, :, :]).sum(axis=2)


# ----------------------------------------------------------------------------- keys, seed


def test_keypair_restores_same_public_and_shared_keys():
    a, b = KeyPair(), KeyPair()
    a2 = _restore(a)
    assert a2.public == a.public
    _same_state(a2.to_state(), a.to_state())
    for purpose in ("channel", "rowsums"):
        k = a.shared_key(3, 5, b.public, purpose)
        assert a2.shared_key(3, 5, b.public, purpose) == k == b.shared_key(5, 3, a.public,
                                                                           purpose)
    key_b = b.shared_key(5, 3, a2.public, "channel")
    blob = seal(a2.shared_key(3, 5, b.public, "channel"), b"payload", b"ctx")
    assert open_sealed(key_b, blob, b"ctx") == b"payload"
    assert a.to_state()["sk"].dtype == np.uint8 and a.to_state()["sk"].size == 32


def test_seed_agreement_with_restores_matches_uninterrupted_and_plain():
    ids = [0, 1, 2]
    keys = {c: KeyPair() for c in ids}
    agree = {c: SeedAgreement(c) for c in ids}
    pubs = {c: keys[c].public for c in ids}
    commits = {c: agree[c].commitment for c in ids}
    # restored after the setup reply (keys and commitments published)
    keys2 = {c: _restore(keys[c]) for c in ids}
    agree2 = {c: _restore(agree[c]) for c in ids}
    assert all(agree2[c].commitment == commits[c] for c in ids)
    sealed = {(c, p): seal(keys2[c].shared_key(c, p, pubs[p], "channel"),
                           agree2[c].contribution, b"seed") for c in ids for p in ids if p != c}
    # restored again after sending the sealed reveals
    keys3 = {c: _restore(keys2[c]) for c in ids}
    agree3 = {c: _restore(agree2[c]) for c in ids}
    seeds = {}
    for c in ids:
        reveals = {p: open_sealed(keys3[c].shared_key(c, p, pubs[p], "channel"),
                                  sealed[(p, c)], b"seed") for p in ids if p != c}
        seeds[c] = agree3[c].derive(reveals, commits)
    uninterrupted = agree[0].derive({p: agree[p].contribution for p in (1, 2)}, commits)
    h = hashlib.sha256(b"fedlabels-xclp-lsh-seed")
    for c in ids:
        h.update(struct.pack("<I", c) + agree[c].contribution)
    assert seeds[0] == seeds[1] == seeds[2] == uninterrupted == h.digest()


# ----------------------------------------------------------------------------- Paillier


@pytest.mark.parametrize(("L", "n_j", "n_k"), [(1, 3, 2), (45, 40, 7)])
def test_paillier_hamming_with_restored_key_holder(L, n_j, n_k):
    rng = np.random.default_rng(L)
    bj, bk = _bits(rng, n_j, L), _bits(rng, n_k, L)
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    # uninterrupted run
    enc0 = ph.holder_encrypt(holder, bj, L)
    res0, masks0 = ph.evaluate(holder.n, int(holder.hs), 512, enc0, n_j, bk, L)
    H0 = ph.server_combine(holder.n, 512, ph.holder_decrypt(holder, res0), masks0, n_j, n_k,
                           L)
    # restored before encrypting and again before decrypting
    h1 = _restore(holder)
    assert (h1.n, int(h1.hs), h1.key_bits) == (holder.n, int(holder.hs), holder.key_bits)
    _same_state(h1.to_state(), holder.to_state())
    enc = ph.holder_encrypt(h1, bj, L)
    res, masks = ph.evaluate(h1.n, int(h1.hs), 512, enc, n_j, bk, L)
    h2 = _restore(h1)
    T = ph.holder_decrypt(h2, res)
    assert np.array_equal(T, ph.holder_decrypt(holder, res))  # same decryptions
    assert np.array_equal(ph.holder_decrypt(h2, res0), ph.holder_decrypt(holder, res0))
    H = ph.server_combine(h2.n, 512, T, masks, n_j, n_k, L)
    assert np.array_equal(H, H0)
    assert np.array_equal(H, _hamming(bj, bk))


def test_paillier_state_is_bytes_and_checked():
    holder = ph.KeyHolder(512, insecure_small_keys=True)
    state = holder.to_state()
    assert {k: v.shape for k, v in state.items() if isinstance(v, np.ndarray)} == {
        "p": (64,), "q": (64,), "hs": (128,)}
    bad = dict(state, q=state["p"])
    with pytest.raises(FedLabelsError, match="KeyHolder state"):
        ph.KeyHolder.from_state(bad)
    with pytest.raises(FedLabelsError, match="expected a KeyHolder state"):
        ph.KeyHolder.from_state(KeyPair().to_state())


# ----------------------------------------------------------------------------- OT (SHADE)


@pytest.mark.parametrize(("L", "n_j", "n_k"), [(1, 2, 3), (45, 6, 5), (200, 20, 20)])
def test_ot_shade_with_restore_at_every_step(L, n_j, n_k):
    # (200, 20, 20): 4,000 batched OTs in one IKNP chunk (tests/test_secure_ot_batch.py
    # restores parties across two chunks)
    rng = np.random.default_rng(L + 1)
    bj, bk = _bits(rng, n_j, L), _bits(rng, n_k, L)
    rcv0, snd0 = ot.ShadeReceiver(bk, n_j, L), ot.ShadeSender(bj, n_k, L)
    rcv, snd = _restore(rcv0), _restore(snd0)  # same secrets, restored before step 1
    A0 = rcv0.step1()
    B0 = snd0.step1(A0)
    U0 = rcv0.step2(B0)
    e0, R0 = snd0.step2(U0)
    T0 = rcv0.step3(e0)

    A = _restore(rcv).step1()
    rcv = _restore(rcv)
    B = snd.step1(A)
    snd = _restore(snd)
    U = rcv.step2(B)
    rcv = _restore(rcv)  # mid-protocol: keys stored, IKNP rows re-expanded
    e, R = snd.step2(U)
    snd = _restore(snd)
    T = _restore(rcv).step3(e)
    for got, want in ((A, A0), (B, B0), (U, U0), (e, e0), (R, R0), (T, T0)):
        assert np.array_equal(got, want)
    H = ot.server_combine(T, R, L)
    assert np.array_equal(H, ot.server_combine(T0, R0, L))
    assert np.array_equal(H, _hamming(bj, bk))
    _same_state(rcv.to_state(), rcv0.to_state())
    _same_state(snd.to_state(), snd0.to_state())


def test_ot_states_hold_bytes_and_are_checked():
    rng = np.random.default_rng(0)
    rcv, snd = ot.ShadeReceiver(_bits(rng, 2, 8), 3, 8), ot.ShadeSender(_bits(rng, 3, 8), 2, 8)
    rs, ss = rcv.to_state(), snd.to_state()
    assert "keys" not in rs and "keys" not in ss
    assert rs["base.a"].dtype == np.uint8 and ss["base.b"].shape == (ot.KAPPA, 40)
    snd.step1(rcv.step1())
    assert snd.to_state()["keys"].shape == (ot.KAPPA, 32)
    with pytest.raises(FedLabelsError, match="expected a ShadeSender state"):
        ot.ShadeSender.from_state(rs)
    with pytest.raises(FedLabelsError, match="choice bits"):
        ot.ShadeSender.from_state(dict(ss, s=np.zeros(16, dtype=np.uint8)))


# ----------------------------------------------------------------------------- RowSums


def test_rowsums_with_restored_keys_match_uninterrupted_and_plain():
    rng = np.random.default_rng(5)
    ids, n, c = [0, 1, 2], 9, 3
    rows = {0: np.arange(0, 3), 1: np.arange(3, 7), 2: np.arange(7, 9)}
    Zbar = {j: rng.normal(size=(n, c)) for j in ids}
    pairs = {j: KeyPair() for j in ids}
    pubs = {j: pairs[j].public for j in ids}

    def run(keypairs: dict[int, KeyPair]) -> tuple[dict[int, np.ndarray], dict]:
        parts, own = {}, {}
        for j in ids:
            keys = {p: keypairs[j].shared_key(j, p, pubs[p], "rowsums") for p in ids if p != j}
            parts[j], own[j] = mask_rows(Zbar[j], rows[j], j, keys, attempt=1)
        total = server_sum(parts, rows, n, c)
        return parts, {j: unmask_rows(total[rows[j]], _wire({"m": own[j]})["m"]) for j in ids}

    parts0, out0 = run(pairs)
    parts, out = run({j: _restore(pairs[j]) for j in ids})
    plain = decode_fixed(sum(encode_fixed(Zbar[j]) for j in ids))
    for j in ids:
        assert np.array_equal(parts[j], parts0[j])
        assert np.array_equal(out[j], out0[j])
        assert np.array_equal(out[j], plain[rows[j]])
        assert np.allclose(out[j], sum(Zbar[p] for p in ids)[rows[j]], atol=1e-8)
