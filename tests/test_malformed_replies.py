"""A client's malformed reply never crashes a run or moves what every client trains on.

Found by a walk as a malicious client: a label of C moved a vote to the next example (or
crashed the vote), 20 vote rows from one client outvoted the others, soft labels of 1e4 took
over the average, a negative or NaN aggregation weight scaled or destroyed the global model,
an evaluation without accuracy emptied the round's scores and crashed the result, and any
reply missing an array crashed the run with a KeyError. The server now checks every reply
(``ServerRole.check_reply``, :mod:`fedlabels.method.replies`). Both engines lose the client
of a refused reply, record its round and why, and go on where the method can, else stop
with one line naming them (the simulator stopped where a deployment went on).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import fedlabels as fl
from fedlabels.comm import Message, pack_labels
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.inprocess import simulate
from fedlabels.learners import as_models
from fedlabels.methods import get_method
from fedlabels.results.caveats import run_warnings
from fedlabels.runs.lost import ClientsLost


class Tamper:
    """A grid whose client ``cid``'s replies ``change(request, reply)`` rewrites."""

    def __init__(self, inner: Any, change: Any, cid: int = 0) -> None:
        self.inner, self.change, self.cid = inner, change, cid

    @property
    def client_ids(self) -> list[int]:
        return self.inner.client_ids

    def exchange(self, messages: Any, rnd: int) -> dict[int, Message]:
        replies = self.inner.exchange(messages, rnd)
        if self.cid in replies:
            changed = self.change(messages[self.cid], replies[self.cid])
            if changed is not None:
                replies[self.cid] = changed
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
     r"malformed reply to fedct.train: its labels hold label 3, outside the 3 classes"),
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
     r"malformed reply to evaluate: its evaluation reply gives accuracy = 7.5"),
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
    result = simulate(get_method("xclp"), fed, as_models("decision_tree"), rounds=1, seed=0,
                      options={"secure": secure}, progress=False,
                      wrap_grid=lambda grid: Tamper(grid, more))
    reason = result.extra["lost"]["0"]["reason"]
    assert re.match(r"malformed reply to xclp.hamming: its (bits|H_self) hold", reason), reason


