"""xclp and perclient-lp train no model: label propagation labels the clients' points
directly. A run of them keeps no client models (a stand-in fitted on every private label,
which the methods are meant to treat as mostly unknown, was once saved and served by
``predict``), refuses a ``--model``, and says why wherever models are asked for."""

from __future__ import annotations

import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.tree import DecisionTreeClassifier

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.runs.config import RunConfig

NOTE = "trains no model: label propagation labels each client's own points"


@pytest.mark.parametrize("method", ["xclp", "perclient-lp"])
def test_a_run_keeps_no_models_and_predict_says_why(method, tmp_path):
    result = fl.run(method, "breast_cancer", clients=3, rounds=1, progress=False)
    assert result.models == [] and result.client_models == []
    assert NOTE in result.extra["no_models"]
    assert NOTE in result.extra["clinical"]["unavailable"]
    X = load_breast_cancer(as_frame=True).data.iloc[:5]
    with pytest.raises(FedLabelsError, match=f"cannot predict: {method} {NOTE}"):
        result.predict(X)
    saved = result.save(tmp_path / "run.json")
    assert not (tmp_path / "run.models.npz").exists()
    with pytest.raises(FedLabelsError, match=f"run.json has no models file: {method} {NOTE}"):
        fl.load_run(saved)
    assert fl.load_run(saved, models=False).extra["no_models"] == result.extra["no_models"]


def test_the_cli_refuses_a_model_and_names_the_run_without_one(tmp_path, capsys):
    out = tmp_path / "x.json"
    args = ["run", "--method", "xclp", "--dataset", "breast_cancer", "--clients", "3",
            "--rounds", "1", "--no-progress", "-o", str(out)]
    assert main([*args, "--model", "rf"]) == 2
    assert f"xclp {NOTE}" in capsys.readouterr().err and not out.exists()
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "xclp " in table and "xclp/" not in table  # no model to name
    assert not out.with_suffix(".models.npz").exists()
    table_csv = tmp_path / "new.csv"
    load_breast_cancer(as_frame=True).data.iloc[:5].to_csv(table_csv, index=False)
    assert main(["predict", str(out), str(table_csv), "-o", str(tmp_path / "p.csv")]) == 2
    assert f"has no models file: xclp {NOTE}" in capsys.readouterr().err


def test_the_python_api_refuses_an_estimator_and_a_spec_but_not_a_saved_default():
    with pytest.raises(FedLabelsError, match=f"perclient-lp {NOTE}.*does not apply"):
        fl.run("perclient-lp", "breast_cancer", model=DecisionTreeClassifier(), rounds=1)
    with pytest.raises(FedLabelsError, match=f"xclp {NOTE}"):
        RunConfig.from_mapping({"method": "xclp", "dataset": "breast_cancer", "model": "rf"})
    # a saved run's configuration records the default, and is read back (resume, report)
    cfg = RunConfig.from_mapping({"method": "xclp", "dataset": "breast_cancer",
                                  "model": "decision_tree"})
    assert cfg.model == "decision_tree"


def test_fedavg_xclp_trains_a_model_and_keeps_it():
    result = fl.run("fedavg-xclp", "breast_cancer", clients=3, rounds=1, progress=False,
                    model="mlp(hidden=8)")
    assert len(result.client_models) == 3 and "no_models" not in result.extra


@pytest.mark.parametrize(("method", "points"), [("xclp", 20), ("perclient-lp", None)])
def test_the_baseline_is_each_clients_on_its_own_share_of_the_test_set(method, points):
    """XCLP's clinical entry recorded no baseline (each client is scored on its own share
    of the test set), so the report's row showed none; it records the majority class's
    accuracy on each client's share, which the row shows."""
    import numpy as np

    from fedlabels.reporting.report import group_runs, summary_rows

    fed = fl.load_federation("breast_cancer", clients=3, seed=0)
    result = fl.run(method, fed, rounds=1, seed=0, progress=False,
                    options={"test_points": points})
    y = np.asarray(fed.y_test)
    majority = np.argmax(np.bincount(np.concatenate([c.y for c in fed.clients])))
    shares = [rows[:points] for rows in np.array_split(np.arange(len(y)), 3)]
    expected = [float(np.mean(y[rows] == majority)) for rows in shares]
    base = result.extra["clinical"]["baseline"]
    assert base["class"] == majority
    assert base["clients"] == pytest.approx(expected)
    assert summary_rows(group_runs([result]))[0]["majority_baseline"] == pytest.approx(
        np.mean(expected))


def _key_paths(value: object, at: str = "") -> set[str]:
    """Every key of a JSON object, nested, as a path (``clinical/baseline/clients``)."""
    if not isinstance(value, dict):
        return set()
    return {p for k, v in value.items()
            for p in (f"{at}/{k}", *_key_paths(v, f"{at}/{k}"))}


def test_the_flower_simulation_records_the_simulators_fields(tmp_path):
    """The Flower simulation (its ServerApp over the deployed ClientApps, here on the
    loopback grid, then its finish_result) recorded no clinical.baseline for xclp while the
    simulator did: both result JSONs have the same keys, but for what names the engine
    (provenance, deployment), and the same clinical entry."""
    import json

    from fedlabels.api import run_config
    from fedlabels.engines.flower.loopback import loopback_deployment, server_context
    from fedlabels.engines.flower.server_app import run_server
    from fedlabels.engines.flower.simulation import ENGINE, finish_result

    cfg = RunConfig(method="xclp", dataset="breast_cancer", clients=3, rounds=1, seed=0)
    prepared, grid = loopback_deployment(cfg, tmp_path / "sites")
    nodes = [prepared.node_settings(c) for c in range(cfg.clients)]
    flower = finish_result(run_server(grid, server_context(prepared.spec)), cfg,
                           prepared.spec, nodes, {"name": ENGINE})
    simulated = run_config(cfg, progress=False, save=False)
    documents = [json.loads(json.dumps(r.to_dict(), default=str)) for r in (flower, simulated)]
    for doc in documents:
        for engine_only in ("provenance", "deployment"):
            doc.pop(engine_only, None)
    assert _key_paths(documents[0]) == _key_paths(documents[1])
    assert flower.extra["clinical"] == simulated.extra["clinical"]
    assert "baseline" in flower.extra["clinical"]
