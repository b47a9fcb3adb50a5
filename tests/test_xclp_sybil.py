"""XCLP against a server that presents a participant of its own (a Sybil): outside its
guarantee, and said so.

XCLP's cryptography hides intermediate values from a semi-honest server that relays the
messages faithfully and does not collude with clients (``XCLP_ASSUMPTIONS``). The X25519
keys the server relays are not authenticated, so the victim cannot tell a peer that is a
site from one the server runs itself. This test replays that attack with the protocol's own
code: the victim (client 0) runs XCLP honestly with one peer, client 1, which is the
server's. The server holds S_L (it computes it from the Hamming matrix, by design) and its
peer's rows of Z (that peer's output, by design); the victim's labelled columns of S_L times
its labels are those rows minus the peer's own contribution, so a least-squares solve gives
every labelled point's label of the victim (18 of 18 on digits, both secure modes).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from fedlabels.method.threat import HONEST_BUT_CURIOUS_SERVER
from fedlabels.methods.xclp.threat import XCLP_THREAT
from fedlabels.propagation.core import one_hot
from test_xclp_dropout_leak import _columns, xclp_run

VICTIM, SYBIL = 0, 1


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_a_peer_the_server_runs_gives_it_the_victims_labels(secure):
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
    # ... which XCLP's declared threat model leaves out, in so many words
    assert XCLP_THREAT.adversary == HONEST_BUT_CURIOUS_SERVER and XCLP_THREAT.guarantee == "none"
    assert any("not authenticated" in a for a in XCLP_THREAT.assumptions)
    assert any("does not collude" in a for a in XCLP_THREAT.assumptions)
