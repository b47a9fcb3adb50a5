import json

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import fedlabels as fl
from fedlabels.comm import Message, encode_message, pack_labels
from fedlabels.consensus import ABSTAIN
from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.inprocess import CommMeter, InProcessGrid
from fedlabels.method.base import LearnerFitError, Settings
from fedlabels.methods.fedct.fedct import (
    FedCTClient,
    FedCTOptions,
    FedCTServer,
    decode_consensus,
    encode_consensus,
)


def _strip_timing(d):
    d = dict(d)
    d.pop("wall_seconds")
    d["provenance"] = {k: v for k, v in d["provenance"].items()
                       if k not in ("started_utc", "ended_utc")}
    d["rounds"] = [{k: v for k, v in r.items() if k != "seconds"} for r in d["rounds"]]
    return d


def test_fedct_decision_trees_end_to_end(breast_cancer_fed):
    res = fl.run("fedct", breast_cancer_fed, model="dt", rounds=10, seed=0)
    final = res.final
    assert len(final["client_accuracies"]) == 5
    assert final["mean_accuracy"] > 0.85
    local = fl.run("local", breast_cancer_fed, model="dt", rounds=1, seed=0)
    assert final["mean_accuracy"] > local.final["mean_accuracy"]
    # consensus diagnostics recorded every round
    changed = [r.server["consensus_changed"] for r in res.rounds]
    assert changed[0] == 1.0 and all(0 <= c <= 1 for c in changed)
    assert all(r.server["consensus_accuracy"] > 0.8 for r in res.rounds)


def test_fedct_upload_bytes_are_the_serialized_bit_packed_labels(breast_cancer_fed):
    res = fl.run("fedct", breast_cancer_fed, model="dt", rounds=3, seed=0)
    expected = len(encode_message(Message("fedct.labels", arrays={
        "labels": pack_labels(np.zeros(370, dtype=int), 2)})))
    assert expected < 370 // 8 + 80  # 1 bit per label plus a small header
    assert res.bytes_up_per_round() == [[expected] * 3] * 5
    assert res.communication["bytes_up_total"] == expected * 3 * 5
    down = res.bytes_down_per_round()
    assert down[0][0] < down[0][1]  # round 1 carries no consensus yet, later rounds do


def test_fedavg_upload_is_the_model_and_local_sends_nothing(breast_cancer_fed):
    res = fl.run("fedavg", breast_cancer_fed, model="mlp(hidden=16)", rounds=2, period=5,
                 seed=0)
    n_params = 30 * 16 + 16 + 16 * 2 + 2
    up = res.bytes_up_per_round()[0][0]
    assert 4 * n_params < up < 4 * n_params + 100
    for method in ("local", "centralized"):
        r = fl.run(method, breast_cancer_fed, model="dt", rounds=1, seed=0)
        assert r.communication["bytes_up_total"] == 0
        assert r.communication["bytes_down_total"] == 0
        assert r.communication["control_bytes_total"] > 0
    central = fl.run("centralized", breast_cancer_fed, model="dt", rounds=1, seed=0)
    assert len(central.final["client_accuracies"]) == 1


def test_meter_counts_each_direction_and_category():
    meter = CommMeter()
    meter.add(0, 1, "up", "protocol", 10)
    meter.add(0, 1, "up", "protocol", 5)
    meter.add(0, 2, "down", "evaluation", 7)
    assert meter.per_client(0, [1, 2], "up") == [15, 0]
    assert meter.total("up") == 15 and meter.total("down", "evaluation") == 7


@pytest.mark.parametrize("model,kwargs", [("dt", {}), ("mlp(hidden=16)", {"period": 5})])
def test_runs_are_deterministic(breast_cancer_fed, model, kwargs):
    a = fl.run("fedct", breast_cancer_fed, model=model, rounds=3, seed=4, **kwargs)
    b = fl.run("fedct", breast_cancer_fed, model=model, rounds=3, seed=4, **kwargs)
    assert json.dumps(_strip_timing(a.to_dict())) == json.dumps(_strip_timing(b.to_dict()))


