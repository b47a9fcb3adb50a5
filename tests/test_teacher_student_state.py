"""PATE, DP-PATE and FREDY clients rebuilt and restored from their state before every message.

A deployment handles each message with a role built afresh and restored from its
``state_dict()`` (which here also goes through the wire codec). The teacher follows the base
rules; the student is kept as the released query indices, labels and seed (a refit student
is refitted from them when needed) plus, for an iterative student, its own state under
``student.``. Runs with restored roles must equal runs with long-lived roles bit for bit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.core.randomness import reproducible
from fedlabels.engines.inprocess import InProcessGrid
from fedlabels.learners import as_models
from fedlabels.runs.loop import CommMeter, run_rounds
from fedlabels.runs.session import build_session
from test_xclp_state import RebuildGrid, _unwire_state

ROUNDS, PERIOD = 3, 5


class CheckedRebuildGrid(RebuildGrid):
    """:class:`RebuildGrid` that also checks each restored role's state is the one it loaded."""

    def role(self, cid: int):
        role = super().role(cid)
        if cid in self.states:
            assert _plain(role.state_dict()) == _plain(_unwire_state(self.states[cid]))
        return role


def _plain(state: dict) -> dict:
    return {k: [str(v.dtype), v.tolist()] if isinstance(v, np.ndarray) else v
            for k, v in state.items()}


def _run(method: str, model: str, options: dict, fed, rebuild: bool):
    with reproducible(0):  # the DP noise is secret: compare two runs on one (insecure) stream
        return _run_seeded(method, model, options, fed, rebuild)


def _run_seeded(method: str, model: str, options: dict, fed, rebuild: bool):
    session = build_session(method, fed, as_models(model), rounds=ROUNDS,
                            period=PERIOD, seed=0, options=options)
    build, learners, server = session.fresh_client, session.learners, session.server
    meter = CommMeter()
    grid = (CheckedRebuildGrid(build, range(len(learners)), meter) if rebuild
            else InProcessGrid(session.clients, meter))
    records, _ = run_rounds(server, grid, meter, rounds=ROUNDS, period=PERIOD, eval_every=1,
                            iterative=session.iterative, all_cids=grid.client_ids)
    return records, server, grid


@pytest.fixture(scope="module")
def fed():
    return fl.load_federation("breast_cancer", clients=3, seed=0)


@pytest.mark.parametrize("method,model,options,student_state", [
    ("pate", "dt", {"queries": 40}, False),
    ("pate", "mlp(hidden=8)", {"queries": 40, "teacher_steps": 10}, True),
    ("dp-pate", "dt", {"queries": 40, "noise_sigma": 2.0}, False),
    ("dp-pate", "mlp(hidden=8)", {"queries": 40, "epsilon": 20.0, "student_model": "dt"},
     False),
    ("fredy", "mlp(hidden=8)", {"queries": 40, "epsilon_per_query": 0.5,
                                 "teacher_rounds": 2}, True),
    ("dp-pate", "logreg", {"queries": 6, "noise_sigma": 2.0, "query_selection": "clusters",
                           "teachers_per_client": 3}, False),
    ("fredy", "mlp(hidden=8)", {"queries": 6, "epsilon_per_query": 0.5, "teacher_rounds": 2,
                                 "query_selection": "clusters"}, True),
], ids=["pate-dt", "pate-mlp", "dp-pate-dt", "dp-pate-mlp-dt-student", "fredy-mlp",
        "dp-pate-clusters", "fredy-clusters"])
def test_restored_roles_give_the_same_run(fed, method, model, options, student_state):
    rec_a, server_a, grid_a = _run(method, model, options, fed, rebuild=False)
    rec_b, server_b, grid_b = _run(method, model, options, fed, rebuild=True)
    assert grid_b.restores >= fed.n_clients * 2 * ROUNDS  # every message but the first
    for a, b in zip(rec_a, rec_b, strict=True):
        assert a.accuracies == b.accuracies
        assert (a.bytes_up, a.bytes_down) == (b.bytes_up, b.bytes_down)
        assert json.dumps(a.server, sort_keys=True) == json.dumps(b.server, sort_keys=True)
    assert json.dumps(server_a.result_extra(), sort_keys=True) == \
        json.dumps(server_b.result_extra(), sort_keys=True)
    for cid in grid_a.client_ids:
        live, restored = grid_a.clients[cid], grid_b.role(cid)
        state = live.state_dict()
        assert _plain(state) == _plain(restored.state_dict())
        assert state["student_fitted"] is True and state["student_seed"] is not None
        assert any(k.startswith("student.") for k in state) == student_state
        if not student_state:  # a refit student is refitted from the state when needed
            assert restored._student is None
        assert np.array_equal(live.student.predict(fed.X_test),
                              restored.student.predict(fed.X_test))
        assert np.array_equal(live.predict(fed.X_public), restored.predict(fed.X_public))


def test_state_before_the_release_has_no_student(fed):
    _, _, grid = _run("pate", "dt", {"queries": 10}, fed, rebuild=False)
    fresh = type(grid.clients[0])  # a role that never saw a message
    role = fresh(0, fed.clients[0], grid.clients[0].learner, grid.clients[0].settings,
                 fed.X_public, fed.X_test, fed.y_test)
    state = role.state_dict()
    assert state["student_seed"] is None and state["student_index"] is None
    assert state["fitted"] is False and role.student is None
