"""The one session builder (runs/session.py): every engine builds its roles through it, and a
deployed site's role is the simulator's role of the same client."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from fedlabels.comm import Message, encode_message
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.inprocess import InProcessGrid, simulate
from fedlabels.learners import as_models
from fedlabels.runs.config import RunConfig
from fedlabels.runs.federation import federation_for
from fedlabels.runs.loop import CommMeter, run_rounds
from fedlabels.runs.participation import Participation
from fedlabels.runs.session import build_session

SRC = Path(__file__).resolve().parents[1] / "src" / "fedlabels"
BUILDERS = ("make_client", "make_server")


def _role_building_calls(path: Path) -> list[str]:
    """``make_client`` / ``make_server`` calls in ``path`` outside a method of the same name
    (a wrapper method delegating to the method it wraps builds no role of its own)."""
    found: list[str] = []

    def visit(node: ast.AST, inside: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside = node.name
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in BUILDERS and inside != node.func.attr):
            found.append(f"{path.relative_to(SRC)}:{node.lineno} {node.func.attr}")
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def test_roles_are_built_by_the_session_builder_alone():
    calls = [c for path in sorted(SRC.rglob("*.py")) for c in _role_building_calls(path)]
    assert calls and all(c.startswith("runs/session.py:") for c in calls), calls


# unequal clients (a Dirichlet split)
CFG = RunConfig(method="fedct", dataset="breast_cancer", clients=4, model="dt", rounds=2,
                period=5, seed=3, partition="dirichlet:1,0.1", unlabeled=150)


class _FirstMessages:
    """An in-process grid that keeps each client's first message and its reply."""

    def __init__(self, inner: InProcessGrid) -> None:
        self.inner, self.first = inner, dict[int, tuple[Message, Message]]()

    @property
    def client_ids(self) -> list[int]:
        return self.inner.client_ids

    def exchange(self, messages: dict[int, Message], rnd: int) -> dict[int, Message]:
        replies = self.inner.exchange(messages, rnd)
        for cid, reply in replies.items():
            self.first.setdefault(cid, (messages[cid], reply))
        return replies


@pytest.mark.parametrize("method, model", [("fedct", "dt"), ("fedavg", "mlp(hidden=8)")])
def test_a_deployed_sites_role_answers_as_the_simulators(method, model):
    pytest.importorskip("flwr")
    from fedlabels.engines.flower.client_app import build_role
    from fedlabels.engines.flower.site import SiteData
    from fedlabels.engines.flower.spec import DeploySpec

    cfg = CFG.replace(method=method, model=model)
    fed = federation_for(cfg)
    assert len({len(c) for c in fed.clients}) > 1
    session = build_session(method, fed, as_models(model), rounds=cfg.rounds,
                            period=cfg.period, seed=cfg.seed)
    grid = _FirstMessages(InProcessGrid(session.clients, CommMeter()))
    session.server.run_round(0, grid)
    assert sorted(grid.first) == list(range(cfg.clients))
    spec = DeploySpec(run=cfg.to_dict())
    for cid, (message, reply) in grid.first.items():
        site = SiteData(cid, fed.clients[cid], fed.X_public, fed.X_test, fed.y_test,
                        [str(c) for c in fed.class_names], fed.public_scaling)
        # the ClientApp's role of this site, following the run's config
        deployed = build_role(spec, site, {"trust-coordinator": True})
        assert type(deployed) is type(session.clients[cid])
        assert encode_message(deployed.handle(message)) == encode_message(reply), cid


def test_a_session_run_by_hand_is_the_simulators_run():
    """What the test helpers do (the session's roles on a grid of their own, the engine's
    round loop) gives the simulator's records, with some clients left out each round."""
    fed = federation_for(CFG)
    policy = Participation.parse(0.6, None, None)
    session = build_session("fedct", fed, as_models("dt"), rounds=CFG.rounds,
                            period=CFG.period, seed=CFG.seed, participation=policy)
    from fedlabels.runs.participation import ParticipationGrid

    meter = CommMeter()
    grid = ParticipationGrid(InProcessGrid(session.clients, meter), policy, CFG.seed,
                             session.client_sizes)
    records, _ = run_rounds(session.server, grid, meter, rounds=session.rounds,
                            period=CFG.period, eval_every=1, iterative=session.iterative,
                            all_cids=grid.client_ids, draw=grid.draw)
    simulated = simulate(session.method, fed, as_models("dt"), rounds=CFG.rounds,
                         period=CFG.period, seed=CFG.seed, participation=0.6, progress=False)
    assert any(r.participants != list(range(CFG.clients)) for r in simulated.rounds)
    assert [(r.accuracies, r.bytes_up, r.bytes_down, r.participants) for r in records] == \
        [(r.accuracies, r.bytes_up, r.bytes_down, r.participants) for r in simulated.rounds]
    assert np.isfinite(simulated.final["mean_accuracy"])


def test_the_session_refuses_before_building_a_learner(monkeypatch):
    """A method that cannot take missing clients is refused before any learner exists."""
    from fedlabels.runs.loop import RunPlan

    def no_learners(self):
        raise AssertionError("a learner was built before the refusal")

    monkeypatch.setattr(RunPlan, "learners", no_learners)
    fed = federation_for(CFG)
    with pytest.raises(FedLabelsError, match="cannot run with"):
        build_session("pate", fed, as_models("dt"), rounds=2, period=5, seed=0,
                      participation=Participation.parse(0.5, None, None))
