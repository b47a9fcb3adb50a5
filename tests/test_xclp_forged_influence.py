"""XCLP's forged first S_L: a coordinator that colludes with a curious site.

The server computes S_L (the labelled columns of (I − αW)⁻¹) from a graph only it holds, and
sends each client its columns once a session (``xclp.influence``; a second one is refused).
The client cannot check them: they depend on every other site's points. A server that puts a
unit row at the colluding site's row r_k for the victim's k-th labelled point (and zeros
elsewhere) makes the colluder's unmasked rows of Z the victim's labels: SecureRowSums then
delivers, as designed, Ẑ[R_colluder] = S_L[R_colluder] · Y_L to the row owner. privacy.md's
red-team table states it outside the guarantee (against a coordinator colluding with a site);
these tests replay it on what the two parties hold, and show that the pair needs no forgery:
with the honest S_L a least-squares solve on the colluder's rows gives every label too.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

import test_xclp_dropout_leak as leak
from test_xclp_dropout_leak import SpyServer, xclp_run

VICTIM, COLLUDER = 0, 1


class ForgingServer(SpyServer):
    """Replaces the victim's S_L columns by unit rows in the colluder's rows (every other
    client's columns zero there), after the honest solve."""

    def graph_and_solve(self, run):
        super().graph_and_solve(run)
        P = run.members
        starts = np.cumsum([0] + [len(run.labeled_idx[c]) for c in P])
        victim = np.arange(starts[P.index(VICTIM)], starts[P.index(VICTIM) + 1])
        rows = run.rows[COLLUDER]
        assert len(rows) >= len(victim)  # one colluder row per labelled point of the victim
        forged = run.S_L.copy()
        forged[rows, :] = 0.0
        forged[rows[:len(victim)], victim] = 1.0
        run.S_L = forged


def _true_labels(clients, held) -> np.ndarray:
    return clients[VICTIM].xclp_partial_labels()[held.labeled_idx[VICTIM]]


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_a_forged_first_s_l_gives_a_colluding_site_the_victims_labels(monkeypatch, secure):
    """What the pair learns: the colluder's own XCLP labels on its first rows are the
    victim's labels, in the order of the victim's labelled points (which the server knows:
    ``labeled_idx``); every one of them. The victim answers (the forgery is not detected)."""
    monkeypatch.setattr(leak, "SpyServer", ForgingServer)
    X, y = load_digits(return_X_y=True)
    clients, held, out = xclp_run(X / 16.0, y, secure, None)
    assert out.rowsum_members == [0, 1, 2]  # the victim took part: no refusal
    true = _true_labels(clients, held)
    learnt = np.asarray(clients[COLLUDER].xclp_labels)[:len(true)]
    assert len(true) >= 10
    assert np.array_equal(learnt, true), f"{np.mean(learnt == true):.0%} of the labels"


def test_with_the_honest_s_l_the_colluding_pair_solves_every_label():
    """Collusion needs no forgery: the colluder's unmasked rows are Ẑ[R_c] = Σ_j S_L[R_c,
    L_j] · Y_j, its own term it knows, and the server holds S_L. Where the colluder has at
    least as many rows as the others' labelled points, a least-squares solve gives every
    one of their labels (the rows it holds, the class counts it unmasked, nothing more)."""
    from fedlabels.propagation.core import one_hot
    from test_xclp_dropout_leak import _columns

    X, y = load_digits(return_X_y=True)
    clients, held, _ = xclp_run(X / 16.0, y, "ot", None)
    cols, others = _columns(held), [c for c in sorted(held.rows) if c != COLLUDER]
    colluder = clients[COLLUDER]
    Z = np.asarray(colluder.xclp_scores) * np.asarray(colluder.xclp_class_counts, dtype=float)
    R = held.rows[COLLUDER]
    own = one_hot(colluder.xclp_partial_labels()[held.labeled_idx[COLLUDER]], 10)
    A = held.S_L[np.ix_(R, np.concatenate([cols[c] for c in others]))]
    solved = np.linalg.lstsq(A, Z - held.S_L[np.ix_(R, cols[COLLUDER])] @ own,
                             rcond=None)[0].argmax(axis=1)
    true = np.concatenate([clients[c].xclp_partial_labels()[held.labeled_idx[c]]
                           for c in others])
    assert len(R) >= len(true) >= 20
    assert np.array_equal(solved, true), f"{np.mean(solved == true):.0%} of the labels"