def test_different_seeds_give_different_models(breast_cancer_fed):
    a = fl.run("fedct", breast_cancer_fed, model="mlp(hidden=16)", rounds=2, period=5, seed=4)
    c = fl.run("fedct", breast_cancer_fed, model="mlp(hidden=16)", rounds=2, period=5, seed=5)
    assert not np.array_equal(a.client_models[0].get_weights(),
                              c.client_models[0].get_weights())


def test_seed_determines_the_whole_pipeline():
    fed1 = fl.load_federation("wine", clients=3, seed=1)
    fed2 = fl.load_federation("wine", clients=3, seed=1)
    r1 = fl.run("fedct", fed1, model="rf(n_estimators=10)", rounds=3, seed=1)
    r2 = fl.run("fedct", fed2, model="rf(n_estimators=10)", rounds=3, seed=1)
    assert r1.final == r2.final


def test_fedct_torch_clients_train_on_the_consensus():
    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    settings = Settings(n_classes=2, n_features=fed.n_features, n_clients=3, rounds=2, period=4,
                        options=FedCTOptions())
    from fedlabels.learners import build_learner, parse_model_spec

    spec = parse_model_spec("mlp(hidden=8)")[0]
    clients = {i: FedCTClient(i, fed.clients[i], build_learner(spec, n_classes=2,
                                                               random_state=i),
                              settings, fed.X_public, fed.X_test, fed.y_test)
               for i in range(3)}
    server = FedCTServer(settings, len(fed.X_public))
    grid = InProcessGrid(clients, CommMeter())
    server.run_round(0, grid)
    assert all(c.pseudo_X is None for c in clients.values())  # nothing before the 1st vote
    assert all(c.learner.steps_ == 4 for c in clients.values())
    consensus_round0 = server.labels.copy()
    votes = np.stack([c.local_labels() for c in clients.values()])
    assert np.array_equal(consensus_round0, (votes.sum(axis=0) >= 2).astype(int))
    server.run_round(1, grid)
    for c in clients.values():
        # P <- (U, L_0): the whole of U, labelled with the round-0 majority vote
        assert np.array_equal(c.pseudo_y, consensus_round0)
        assert np.array_equal(c.pseudo_X, fed.X_public)
        assert c.learner.steps_ == 8


def test_qualified_majority_consensus_travels_with_abstentions():
    labels = np.array([0, ABSTAIN, 2, 1, ABSTAIN])
    arrays = encode_consensus(labels, 3)
    assert "keep" in arrays
    assert np.array_equal(decode_consensus(arrays, 5, 3), labels)
    assert "keep" not in encode_consensus(np.array([0, 1, 2]), 3)


def test_fedct_with_quorum_leaves_out_disputed_examples(breast_cancer_fed):
    res = fl.run("fedct", breast_cancer_fed, model="dt", rounds=3, quorum=1.0, seed=0)
    cover = [r.server["consensus_coverage"] for r in res.rounds]
    assert all(0 < c <= 1 for c in cover) and min(cover) < 1.0
    assert res.final["mean_accuracy"] > 0.8


def test_estimator_objects_and_per_client_specs(breast_cancer_fed):
    res = fl.run("fedct", breast_cancer_fed, model=DecisionTreeClassifier(max_depth=3),
                 rounds=2, seed=0)
    assert res.final["mean_accuracy"] > 0.8
    mixed = fl.run("fedct", breast_cancer_fed, model="dt,rf(n_estimators=20),logreg,dt,dt",
                   rounds=2, seed=0)
    assert [type(m).__name__ for m in mixed.client_models] == [
        "DecisionTreeClassifier", "RandomForestClassifier", "LogisticRegression",
        "DecisionTreeClassifier", "DecisionTreeClassifier"]


# ------------------------------------------------------------------ bad input

