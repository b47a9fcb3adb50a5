"""XCLP across runs that reuse a run id: a server that replays what it relayed in an earlier
run to a site that restarted (same identity key, roster and run id; fresh state, so a
session number it used before is accepted again).

The server holds every message of run 1 (the real payloads, through the message codec) and
replays the signed ones into run 2 under the same session number and group, where they
verify. The tests measure what it gets with them, and, as a control, what it would get if
the site's own per-session secrets were not fresh: the same attack on the same transcript
then gives it every labelled point's label (a peer's old X25519 key) and the Hamming
distances between the holder's old and the evaluator's new points (a holder's old ``enc``).
With the sites as they are (X25519 key, seed contribution and Paillier key drawn from the
OS CSPRNG at every ``xclp.setup``) it gets neither: every value the victim releases is
masked or sealed under a secret drawn in run 2 that no message of run 1 depends on.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedlabels.comm import Message
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.propagation.core import hamming_matrix, one_hot
from fedlabels.secure.identity import trusted_setup
from fedlabels.secure.keys import SecureProtocolError
from fedlabels.secure.rowsums import decode_fixed
from test_xclp_dropout_leak import SpyServer, _columns
from test_xclp_sybil import _clients

VICTIM, PEER = 0, 1


class _Recorder:
    """The server's grid: every message it sent and every reply, by (kind, step, client);
    ``edit(messages)`` changes what it sends, ``stop_after`` ends the run after that step of
    SecureHamming (the server has what it wants)."""

    def __init__(self, inner, edit=None, stop_after: int | None = None):
        self.inner, self.edit, self.stop_after = inner, edit, stop_after
        self.sent: dict[tuple[str, int, int], Message] = {}
        self.got: dict[tuple[str, int, int], Message] = {}

    @property
    def client_ids(self):
        return list(self.inner.client_ids)

    def exchange(self, messages, rnd):
        if self.edit is not None:
            messages = self.edit(dict(messages))
        replies = self.inner.exchange(messages, rnd)
        for c, m in messages.items():
            key = (m.kind, int(m.config.get("step", 0)), c)
            self.sent.setdefault(key, m)
            if c in replies:
                self.got.setdefault(key, replies[c])
        steps = {int(m.config.get("step", 0)) for m in messages.values()}
        if self.stop_after is not None and self.stop_after in steps:
            raise _Enough
        return replies


class _Enough(Exception):
    """The attacking server stops the run: it holds what it came for."""


def _run1(secure: str, fed, sizes=(60, 90)):
    """An honest run 1: the roles, the server's working state and every relayed message."""
    clients, opts = _clients(secure, sizes, {c: fed.site(c) for c in range(2)})
    grid = _Recorder(InProcessGrid(clients, CommMeter()))
    server = SpyServer(opts, 10)
    server.run(grid, 0, list(clients), session=0)
    return clients, opts, server.held, grid


def _to_victim(role, message: Message) -> Message:
    """One message to the restarted victim alone, through the codec (the server's choice)."""
    return InProcessGrid({VICTIM: role}, CommMeter()).exchange({VICTIM: message}, 0)[VICTIM]


def _with(message: Message, arrays=None, **config) -> Message:
    return Message(message.kind, arrays=dict(message.arrays if arrays is None else arrays),
                   config={**message.config, **config}, category=message.category)


def _mask_replay(secure: str, fed, monkeypatch, reuse_key: bool) -> tuple[np.ndarray, ...]:
    """Run 1, then the victim restarts and the server replays, under the same session and
    group, the peer's signed X25519 key and seed commitment of run 1, drops the peer before
    SecureHamming (it cannot seal the peer's seed reveal), sends S_L = 0 and the row sums
    request of run 1. The victim's part of run 2 then holds only its mask; the difference
    from its part of run 1 decoded is Z̄ of run 1 iff the masks are the same, and a
    least-squares solve against the server's S_L gives the labels.

    ``reuse_key``: the control, a victim whose X25519 key of run 2 is that of run 1.
    Returns (labels the server recovers, the victim's true labels, decoded difference,
    the victim's true Z̄ on the peer's rows)."""
    clients, _, held, grid = _run1(secure, fed)
    victim = clients[VICTIM]
    cols, rows = _columns(held), held.rows[PEER]
    A = held.S_L[np.ix_(rows, cols[VICTIM])]
    truth = victim.xclp_partial_labels()[held.labeled_idx[VICTIM]]
    Zbar = A @ one_hot(truth, 10)
    part1 = grid.got[("xclp.rowsums", 0, VICTIM)].arrays["part"]

    if reuse_key:
        import fedlabels.secure.keys as keys

        old = victim.keypair
        monkeypatch.setattr(keys, "KeyPair", lambda *a, **k: old)
    restarted, _ = _clients(secure, (60, 90), {c: fed.site(c) for c in range(2)})
    v2 = restarted[VICTIM]
    sent = {k[0]: m for k, m in grid.sent.items() if k[2] == VICTIM}
    mine = _to_victim(v2, sent["xclp.setup"]).arrays  # session 0 again: a fresh role takes it
    seed = sent["xclp.seed"]  # the peer's key of run 1 beside the victim's own of run 2
    reply = _to_victim(v2, _with(seed, arrays={**seed.arrays, "pub_0": mine["pub"],
                                               "commit_0": mine["commit"],
                                               "sig_0": mine["sig"]}))
    assert "to_1" in reply.arrays  # the victim took the replayed key
    _to_victim(v2, _with(grid.sent[("xclp.hamming", 1, VICTIM)], arrays={},
                         peers=str(VICTIM)))
    S_L = grid.sent[("xclp.influence", 0, VICTIM)].arrays["S_L"]
    _to_victim(v2, _with(grid.sent[("xclp.influence", 0, VICTIM)],
                         arrays={"S_L": np.zeros_like(S_L)}))
    part2 = _to_victim(v2, sent["xclp.rowsums"]).arrays["part"]
    D = decode_fixed(np.asarray(part1, dtype=np.uint64) - np.asarray(part2, dtype=np.uint64))
    recovered = np.linalg.lstsq(A, D, rcond=None)[0].argmax(axis=1)
    return recovered, truth, D, Zbar


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_a_peers_key_replayed_into_a_restarted_run_gives_the_server_no_label(secure,
                                                                            monkeypatch):
    fed = trusted_setup(range(2))
    recovered, truth, D, Zbar = _mask_replay(secure, fed, monkeypatch, reuse_key=False)
    assert len(truth) >= 10
    assert np.mean(recovered == truth) < 0.5  # chance is 1/10; all of them with the control
    assert np.abs(D - Zbar).max() > 1e3  # the difference is a mask, not Z̄
    # control: the same replay against a victim that kept its X25519 key gives every label
    recovered, truth, D, Zbar = _mask_replay(secure, trusted_setup(range(2)), monkeypatch,
                                             reuse_key=True)
    assert np.array_equal(recovered, truth) and np.allclose(D, Zbar, atol=1e-6)


