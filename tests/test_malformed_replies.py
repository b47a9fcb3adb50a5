"""A client's malformed reply never crashes a run or moves what every client trains on.

Found by a walk as a malicious client: a label of C moved a vote to the next example (or
crashed the vote), 20 vote rows from one client outvoted the others, soft labels of 1e4 took
over the average, a negative or NaN aggregation weight scaled or destroyed the global model,
an evaluation without accuracy emptied the round's scores and crashed the result, and any
reply missing an array crashed the run with a KeyError. The server now checks every reply
(``ServerRole.check_reply``, :mod:`fedlabels.method.replies`): the simulator stops with one
line naming the client, a Flower deployment drops the site as lost and goes on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.comm import Message, pack_labels
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import get_method


class Tamper:
    """A grid whose client 0's replies ``change(request, reply)`` rewrites."""

    def __init__(self, inner: Any, change: Any) -> None:
        self.inner, self.change = inner, change

    @property
    def client_ids(self) -> list[int]:
        return self.inner.client_ids

    def exchange(self, messages: Any, rnd: int) -> dict[int, Message]:
        replies = self.inner.exchange(messages, rnd)
        if 0 in replies:
            changed = self.change(messages[0], replies[0])
            if changed is not None:
                replies[0] = changed
        return replies


def _with(reply: Message, arrays: dict[str, Any] | None = None,
          config: dict[str, Any] | None = None, drop: str | None = None) -> Message:
    kept = {k: v for k, v in reply.arrays.items() if k != drop}
    return Message(reply.kind, arrays={**kept, **(arrays or {})},
                   config={**reply.config, **(config or {})}, category=reply.category)


def _on(kind: str, change: Any) -> Any:
    return lambda request, reply: change(reply) if request.kind == kind else None


WINE_U = 100  # |U| of wine with 5 clients below


def _labels_of_class_c(reply: Message) -> Message:  # wine: 3 classes, 2 bits a label
    return _with(reply, {"labels": pack_labels(np.full(WINE_U, 3) % 4, 4)})


CASES = [
    ("fedct", "wine", "dt", {}, _on("fedct.train", _labels_of_class_c),
     r"client 0's reply to fedct.train is malformed: its labels hold label 3, outside the 3 "
     r"classes"),
    ("fedct", "wine", "dt", {}, _on("fedct.train", lambda r: _with(r, drop="labels")),
     r"its fedct.labels reply has no labels"),
    ("pate", "breast_cancer", "dt", {},
     _on("pate.vote", lambda r: _with(r, {"labels": np.repeat(np.atleast_2d(
         r.arrays["labels"]), 20, axis=0)})),
     r"its labels hold 20 row\(s\) of \d+ bytes; expected 1"),
    ("dd", "breast_cancer", "mlp(hidden=8)", {},
     _on("dd.train", lambda r: _with(r, {"soft": np.tile([1e4, 0.0], (len(
         r.arrays["soft"]), 1)).astype(np.float32)})),
     r"its soft are not probability rows"),
    ("fedavg", "breast_cancer", "mlp(hidden=8)", {},
     _on("fedavg.train", lambda r: _with(r, config={"n": -50.5})),
     r"gives n = -50.5; expected a number > 0"),
    ("fedavg", "breast_cancer", "mlp(hidden=8)", {"aggregate": "median"},
     _on("fedavg.train", lambda r: _with(r, {"weights": np.full_like(r.arrays["weights"],
                                                                     np.nan)})),
     r"holds NaN or inf in weights"),
    ("fedct", "breast_cancer", "dt", {},
     _on("evaluate", lambda r: _with(r, config={"accuracy": 7.5})),
     r"client 0's reply to evaluate is malformed: its evaluation reply gives accuracy = 7.5"),
    ("fedavg", "diabetes", "mlp(hidden=8)", {},
     _on("evaluate", lambda r: _with(r, config={"rmse": -1.0})),
     r"its evaluation reply gives rmse = -1.0; expected a number in \[0, inf\]"),
    ("xclp", "breast_cancer", "decision_tree", {},
     _on("xclp.rowsums", lambda r: _with(r, drop="part")),
     r"its xclp.rowsums.reply reply has no part"),
]


@pytest.mark.parametrize("secure", ["none", "ot"])
def test_an_xclp_client_announcing_more_points_than_it_sends_is_named(secure):
    """It ran on into numpy's dimension error (or, under OT, an honest peer's)."""
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    more = _on("xclp.setup", lambda r: _with(r, config={"n": r.config["n"] + 5}))
    with pytest.raises(FedLabelsError, match=r"client 0's reply to xclp.hamming is "
                                             r"malformed: its (bits|H_self) hold"):
        simulate(get_method("xclp"), fed, as_models("decision_tree"), rounds=1, seed=0,
                 options={"secure": secure}, progress=False,
                 wrap_grid=lambda grid: Tamper(grid, more))