@pytest.mark.parametrize("method,dataset,model,options,change,match", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_simulator_loses_the_client_of_a_malformed_reply(method, dataset, model, options,
                                                             change, match):
    """As a deployment: the reply is dropped, client 0 is lost from that round on (the
    result says which round and why) and the run goes on with the 4 others, which these
    methods accept."""
    fed = fl.load_federation(dataset, clients=5, seed=0)
    if dataset == "wine":
        assert len(fed.X_public) == WINE_U
    result = simulate(get_method(method), fed, as_models(model), rounds=2, period=5, seed=0,
                      options=options, progress=False,
                      wrap_grid=lambda grid: Tamper(grid, change))
    lost = result.extra["lost"]
    assert list(lost) == ["0"] and lost["0"]["round"] == 1, lost
    assert re.search(match, lost["0"]["reason"]), lost
    scores = [r.accuracies if r.accuracies is not None else r.rmse for r in result.rounds]
    assert [len(s) for s in scores if s is not None] == [4] * len(result.rounds)
    assert any(line.startswith("lost client 0 in round 1") for line in run_warnings(result))


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
    assert lost["1"]["reason"].startswith("malformed reply to fedct.train: its labels hold "
                                          "label 3, outside the 3 classes")
    status = json.loads(Path(prepared.spec.status).read_text())
    assert status["status"] == "completed" and "malformed reply" in json.dumps(status["lost"])
    assert len(result.final["client_accuracies"]) == 3
    # the simulator, given the same reply from client 1, does what the deployment did
    fed = fl.load_federation("wine", clients=4, seed=0)
    sim = simulate(get_method("fedct"), fed, as_models("dt"), rounds=2, seed=0, progress=False,
                   wrap_grid=lambda grid: Tamper(grid, _on("fedct.train", lambda r: _with(
                       r, {"labels": pack_labels(np.full(n_public, 3), 4)})), cid=1))
    assert sim.extra["lost"] == {"1": {k: lost["1"][k] for k in ("round", "reason")}}
    assert [r.accuracies for r in sim.rounds] == [r.accuracies for r in result.rounds]


class ShortOnU(DecisionTreeClassifier):
    """A tree whose predictions on the public set (``n_public`` rows) miss their last 4
    labels once it is fitted on more than ``n_public`` rows (FedCT's round 2: its private
    data and the consensus on U)."""

    def __init__(self, n_public: int = WINE_U, random_state: int | None = None) -> None:
        super().__init__(random_state=random_state)
        self.n_public = n_public

    def fit(self, X: Any, y: Any, sample_weight: Any = None, check_input: bool = True) -> Any:
        self.fitted_rows_ = len(X)
        return super().fit(X, y, sample_weight=sample_weight, check_input=check_input)

    def predict(self, X: Any, check_input: bool = True) -> Any:
        out = super().predict(X, check_input=check_input)
        short = self.fitted_rows_ > self.n_public and len(X) == self.n_public
        return out[:-4] if short else out


@pytest.mark.parametrize("workers", [1, 2])
def test_a_learner_predicting_too_few_labels_loses_its_client_in_that_round(workers):
    """A real learner (not a tampered grid) whose labels on U come 4 short in round 2: the
    simulator stopped the run, a deployment went on without the site. Now client 0 is lost
    in round 2 with the reason, the others go on (FedCT's vote takes 4 clients) and the
    result and its warnings say so; with 3 clients, 2 would be left, too few for the vote,
    and the run stops in one line naming the round, the client and the reason."""
    fed = fl.load_federation("wine", clients=5, seed=0)
    assert len(fed.X_public) == WINE_U and max(len(c) for c in fed.clients) < WINE_U
    tree = DecisionTreeClassifier(random_state=0)
    result = fl.run("fedct", fed, model=[ShortOnU(random_state=0)] + [tree] * 4, rounds=3,
                    seed=0, progress=False, workers=workers)
    assert result.extra["lost"] == {"0": {
        "round": 2, "reason": "malformed reply to fedct.train: its labels hold 1 row(s) of 24 "
                              "bytes; expected 1 of 25 (100 labels)"}}
    assert [len(r.accuracies) for r in result.rounds] == [5, 4, 4]
    assert result.rounds[1].bytes_up[0] > 0 and result.rounds[2].bytes_up[0] == 0
    assert len(result.final["client_accuracies"]) == 4
    fed3 = fl.load_federation("wine", clients=3, seed=0)
    with pytest.raises(ClientsLost) as info:
        fl.run("fedct", fed3, model=[ShortOnU(n_public=len(fed3.X_public), random_state=0),
                                     tree, tree], rounds=3, seed=0, progress=False,
               workers=workers)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("round 2: lost client 0: malformed reply to fedct.train: its "
                              "labels hold 1 row(s)")
    assert "Only 2 client(s) remain ([1, 2]), too few to go on" in message


def test_a_lost_client_stays_lost_when_the_run_is_resumed(tmp_path: Path) -> None:
    """The lost clients are kept in the checkpoint: a resumed run sends them nothing, as the
    uninterrupted run did."""
    fed = fl.load_federation("wine", clients=5, seed=0)
    models = [ShortOnU(random_state=0)] + [DecisionTreeClassifier(random_state=0)] * 4
    full = fl.run("fedct", fed, model=models, rounds=4, seed=0, progress=False)
    path = tmp_path / "run.checkpoint.npz"

    def stop(record: Any) -> None:
        if record.round == 2:
            raise KeyboardInterrupt

    simulate(get_method("fedct"), fed, as_models(models), rounds=4, seed=0, progress=False,
             checkpoint=path, on_round=stop)
    resumed = simulate(get_method("fedct"), fed, as_models(models), rounds=4, seed=0,
                       progress=False, resume=path)
    assert resumed.extra["lost"] == full.extra["lost"] == {"0": {
        "round": 2, "reason": full.extra["lost"]["0"]["reason"]}}
    assert [r.accuracies for r in resumed.rounds] == [r.accuracies for r in full.rounds]
    assert [r.bytes_up for r in resumed.rounds] == [r.bytes_up for r in full.rounds]



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
    # U's labelled slice D₀ with label 3 of wine's 3 classes (2 bits a label): was unpacked
    # as it came and trained on
    ("fedmd", "wine", "mlp(hidden=8)", lambda m: _with(
        m, {"public_labels": np.full_like(m.arrays["public_labels"], 0xFF)})
     if "public_labels" in m.arrays else None,
     r"the public_labels holds label 3, outside 0..2"),
    # a vote on a row past U (0 - 1 as uint32) was error: internal (an IndexError)
    ("pate", "wine", "dt", lambda m: _with(m, {"queries": m.arrays["queries"] - 1})
     if "queries" in m.arrays else None,
     r"the server's queries \(\d+ values of uint32\) are not this client's own \d+ distinct "
     r"rows of U"),
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
                                             rf"{value!r}; expected an integer"):
        run_server(grid, server_context(prepared.spec))


