"""XCLP's SecureRowSums masks are bound to the view each client was told.

The attack (a deviating server, no dropout at all): tell survivor 0 that the participants
are {0, 2} with client 2 owning rows R_1 ∪ R_2, and tell survivor 2 that client 0 owns
R_0 ∪ R_1. Each checks only its own range, so both send their masked contributions to the
excluded client 1's rows R_1; with masks keyed by the pair alone those cancel there and the
server, which computed S_L, solves for the survivors' labels. With masks keyed by a digest
of (participants, row ranges, attempt) the two views differ and nothing cancels.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from fedlabels.comm import Message
from fedlabels.core.errors import RefusedError
from fedlabels.methods.xclp.client import row_ranges
from fedlabels.secure.rowsums import view_digest
from test_xclp_dropout_leak import SpyServer, attack_accuracy, xclp_run

EXCLUDED = 1


class SplitViewServer(SpyServer):
    """Excludes client 1 from SecureRowSums but gives each survivor a different view in
    which the other survivor owns client 1's rows."""

    def rowsums(self, run):
        from fedlabels.secure.rowsums import server_sum, sum_counts

        survivors = [c for c in run.members if c != EXCLUDED]
        r = {c: (int(run.rows[c][0]), int(run.rows[c][-1]) + 1) for c in run.members}
        views = {0: f"{r[0][0]}:{r[0][1]},{r[1][0]}:{r[2][1]}",   # 2 owns R_1 ∪ R_2
                 2: f"{r[0][0]}:{r[1][1]},{r[2][0]}:{r[2][1]}"}   # 0 owns R_0 ∪ R_1
        replies = run.grid.exchange({c: Message("xclp.rowsums", config={
            **run.config, "attempt": run.attempts, "participants": "0,2",
            "row_ranges": views[c]}) for c in survivors}, 0)
        run.attempts += 1
        # the rows each survivor owns in the view the other one was told
        told = {0: row_ranges(views[2], survivors)[0], 2: row_ranges(views[0], survivors)[2]}
        run.total = server_sum({c: replies[c].arrays["part"] for c in survivors},
                               {c: told[c] for c in survivors}, int(run.offsets[-1]),
                               self.n_classes)
        run.members = survivors
        if self.opts.balance == "class":
            run.counts = sum_counts([replies[c].arrays["counts"] for c in survivors])
        self.held = run


@pytest.mark.parametrize("secure", ["ot", "paillier"])
def test_split_views_do_not_unmask_an_excluded_clients_rows(monkeypatch, secure):
    import test_xclp_dropout_leak as leak

    monkeypatch.setattr(leak, "SpyServer", SplitViewServer)
    X, y = load_digits(return_X_y=True)
    clients, held, _ = xclp_run(X / 16.0, y, secure, None)
    assert held.members == [0, 2]
    accuracy, majority = attack_accuracy(clients, held, EXCLUDED)
    # with masks keyed by the pair alone: 100 % of the survivors' labels; bound to the view:
    # no better than guessing the most common label
    assert accuracy <= majority + 0.05, f"server recovered {accuracy:.0%} of the labels"


def test_view_digest_differs_between_views_and_overlaps_are_refused():
    a = row_ranges("0:60,60:210", [0, 2])
    b = row_ranges("0:150,150:210", [0, 2])
    assert view_digest(a, 0) != view_digest(b, 0) != view_digest(b, 1)
    assert view_digest(a, 0) == view_digest(row_ranges("0:60,60:210", [0, 2]), 0)
    with pytest.raises(RefusedError, match="overlap"):
        row_ranges("0:100,60:210", [0, 2])
    assert np.array_equal(a[2], np.arange(60, 210))


def test_a_client_keeps_its_own_secure_mode():
    """A server that asks an ``ot`` client for ``secure=none`` (plaintext LSH bits and
    unmasked row sums) is refused: the client's options decide."""
    from fedlabels.core.errors import ParameterRefusal
    from fedlabels.data import ClientData
    from fedlabels.method.base import MethodContext, Settings
    from fedlabels.methods.xclp import XCLP, XCLPOptions

    X, y = load_digits(return_X_y=True)
    opts = XCLPOptions.from_mapping({"secure": "ot", "lsh_bits": 64, "knn": 8}, "xclp")
    settings = Settings(n_classes=10, n_features=X.shape[1], n_clients=2, options=opts)
    ctx = MethodContext(settings, seeds=[1, 2], server_seed=0)
    client = XCLP().make_client(0, ClientData(X[:50] / 16.0, y[:50]), None, ctx, None,
                                X[50:60] / 16.0, y[50:60])
    with pytest.raises(ParameterRefusal, match="secure"):
        client.handle(Message("xclp.setup", config={"session": 0, "secure": "none"}))
    reply = client.handle(Message("xclp.setup", config={"session": 0, "secure": "ot"}))
    assert "pub" in reply.arrays  # the honest request is answered, with a key pair
    assert "xclp.seed" in client.handlers


class _MaskReuse:
    """A deviating server's grid: after the victim's honest SecureRowSums part, it sends
    the victim (``forge``) a second xclp.influence with S_L = 0 and then the same
    xclp.rowsums (same participants, rows, attempt). Were both answered, the second part
    would be the mask alone, and part 1 − part 2 the victim's S_L·Y_L in the clear."""

    def __init__(self, inner, forge: bool):
        self.inner, self.forge, self.sent = inner, forge, {}

    @property
    def client_ids(self):
        return list(self.inner.client_ids)

    def exchange(self, messages, rnd):
        replies = self.inner.exchange(messages, rnd)
        kinds = {m.kind for m in messages.values()}
        if "xclp.influence" in kinds:
            self.sent["influence"] = messages[1]
        if "xclp.rowsums" in kinds and "rowsums" not in self.sent:
            self.sent["rowsums"] = messages[1]
            if self.forge:
                honest = self.sent["influence"]
                self.inner.exchange({1: Message(honest.kind, arrays={
                    "S_L": np.zeros_like(honest.arrays["S_L"])}, config=dict(honest.config),
                    category=honest.category)}, rnd)
            self.inner.exchange({1: self.sent["rowsums"]}, rnd)
        return replies


@pytest.mark.parametrize("forge,refusal", [(True, "a second xclp.influence"),
                                           (False, "xclp.rowsums attempt 0 again")])
def test_a_client_masks_once_per_attempt_and_takes_one_influence(forge, refusal):
    """Found by a red-team walk: the masks were keyed by (view, attempt) only and both
    messages could be asked again, so every labelled point's label was recovered (8 of 8)."""
    from fedlabels.api import load_federation
    from test_deviating_server import small_run
    from test_method_contract import CLIENTS, DATASET, SEED, XCLP_SMALL, Case

    fed = load_federation(DATASET, clients=CLIENTS, seed=SEED)
    run = small_run(Case("xclp", {**XCLP_SMALL, "test_points": 20, "secure": "ot"}), fed)
    with pytest.raises(RefusedError, match=refusal):
        run.simulate(wrap_grid=lambda grid: _MaskReuse(grid, forge))
