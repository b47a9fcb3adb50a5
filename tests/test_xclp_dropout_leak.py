"""Issue 12, defect 3: an XCLP dropout must not let the server unmask a row sum.

The attack: client 1 drops out after the graph is built (``before-rowsums``: it never
acknowledges S_L; ``within-rowsums``: its masked part never arrives). If the survivors still
send their (masked) contributions to the departed client's rows R_1, nobody withholds those
rows, the survivors' masks cancel, and the server's sum over R_1 is
``Z[R_1] = S_L[R_1, survivors' labelled columns] · Y_L`` in the clear. The server computed
S_L itself, so a least-squares solve gives the survivors' labels Y_L.

The tests take exactly what the server holds (its working state after SecureRowSums: the graph
members' rows, S_L, the labelled indices, the combined sums), run that solve, and also check
every sum the server's combine step returns: no row may equal the plain sum of the
participants' contributions to it (every summed row must still be masked).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from sklearn.datasets import load_digits

import fedlabels.secure.rowsums as rowsums_module
from dropping_grid import DroppingGrid, xclp_drop
from fedlabels.data import ClientData
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.method.base import MethodContext, Settings
from fedlabels.methods.xclp import XCLP, XCLPOptions, XCLPServerCore
from fedlabels.propagation.core import one_hot
from fedlabels.secure.rowsums import decode_fixed

DEPARTED = 1


class SpyServer(XCLPServerCore):
    """An honest-but-curious server: keeps its whole working state after SecureRowSums."""

    held = None

    def rowsums(self, run):
        super().rowsums(run)
        self.held = run


def _digits_run(secure: str, phase: str | None, lost=(DEPARTED,)):
    """Three clients with disjoint digits; ``lost`` lost at ``phase`` (None: no dropout)."""
    X, y = load_digits(return_X_y=True)
    return xclp_run(X / 16.0, y, secure, phase, lost=lost)


def xclp_run(X, y, secure: str, phase: str | None, sizes=(60, 90, 60), seed: int = 0,
             lost=(DEPARTED,)):
    """XCLP over disjoint random subsets of (X, y), clients ``lost`` at ``phase``.

    Returns (clients, what the server holds after SecureRowSums, outcome)."""
    order = np.random.default_rng(seed).permutation(len(y))[:sum(sizes) + 30]
    X, y = np.asarray(X[order], dtype=np.float64), np.asarray(y[order])
    bounds = np.cumsum([0, *sizes])
    data = [ClientData(X[a:b], y[a:b]) for a, b in pairwise(bounds)]
    X_test, y_test = X[bounds[-1]:bounds[-1] + 30], y[bounds[-1]:bounds[-1] + 30]
    opts = XCLPOptions.from_mapping({"secure": secure, "lsh_bits": 64, "knn": 8,
                                     "key_bits": 512, "insecure_small_keys": True,
                                     "labeled_fraction": 0.3, "alpha": 0.9}, "xclp")
    settings = Settings(n_classes=10, n_features=X.shape[1], n_clients=len(sizes),
                        options=opts)
    ctx = MethodContext(settings, seeds=[seed + 11 + c for c in range(len(sizes))],
                        server_seed=1)
    method = XCLP()
    clients = {c: method.make_client(c, data[c], None, ctx, None, X_test, y_test)
               for c in range(len(sizes))}
    grid = InProcessGrid(clients, CommMeter())
    if phase is not None:
        grid = DroppingGrid(grid, [xclp_drop(c, phase) for c in lost])
    server = SpyServer(opts, 10)
    out = server.run(grid, 0, list(clients), session=0)
    return clients, server.held, out


def _columns(held) -> dict[int, np.ndarray]:
    """Each graph member's columns of S_L (the server sent client j exactly its own)."""
    graph = sorted(held.rows)
    starts = np.cumsum([0] + [len(held.labeled_idx[c]) for c in graph])
    return {c: np.arange(starts[i], starts[i + 1]) for i, c in enumerate(graph)}


def least_squares_attack(held, departed: int) -> dict[int, np.ndarray]:
    """The server's attack: solve ``S_L[R_d, survivors' columns] · Y = Σ[R_d]`` for Y."""
    cols = _columns(held)
    survivors = list(held.members)
    A = held.S_L[np.ix_(held.rows[departed], np.concatenate([cols[c] for c in survivors]))]
    B = decode_fixed(held.total[held.rows[departed]])
    Y = np.linalg.lstsq(A, B, rcond=None)[0].argmax(axis=1)
    starts = np.cumsum([0] + [len(cols[c]) for c in survivors])
    return {c: Y[starts[i]:starts[i + 1]] for i, c in enumerate(survivors)}


def attack_accuracy(clients, held, departed: int = DEPARTED) -> tuple[float, float]:
    """(recovered fraction of the survivors' labels, the best guess without data)."""
    recovered = least_squares_attack(held, departed)
    true = np.concatenate([clients[c].xclp_partial_labels()[held.labeled_idx[c]]
                           for c in recovered])
    guess = np.concatenate(list(recovered.values()))
    return float(np.mean(guess == true)), float(np.bincount(true).max() / len(true))


@pytest.mark.parametrize("phase", ["before-rowsums", "within-rowsums"])
@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_dropout_does_not_reveal_survivors_labels(secure, phase):
    clients, held, out = _digits_run(secure, phase)
    assert out.dropped == {DEPARTED: phase} and out.rowsum_members == [0, 2]
    accuracy, majority = attack_accuracy(clients, held)
    # today's code: 100 % of the survivors' labels; with the fix, no better than guessing
    assert accuracy <= majority, f"server recovered {accuracy:.0%} of the survivors' labels"


@pytest.mark.parametrize(("phase", "lost"), [
    (None, ()), ("before-rowsums", (1,)), ("within-rowsums", (1,)),
    ("before-rowsums", (1, 2)),  # one survivor: it has no peer to mask with
])
def test_server_never_unmasks_a_row_sum(monkeypatch, phase, lost):
    """Instrument the combine step: no row it returns is the plain sum of the parts."""
    calls = []
    real = rowsums_module.server_sum

    def spy(parts, rows, *args):
        total = real(parts, rows, *args)
        calls.append((sorted(parts), {c: np.array(r) for c, r in rows.items()}, total.copy()))
        return total

    monkeypatch.setattr(rowsums_module, "server_sum", spy)
    clients, held, out = _digits_run("ot", phase, lost)
    assert len(calls) == 1 and out.rowsum_members == [c for c in range(3) if c not in lost]
    participants, rows, total = calls[0]
    assert participants == out.rowsum_members == sorted(rows)
    cols = _columns(held)
    plain = sum(held.S_L[:, cols[c]] @ one_hot(
        clients[c].xclp_partial_labels()[held.labeled_idx[c]], 10) for c in participants)
    withheld = np.zeros(len(total), dtype=bool)
    withheld[np.concatenate(list(rows.values()))] = True
    unmasked = np.all(np.abs(decode_fixed(total) - plain) < 1e-6, axis=1) & (
        np.abs(plain).sum(axis=1) > 1e-9)
    assert not unmasked.any(), f"{unmasked.sum()} row sums unmasked, e.g. row " \
        f"{np.flatnonzero(unmasked)[0]} (withheld by a participant: " \
        f"{withheld[np.flatnonzero(unmasked)[0]]})"
    # rows no participant withholds (the departed client's) are never summed at all
    assert not total[~withheld].any()
