"""XCLP against a server that deviates: a participant of its own (a Sybil), or values of its
own in place of those it relays. Sites with identity keys and a roster refuse both.

Without identity keys (a site built with no ``trust``: the Flower deployment today) the
X25519 keys the server relays are not authenticated, so the victim cannot tell a peer that
is a site from one the server runs itself. The first two tests replay the attacks with the
protocol's own code on sites without a roster: the victim (client 0) runs XCLP honestly with
one peer, client 1, which is the server's. The server holds S_L (it computes it from the
Hamming matrix, by design) and its peer's rows of Z (that peer's output, by design); the
victim's labelled columns of S_L times its labels are those rows minus the peer's own
contribution, so a least-squares solve gives every labelled point's label of the victim
(18 of 18 on digits, both secure modes). With secure=paillier the server needs neither: the
key holder's encrypted bits travel through it in the clear, and encryptions of its own
chosen vectors under the holder's public key in their place give it every LSH bit of the
evaluator (75 × 64 of 75 × 64).

The other tests give the sites what the simulator's session builder gives them (each its own
Ed25519 identity key, the roster and the run id: :mod:`fedlabels.secure.identity`) and replay
the same attacks, plus a replayed signed key from another run, another client's signature
and tampered relayed values, on what the server actually relays: each ends in the victim's
refusal naming the peer, before the victim uses the value.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from sklearn.datasets import load_digits

from fedlabels.comm import Message
from fedlabels.data import ClientData
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.method.base import MethodContext, Settings
from fedlabels.method.threat import HONEST_BUT_CURIOUS_SERVER
from fedlabels.methods.xclp import XCLP, XCLPOptions, XCLPServerCore
from fedlabels.methods.xclp.threat import XCLP_THREAT
from fedlabels.propagation.core import one_hot
from fedlabels.secure.identity import FederationTrust, Identity, trusted_setup
from fedlabels.secure.keys import SecureProtocolError
from test_xclp_dropout_leak import SpyServer, _columns, xclp_run

VICTIM, SYBIL = 0, 1


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_without_a_roster_a_peer_the_server_runs_gives_it_the_victims_labels(secure):
    X, y = load_digits(return_X_y=True)
    clients, held, out = xclp_run(X / 16.0, y, secure, None, sizes=(60, 90))
    assert out.rowsum_members == [VICTIM, SYBIL]
    cols, rows = _columns(held), held.rows[SYBIL]
    sybil = clients[SYBIL]  # the server's own role: all of it is the server's
    # its rows of Z (class-balanced with the members' counts, which it learns by design)
    Z = sybil.xclp_scores * sybil.xclp_class_counts
    own = held.S_L[np.ix_(rows, cols[SYBIL])] @ one_hot(
        sybil.xclp_partial_labels()[held.labeled_idx[SYBIL]], 10)
    A = held.S_L[np.ix_(rows, cols[VICTIM])]
    recovered = np.linalg.lstsq(A, Z - own, rcond=None)[0].argmax(axis=1)
    true = clients[VICTIM].xclp_partial_labels()[held.labeled_idx[VICTIM]]
    assert len(true) >= 10 and np.array_equal(recovered, true)
    # ... which XCLP's declared threat model leaves out for sites without a roster
    assert XCLP_THREAT.adversary == HONEST_BUT_CURIOUS_SERVER and XCLP_THREAT.guarantee == "none"
    assert any("without identity keys" in a and "not authenticated" in a
               for a in XCLP_THREAT.assumptions)
    assert any("colludes with the server" in a for a in XCLP_THREAT.assumptions)


class _ForgedCiphertexts:
    """The server's grid: in SecureHamming's step 2 it relays to the evaluator, in place of
    the key holder's encrypted bits ``enc_<holder>`` (public, relayed in the clear), its
    own encryptions under the holder's public key of chosen bit vectors: all zeros, then
    each unit vector. The holder then decrypts the evaluator's answer for it as usual."""

    def __init__(self, inner, holder: int, evaluator: int):
        self.inner, self.holder, self.evaluator = inner, holder, evaluator
        self.kept: dict[str, object] = {}

    @property
    def client_ids(self):
        return list(self.inner.client_ids)

    def exchange(self, messages, rnd):
        from fedlabels.secure import paillier_hamming as ph

        step = next((int(m.config["step"]) for m in messages.values()
                     if m.kind == "xclp.hamming"), None)
        j, k = self.holder, self.evaluator
        if step == 2 and k in messages:
            sent = messages[k]
            n = int.from_bytes(sent.arrays[f"pk_n_{j}"].tobytes(), "little")
            hs = int.from_bytes(sent.arrays[f"pk_hs_{j}"].tobytes(), "little")
            n_bits, key_bits = 64, n.bit_length()
            chosen = np.zeros((int(sent.config[f"n_{j}"]), n_bits), dtype=np.uint8)
            chosen[1:n_bits + 1] = np.eye(n_bits, dtype=np.uint8)  # row 1 + l: bit l
            fixed = ph.FixedBase(n, hs, ph.encryption_bits(key_bits))
            plain = [p for group in ph.pack_groups(
                chosen, ph.slots_per_ciphertext(key_bits, n_bits), n_bits) for p in group]
            forged = ph.int_to_u8([fixed.encrypt(m) for m in plain], 2 * key_bits // 8)
            messages = {**messages, k: Message(sent.kind, config=dict(sent.config),
                                               arrays={**sent.arrays, f"enc_{j}": forged},
                                               category=sent.category)}
            self.kept.update(n=n, key_bits=key_bits, n_holder=len(chosen))
        replies = self.inner.exchange(messages, rnd)
        if step == 2 and k in replies:
            self.kept["R"] = replies[k].arrays[f"mask_{j}"]
        if step == 3 and j in replies:
            self.kept["T"] = replies[j].arrays[f"T_{k}"]
        return replies


def _digits(sizes):
    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    bounds = np.cumsum([0, *sizes, 30])
    data = [ClientData(X[a:b], y[a:b]) for a, b in pairwise(bounds[:-1])]
    return data, X[bounds[-2]:bounds[-1]], y[bounds[-2]:bounds[-1]]


def _clients(secure: str, sizes, trust: dict):
    """XCLP clients on digits; client c gets ``trust[c]`` (its site share, or None)."""
    data, X_test, y_test = _digits(sizes)
    opts = XCLPOptions.from_mapping({"secure": secure, "lsh_bits": 64, "knn": 8,
                                     "key_bits": 512, "insecure_small_keys": True,
                                     "labeled_fraction": 0.3}, "xclp")
    settings = Settings(n_classes=10, n_features=64, n_clients=max(trust) + 1, options=opts)
    ctx = MethodContext(settings, seeds=[11 + c for c in range(max(trust) + 1)], server_seed=1)
    clients = {c: XCLP().make_client(c, data[i], None, replace(ctx, trust=trust.get(c)), None,
                                     X_test, y_test)
               for i, c in enumerate(sorted(trust))}
    return clients, opts


def test_without_a_roster_forged_ciphertexts_give_a_server_the_evaluators_lsh_bits():
    """secure=paillier, sites without identity keys, no key substituted and no peer of the
    server's: the server only swaps the ciphertexts it relays in the clear. T − R is then
    the Hamming distance of each of the evaluator's points to the server's chosen vectors,
    so every LSH bit of the evaluator comes out."""
    from fedlabels.propagation.core import unpack_bits
    from fedlabels.secure import paillier_hamming as ph

    clients, opts = _clients("paillier", (80, 60), {0: None, 1: None})
    holder, victim = 0, 1  # the pair's key holder (paillier_holder) and its evaluator
    grid = _ForgedCiphertexts(InProcessGrid(clients, CommMeter()), holder, victim)
    XCLPServerCore(opts, 10).run(grid, 0, list(clients), session=0)
    kept = grid.kept
    H = ph.server_combine(kept["n"], kept["key_bits"], kept["T"], kept["R"],
                          kept["n_holder"], clients[victim].n_points, 64)
    recovered = (H[0][:, None] + 1 - H[1:65].T) // 2  # b_l = (|b| + 1 − H(b, e_l)) / 2
    truth = unpack_bits(clients[victim].packed, 64)
    assert recovered.shape == truth.shape and np.array_equal(recovered, truth)
    assert any("without identity keys" in a for a in XCLP_THREAT.assumptions)


# ----------------------------------------------------------------- sites with a roster


class _Tamper:
    """The server's grid: ``edit(messages)`` changes what it sends before relaying; every
    reply is kept in ``replies`` (by message kind and client)."""

    def __init__(self, inner, edit=None):
        self.inner, self.edit = inner, edit
        self.replies: dict[tuple[str, int], Message] = {}

    @property
    def client_ids(self):
        return list(self.inner.client_ids)

    def exchange(self, messages, rnd):
        if self.edit is not None:
            messages = self.edit(dict(messages)) or messages
        replies = self.inner.exchange(messages, rnd)
        for c, m in replies.items():  # the first reply of each kind (step 1 of hamming)
            self.replies.setdefault((messages[c].kind, c), m)
        return replies


def _edited(message: Message, **arrays) -> Message:
    return Message(message.kind, config=dict(message.config),
                   arrays={**message.arrays, **arrays}, category=message.category)


def _on(kind: str, cid: int, change, step: int | None = None):
    """An ``edit`` that applies ``change(message)`` to the ``kind`` message to ``cid``."""
    def edit(messages):
        m = messages.get(cid)
        if m is not None and m.kind == kind and (step is None
                                                  or int(m.config["step"]) == step):
            messages[cid] = change(m)
        return messages
    return edit


def _run(clients, opts, edit=None, session: int = 0):
    grid = _Tamper(InProcessGrid(clients, CommMeter()), edit)
    out = SpyServer(opts, 10).run(grid, 0, list(clients), session=session)
    return out, grid


def _flip(array) -> np.ndarray:
    a = np.array(array, copy=True)
    a.reshape(-1)[0] ^= 1
    return a


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_sites_with_a_roster_sign_what_they_publish_and_run_as_before(secure):
    fed = trusted_setup(range(2))
    clients, opts = _clients(secure, (60, 90), {c: fed.site(c) for c in range(2)})
    out, grid = _run(clients, opts)
    assert out.rowsum_members == [0, 1]
    assert all(len(grid.replies[("xclp.setup", c)].arrays["sig"]) == 64 for c in range(2))
    if secure == "paillier":  # the holder (client 0) signed its key and bits for client 1
        assert len(grid.replies[("xclp.hamming", 0)].arrays["encsig_1"]) == 64
    for c, role in clients.items():  # the identity key is configuration, never state
        secret = fed.identities[c].private_bytes()
        assert not any(secret in (v.tobytes() if isinstance(v, np.ndarray) else str(v).encode())
                       for v in role.state_dict().values())
    # the same run without identity keys gives the same labels (signatures change nothing)
    from fedlabels.core.randomness import reproducible

    labels = {}
    for name, trust in (("signed", {c: fed.site(c) for c in range(2)}),
                        ("unsigned", {0: None, 1: None})):
        with reproducible(5):
            again, _ = _clients(secure, (60, 90), trust)
            _run(again, opts)
        labels[name] = [again[c].xclp_labels for c in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(*labels.values(), strict=True))


@pytest.mark.parametrize("sybil", ["unsigned", "own-key", "outside-roster"])
@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_a_peer_the_server_runs_is_refused(secure, sybil):
    """The victim's roster holds clients 0 and 1 (both sites); the server runs a peer of its
    own: as client 1 without a signature, as client 1 signing with a key of its own, or as
    a client 5 that the roster does not hold. The victim refuses before it seals anything
    to that peer."""
    fed = trusted_setup(range(2))
    own = FederationTrust({c: Identity() for c in (0, 1, 5)}, fed.run_id)  # the server's
    peer = 5 if sybil == "outside-roster" else 1
    trust = {0: fed.site(0), peer: None if sybil == "unsigned" else own.site(peer)}
    clients, opts = _clients(secure, (60, 90), trust)
    with pytest.raises(SecureProtocolError, match=f"client 0: client(s \\[| ){peer}"):
        _run(clients, opts)
    assert clients[VICTIM].xclp_labels is None and clients[VICTIM].hamming is None


def test_forged_ciphertexts_are_refused_by_the_evaluator():
    """The server swaps the key holder's encrypted bits for its own (as in the attack
    above): the evaluator checks the holder's signature first and refuses."""
    fed = trusted_setup(range(2))
    clients, opts = _clients("paillier", (80, 60), {c: fed.site(c) for c in range(2)})
    grid = _ForgedCiphertexts(InProcessGrid(clients, CommMeter()), 0, 1)
    with pytest.raises(SecureProtocolError, match="client 1: client 0's paillier-enc"):
        XCLPServerCore(opts, 10).run(grid, 0, list(clients), session=0)
    assert "R" not in grid.kept  # no answer under the forged ciphertexts left the evaluator


@pytest.mark.parametrize("where", ["session", "run"])
def test_a_replayed_signed_key_from_another_run_is_refused(where):
    """The server keeps client 1's signed key and commitment from one run and relays them
    in a later one (a later session of the same run, or a run with another run id and the
    same identity keys): bound to the run, the signature does not verify."""
    fed = trusted_setup(range(2))
    clients, opts = _clients("ot", (60, 90), {c: fed.site(c) for c in range(2)})
    _, first = _run(clients, opts)
    old = first.replies[("xclp.setup", 1)].arrays
    replay = _on("xclp.seed", VICTIM, lambda m: _edited(
        m, pub_1=old["pub"], commit_1=old["commit"], sig_1=old["sig"]))
    if where == "run":
        other = FederationTrust(fed.identities, b"another run id!!")
        clients, opts = _clients("ot", (60, 90), {c: other.site(c) for c in range(2)})
    with pytest.raises(SecureProtocolError, match="client 0: client 1's x25519-key does not"):
        _run(clients, opts, replay, session=1 if where == "session" else 0)


def test_the_signature_of_another_client_is_refused():
    """Client 2's signed key relayed as client 1's (or client 2's signature on client 1's
    key): a signature binds its signer's id."""
    fed = trusted_setup(range(3))
    for change in (lambda m: _edited(m, pub_1=m.arrays["pub_2"], commit_1=m.arrays["commit_2"],
                                     sig_1=m.arrays["sig_2"]),
                   lambda m: _edited(m, sig_1=m.arrays["sig_2"])):
        clients, opts = _clients("ot", (50, 50, 50), {c: fed.site(c) for c in range(3)})
        with pytest.raises(SecureProtocolError, match="client 0: client 1's x25519-key"):
            _run(clients, opts, _on("xclp.seed", VICTIM, change))


@pytest.mark.parametrize("entry", ["pub_1", "commit_1", "sig_1", "enc_0", "pk_n_0",
                                   "encsig_0"])
def test_a_tampered_relayed_value_is_refused(entry):
    """One bit of a relayed value changed on its way (the evaluator, client 1, gets the key
    holder's ``enc_0``, ``pk_n_0`` and ``encsig_0``; client 0 gets client 1's key)."""
    fed = trusted_setup(range(2))
    clients, opts = _clients("paillier", (80, 60), {c: fed.site(c) for c in range(2)})
    if entry.endswith("_1"):
        edit, who, peer = _on("xclp.seed", 0, lambda m: _edited(
            m, **{entry: _flip(m.arrays[entry])})), 0, 1
    else:
        edit, who, peer = _on("xclp.hamming", 1, lambda m: _edited(
            m, **{entry: _flip(m.arrays[entry])}), step=2), 1, 0
    with pytest.raises(SecureProtocolError, match=f"client {who}: client {peer}'s"):
        _run(clients, opts, edit)


def test_a_group_changed_after_setup_or_a_session_used_again_is_refused():
    from fedlabels.core.errors import RefusedError

    fed = trusted_setup(range(3))
    clients, opts = _clients("ot", (50, 50, 50), {c: fed.site(c) for c in range(3)})
    # the server told client 0 that the group is {0, 1} at setup and adds client 2 after
    narrow = _on("xclp.setup", 0, lambda m: Message(m.kind, config={
        **m.config, "participants": "0,1"}, arrays=dict(m.arrays), category=m.category))
    with pytest.raises(SecureProtocolError, match=r"client 0: xclp.seed adds clients \[2\]"):
        _run(clients, opts, narrow)
    clients, opts = _clients("ot", (50, 50, 50), {c: fed.site(c) for c in range(3)})
    _run(clients, opts, session=3)
    with pytest.raises(RefusedError, match=r"xclp\.setup for session 3 after session 3"):
        _run(clients, opts, session=3)


def _modulus_as_ciphertext(message: Message) -> Message:
    """The holder's first ciphertext replaced by its modulus N (not invertible mod N²)."""
    enc = np.array(message.arrays["enc_0"], copy=True)
    n = int.from_bytes(np.asarray(message.arrays["pk_n_0"]).tobytes(), "little")
    enc[0] = np.frombuffer(n.to_bytes(enc.shape[1], "little"), dtype=np.uint8)
    return _edited(message, enc_0=enc)


@pytest.mark.parametrize("change, why", [
    (lambda m: _edited(m, pk_n_0=_flip(m.arrays["pk_n_0"])), "modulus is even"),
    (_modulus_as_ciphertext, "not invertible modulo N²")])
def test_without_a_roster_a_tampered_key_or_ciphertext_is_refused_not_a_crash(change, why):
    """Sites without identity keys cannot tell a relayed value was altered, but an altered
    Paillier modulus (even) or a ciphertext sharing a factor with it is refused in one line;
    before, the evaluator died in gmpy2.invert (ZeroDivisionError, 'a fault in fedlabels
    itself')."""
    from fedlabels.core.errors import FedLabelsError

    clients, opts = _clients("paillier", (80, 60), {0: None, 1: None})
    with pytest.raises(FedLabelsError, match=why):
        _run(clients, opts, _on("xclp.hamming", 1, change, step=2))


@pytest.mark.parametrize("trusted", [True, False])
def test_a_second_seed_message_in_a_session_is_refused(trusted):
    """A server sends xclp.seed once a session; a second one (here the honest one sent
    again after the seed reveals) would have the site seal its seed contribution once more,
    to whatever peer keys the message names, and is refused, with or without a roster."""
    from fedlabels.core.errors import RefusedError

    fed = trusted_setup(range(2))
    clients, opts = _clients("ot", (50, 60),
                             {c: fed.site(c) if trusted else None for c in range(2)})
    sent: dict[str, Message] = {}

    def again(messages):
        m = messages.get(0)
        if m is not None and m.kind == "xclp.seed":
            sent["seed"] = m
        elif m is not None and m.kind == "xclp.hamming" and "seed" in sent:
            clients[0].handle(sent.pop("seed"))  # the same seed message, a second time
        return messages

    with pytest.raises(RefusedError, match=r"client 0: a second xclp\.seed in session 0"):
        _run(clients, opts, again)