def test_under_partial_participation_a_lost_client_is_no_longer_a_participant():
    """A round's record named a lost client among its participants and repliers."""
    fed = fl.load_federation("wine", clients=5, seed=0)
    models = [ShortOnU(random_state=0)] + [DecisionTreeClassifier(random_state=0)] * 4
    result = fl.run("fedct", fed, model=models, rounds=6, seed=0, progress=False,
                    participation=0.8)
    lost_in = result.extra["lost"]["0"]["round"]
    for record in result.rounds:
        if record.round > lost_in:
            assert 0 not in record.participants and 0 not in record.replied, record
        elif record.round == lost_in:
            assert 0 in record.participants and 0 not in record.replied, record


def _without(kind: str, key: str) -> Any:
    """A request of ``kind`` without its config ``key`` (a server that left it out)."""
    def change(m: Message) -> Message | None:
        if m.kind != kind or key not in m.config:
            return None
        return Message(m.kind, arrays=dict(m.arrays),
                       config={k: v for k, v in m.config.items() if k != key},
                       category=m.category)
    return change


def _regression_consensus_cut(m: Message) -> Message | None:
    return _with(m, {"consensus": m.arrays["consensus"][:2]}) \
        if "consensus" in m.arrays else None


def _regression_steps(m: Message) -> Message | None:
    return Message(m.kind, arrays=dict(m.arrays), config={**m.config, "steps": 2**62},
                   category=m.category) if "steps" in m.config else None


# A key the client compares with its own option, left out of the request, was read with
# config[key]: a KeyError, answered as 'error: internal' rather than refused naming it.
# FedCT's regression client trained the server's step count and read a truncated consensus
# as level 0 for the missing rows.
MISSING = [
    ("dp-fedavg", "breast_cancer", "mlp(hidden=8)", {"noise_multiplier": 1.0},
     _without("dpfedavg.train", "clip"),
     r"the server asked for clip = None but this client's options say"),
    ("dp-fedct", "breast_cancer", "mlp(hidden=8)",
     {"mechanism": "dpsgd", "noise_multiplier": 1.0, "example_clip": 1.0},
     _without("fedct.train", "example_clip"),
     r"the server asked for example_clip = None but this client's options say"),
    ("xclp", "wine", None, {}, _without("xclp.setup", "secure"),
     r"the server asked for secure = 'None' but this client's options say"),
    ("fedavg-xclp", "breast_cancer", "mlp(hidden=8)", {},
     _without("fxclp.train", "propagation"),
     r"the server asked for propagation = None but this client's options say 'cross'"),
    ("fedct", "diabetes", "dt", {}, _regression_consensus_cut,
     r"the consensus holds 2 values of uint8; expected \d+ bytes \(\d+ levels\)"),
    ("fedct", "diabetes", "dt", {}, _regression_steps,
     r"the server asked for steps = 4611686018427387904 but this client's plan takes 5"),
]


@pytest.mark.parametrize("method,dataset,model,options,change,match", MISSING,
                         ids=["dp-fedavg-clip", "dp-fedct-example_clip", "xclp-secure",
                              "fedavg-xclp-propagation", "fedct-regression-consensus",
                              "fedct-regression-steps"])
def test_a_client_refuses_a_request_lacking_or_overstating_what_it_checks(
        method: str, dataset: str, model: str | None, options: dict[str, Any], change: Any,
        match: str) -> None:
    from fedlabels.core.errors import RefusedError

    fed = fl.load_federation(dataset, clients=3, seed=0)
    models = as_models(model or get_method(method).model_default())
    with pytest.raises(RefusedError, match=match):
        simulate(get_method(method), fed, models, rounds=2, period=5, seed=0,
                 progress=False, options=options, wrap_grid=lambda grid: TamperDown(grid, change))