@pytest.mark.parametrize("method,dataset,model,options,change,match", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_simulator_names_the_client_of_a_malformed_reply(method, dataset, model, options,
                                                             change, match):
    fed = fl.load_federation(dataset, clients=5, seed=0)
    if dataset == "wine":
        assert len(fed.X_public) == WINE_U
    with pytest.raises(FedLabelsError, match=match):
        simulate(get_method(method), fed, as_models(model), rounds=2, period=5, seed=0,
                 options=options, progress=False,
                 wrap_grid=lambda grid: Tamper(grid, change))


def test_honest_replies_pass_every_check():
    """The same runs untampered complete (the checks refuse nothing an honest client
    sends; the method contract checks every method on both engines)."""
    for method, dataset, model, options, _, _ in CASES[::2]:
        fed = fl.load_federation(dataset, clients=5, seed=0)
        simulate(get_method(method), fed, as_models(model), rounds=2, period=5, seed=0,
                 options=options, progress=False,
                 wrap_grid=lambda grid: Tamper(grid, lambda request, reply: None))


def _deployment_with_a_bad_site(tmp_path: Path, clients: int, rounds: int, kind: str,
                                change: Any) -> tuple[Any, Any]:
    """A loopback deployment of FedCT on wine whose site 1 (node 1002) replies to messages
    of ``kind`` with ``change(reply)``; (prepared, grid)."""
    from flwr.app import Message as FlowerMessage

    from fedlabels.engines.flower.convert import (
        attached_message,
        from_record_dict,
        to_record_dict,
    )
    from fedlabels.engines.flower.loopback import loopback_deployment
    from fedlabels.runs.config import RunConfig

    cfg = RunConfig(method="fedct", dataset="wine", clients=clients, model="dt",
                    rounds=rounds, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    honest = grid.client_app

    def site(message: Any, context: Any) -> Any:
        reply = honest(message, context)
        ours, meta = from_record_dict(reply.content)
        if context.node_id == 1002 and ours.kind == kind:
            return FlowerMessage(to_record_dict(change(ours), attached_message(reply.content),
                                                **meta), reply_to=message)
        return reply

    grid.client_app = site
    return prepared, grid


def test_a_deployment_drops_a_site_whose_reply_is_malformed(tmp_path: Path) -> None:
    """Site 1 of 4 sends a label outside the classes: it is lost with the reason, and the
    run completes with the others (it failed for every site, naming none)."""
    from fedlabels.engines.flower.loopback import server_context
    from fedlabels.engines.flower.server_app import run_server

    n_public = len(fl.load_federation("wine", clients=4, seed=0).X_public)
    prepared, grid = _deployment_with_a_bad_site(
        tmp_path, 4, 2, "fedct.labels",
        lambda ours: _with(ours, {"labels": pack_labels(np.full(n_public, 3), 4)}))
    result = run_server(grid, server_context(prepared.spec))
    assert result is not None and len(result.rounds) == 2
    lost = result.extra["deployment"]["lost"]
    assert list(lost) == ["1"], lost
    assert lost["1"]["reason"].startswith("malformed reply: its labels hold label 3, outside "
                                          "the 3 classes")
    status = json.loads(Path(prepared.spec.status).read_text())
    assert status["status"] == "completed" and "malformed reply" in json.dumps(status["lost"])
    assert len(result.final["client_accuracies"]) == 3



class TamperDown(Tamper):
    """A grid whose messages to client 0 ``change(request)`` rewrites (a broken server or
    transport)."""

    def exchange(self, messages: Any, rnd: int) -> dict[int, Message]:
        messages = dict(messages)
        if 0 in messages:
            messages[0] = self.change(messages[0]) or messages[0]
        return self.inner.exchange(messages, rnd)


def _nan_weights(m: Message) -> Message | None:
    return _with(m, {"weights": np.full_like(m.arrays["weights"], np.nan)}) \
        if "weights" in m.arrays else None


DOWN = [
    ("fedavg", "breast_cancer", "mlp(hidden=8)", _nan_weights,
     r"client 0: the global weights hold NaN or inf"),
    ("fedct", "wine", "dt", lambda m: _with(m, {"consensus": m.arrays["consensus"][:2]})
     if "consensus" in m.arrays else None,
     r"the consensus holds 2 values of uint8; expected 25 bytes \(100 labels\)"),
    ("dd", "breast_cancer", "mlp(hidden=8)", lambda m: _with(
        m, {"soft": np.full_like(m.arrays["soft"], np.nan)}) if "soft" in m.arrays else None,
     r"client 0: refusing the dd.train message: .*NaN or inf|not probability rows"),
]


@pytest.mark.parametrize("method,dataset,model,change,match", DOWN,
                         ids=[d[0] for d in DOWN])
def test_a_client_refuses_malformed_values_from_the_server(method, dataset, model, change,
                                                           match):
    """A client took NaN global weights or soft targets (and kept a NaN model) and read a
    truncated consensus as class 0 for the missing rows."""
    from fedlabels.core.errors import RefusedError

    fed = fl.load_federation(dataset, clients=5, seed=0)
    with pytest.raises(RefusedError, match=match):
        simulate(get_method(method), fed, as_models(model), rounds=3, period=5, seed=0,
                 progress=False, wrap_grid=lambda grid: TamperDown(grid, change))


@pytest.mark.parametrize("key,value", [("n_examples", -5), ("partition_id", "one")])
def test_a_sites_hello_is_checked_and_names_the_node(tmp_path: Path, key: str,
                                                     value: Any) -> None:
    """A negative size was taken as it came, a text partition id was a bare int() error."""
    from fedlabels.engines.flower.loopback import server_context
    from fedlabels.engines.flower.server_app import run_server

    prepared, grid = _deployment_with_a_bad_site(
        tmp_path, 3, 1, "fedlabels.hello.reply",
        lambda ours: Message(ours.kind, config={**ours.config, key: value},
                             category=ours.category))
    with pytest.raises(FedLabelsError, match=rf"SuperNode 1002 answered hello with {key} = "
                                             rf"{value!r}; expected a whole number"):
        run_server(grid, server_context(prepared.spec))