def test_majority_vote_needs_three_clients():
    fed = fl.load_federation("breast_cancer", clients=2, seed=0)
    with pytest.raises(FedLabelsError, match=r"at least 3 clients.*tie"):
        fl.run("fedct", fed, model="dt", rounds=1)
    # a qualified majority (unanimity) is meaningful with two clients
    assert fl.run("fedct", fed, model="dt", rounds=1, quorum=1.0).final


def test_unknown_method_and_model(breast_cancer_fed):
    with pytest.raises(FedLabelsError, match="unknown method 'fedsgd'"):
        fl.run("fedsgd", breast_cancer_fed)
    with pytest.raises(FedLabelsError, match="unknown model 'xgbooost'"):
        fl.run("fedct", breast_cancer_fed, model="xgbooost")


@pytest.mark.parametrize("quorum", [0, 1.5, -0.2])
def test_quorum_outside_range(breast_cancer_fed, quorum):
    with pytest.raises(FedLabelsError, match="quorum must lie in \\(0, 1\\]"):
        fl.run("fedct", breast_cancer_fed, quorum=quorum)


def test_fedavg_rejects_models_without_parameters(breast_cancer_fed):
    with pytest.raises(FedLabelsError, match=r"FedAvg .* torch model .*'mlp'"):
        fl.run("fedavg", breast_cancer_fed, model="dt")


def test_object_without_predict_is_rejected(breast_cancer_fed):
    class NotAModel:
        def fit(self, X, y):
            return self

    with pytest.raises(FedLabelsError, match="no predict method"):
        fl.run("fedct", breast_cancer_fed, model=NotAModel())


def test_fit_failure_names_the_client():
    fed = fl.load_federation("breast_cancer", clients=2, partition="shards:1", seed=0)
    with pytest.raises(LearnerFitError, match=r"client \d: model LogisticRegression failed.*"
                                              r"classes \[\d\]"):
        fl.run("local", fed, model="logreg", rounds=1)


def test_a_one_class_client_is_told_what_to_do(capsys, tmp_path):
    """Many clients on a skewed or fine split leave some with one class; the error says how
    to get past it (and a model that fits one class does)."""
    from fedlabels.cli import main

    args = ["run", "--method", "fedct", "--dataset", "breast_cancer", "--clients", "40",
            "--partition", "quantity:0.5", "--rounds", "1", "--workers", "1",
            "--no-checkpoint", "--no-progress", "-q"]
    code = main([*args, "--model", "logreg", "-o", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "failed to fit" in err and "holds one class only" in err
    for advice in ("--private-per-client", "quantity:A,MIN", "(dt)"):
        assert advice in err
    fed = fl.load_federation("breast_cancer", clients=40, partition="quantity:0.5", seed=0)
    assert fl.run("fedct", fed, model="dt", rounds=1, workers=1).final["mean_accuracy"] > 0


def test_wrong_number_of_per_client_specs(breast_cancer_fed):
    with pytest.raises(FedLabelsError, match="3 model specs for 5 clients"):
        fl.run("fedct", breast_cancer_fed, model="dt,rf,dt")


def test_interrupt_keeps_the_rounds_done_so_far(breast_cancer_fed, tmp_path):
    def stop_after_two(record):
        if record.round == 2:
            raise KeyboardInterrupt

    res = fl.run("fedct", breast_cancer_fed, model="dt", rounds=10, seed=0,
                 on_round=stop_after_two)
    assert res.extra["interrupted"] is True and len(res.rounds) == 2
    data = json.loads(res.save_json(tmp_path / "partial.json").read_text())
    assert data["interrupted"] is True and data["final"]["round"] == 2

    def stop_at_once(record):
        raise KeyboardInterrupt

    # nothing evaluated yet: the round done is kept, final is None, the JSON still writes
    early = fl.run("fedct", breast_cancer_fed, model="dt", rounds=10, eval_every=5,
                   on_round=stop_at_once)
    assert early.extra["interrupted"] is True and len(early.rounds) == 1
    assert early.final is None and early.summary_row()["mean_acc"] is None
    data = json.loads(early.save_json(tmp_path / "early.json").read_text())
    assert data["final"] is None and data["rounds"][0]["accuracies"] is None