def _enc_replay(fed, monkeypatch, reuse_key: bool):
    """secure=paillier, client 0 the key holder of the pair, client 1 the evaluator. Run 1,
    then both restart; in SecureHamming step 2 of run 2 the server relays to the evaluator
    the holder's signed key and encrypted bits of run 1 (they verify) and the holder's
    answer of step 3 back. Returns (the server's H: holder's points of run 1 × evaluator's
    of run 2, the true Hamming distances between them)."""
    clients, opts, _, grid = _run1("paillier", fed, sizes=(80, 60))
    old = grid.got[("xclp.hamming", 1, 0)].arrays
    assert "encsig_1" in old
    if reuse_key:
        from fedlabels.secure import paillier_hamming as ph

        holder = clients[0].hamming.holder
        monkeypatch.setattr(ph, "KeyHolder", lambda *a, **k: holder)

    def replay(messages):
        m = messages.get(1)
        if m is not None and m.kind == "xclp.hamming" and int(m.config["step"]) == 2:
            messages[1] = _with(m, arrays={**m.arrays, "pk_n_0": old["pk_n"],
                                           "pk_hs_0": old["pk_hs"], "enc_0": old["enc"],
                                           "encsig_0": old["encsig_1"]})
        return messages

    again, _ = _clients("paillier", (80, 60), {c: fed.site(c) for c in range(2)})
    grid2 = _Recorder(InProcessGrid(again, CommMeter()), replay, stop_after=3)
    with pytest.raises(_Enough):
        SpyServer(opts, 10).run(grid2, 0, list(again), session=0)
    from fedlabels.secure import paillier_hamming as ph

    n = int.from_bytes(old["pk_n"].tobytes(), "little")
    R = grid2.got[("xclp.hamming", 2, 1)].arrays["mask_0"]  # the evaluator answered
    T = grid2.got[("xclp.hamming", 3, 0)].arrays["T_1"]
    H = ph.server_combine(n, 512, T, R, clients[0].n_points, again[1].n_points, 64)
    return H, hamming_matrix(clients[0].packed, again[1].packed, 64)


def test_a_holders_enc_replayed_into_a_restarted_run_gives_the_server_no_distance(
        monkeypatch):
    found, truth = _enc_replay(trusted_setup(range(2)), monkeypatch, reuse_key=False)
    assert np.mean(found == truth) < 0.05  # run 2's holder cannot decrypt under run 1's key
    # control: a holder that kept its Paillier key decrypts them, and the server has them
    found, truth = _enc_replay(trusted_setup(range(2)), monkeypatch, reuse_key=True)
    assert np.array_equal(found, truth)


def test_a_peers_sealed_seed_reveal_of_an_earlier_run_is_refused():
    """The server replays the peer's signed key and commitment of run 1 (they verify) and
    relays the seed reveal the peer sealed for the victim in run 1: it was sealed under the
    victim's X25519 key of run 1, so the restarted victim cannot open it and refuses."""
    fed = trusted_setup(range(2))
    _, _, _, grid = _run1("ot", fed)
    restarted, _ = _clients("ot", (60, 90), {c: fed.site(c) for c in range(2)})
    v2 = restarted[VICTIM]
    mine = _to_victim(v2, grid.sent[("xclp.setup", 0, VICTIM)]).arrays
    seed = grid.sent[("xclp.seed", 0, VICTIM)]  # the peer's key of run 1: it verifies
    _to_victim(v2, _with(seed, arrays={**seed.arrays, "pub_0": mine["pub"],
                                       "commit_0": mine["commit"], "sig_0": mine["sig"]}))
    first = grid.sent[("xclp.hamming", 1, VICTIM)]
    assert "from_1" in first.arrays
    with pytest.raises(SecureProtocolError, match="failed authentication"):
        _to_victim(v2, first)
    assert v2.hamming is None and v2.lsh_seed_used is None
