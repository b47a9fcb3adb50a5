"""Issue 3: any model at every client (tree, forest, XGBoost, RuleFit, linear, MLPs), mixed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

import fedlabels as fl
from fedlabels.cli import main
from fedlabels.learners import build_learner, parse_model_spec
from fedlabels.learners.rules import rule_matrix
from fedlabels.learners.tabular import GlobalLabelClassifier, RuleFitClassifier
from fedlabels.method.base import LearnerFitError

# small but real versions of every learner type, to keep the suite fast
SPECS = {
    "dt": "DecisionTreeClassifier",
    "rf(n_estimators=10)": "RandomForestClassifier",
    "xgboost(n_estimators=10)": "GlobalLabelClassifier",
    "rulefit(n_estimators=20)": "RuleFitClassifier",
    "logreg": "LogisticRegression",
    "sk_mlp(hidden=16,max_iter=100)": "MLPClassifier",
    "mlp(hidden=32,lr=0.01)": "TorchMLPClassifier",
}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("spec", list(SPECS))
def test_each_learner_type_in_a_short_fedct_run(breast_cancer_fed, spec):
    result = fl.run("fedct", breast_cancer_fed, model=spec, rounds=2, period=20, seed=0,
                    progress=False)
    assert [type(m).__name__ for m in result.client_models] == [SPECS[spec]] * 5
    assert result.final["mean_accuracy"] > 0.85, result.final
    # pseudo-labels reached training: round 2 consensus covers all of U
    assert result.rounds[-1].server["consensus_coverage"] == 1.0
    for model in result.client_models:
        pred = np.asarray(model.predict(breast_cancer_fed.X_test))
        assert set(np.unique(pred)) <= {0, 1}


def test_mixed_team_one_spec_per_client(breast_cancer_fed):
    spec = ("dt,rf(n_estimators=10),rulefit(n_estimators=20),xgb(n_estimators=10),"
            "rf(n_estimators=10)")
    result = fl.run("fedct", breast_cancer_fed, model=spec, rounds=2, seed=1, progress=False)
    assert result.models == ["decision_tree", "random_forest(n_estimators=10)",
                             "rulefit(n_estimators=20)", "xgboost(n_estimators=10)",
                             "random_forest(n_estimators=10)"]
    assert [type(m).__name__ for m in result.client_models] == [
        "DecisionTreeClassifier", "RandomForestClassifier", "RuleFitClassifier",
        "GlobalLabelClassifier", "RandomForestClassifier"]
    assert min(result.final["client_accuracies"]) > 0.85


def test_estimators_through_the_api_and_lists_of_specs(breast_cancer_fed):
    team = [DecisionTreeClassifier(max_depth=3), "rf(n_estimators=5)",
            LogisticRegression(max_iter=500), "dt", "xgboost(n_estimators=5)"]
    result = fl.run("fedct", breast_cancer_fed, model=team, rounds=2, seed=0, progress=False)
    kinds = [type(m).__name__ for m in result.client_models]
    assert kinds == ["DecisionTreeClassifier", "RandomForestClassifier", "LogisticRegression",
                     "DecisionTreeClassifier", "GlobalLabelClassifier"]
    assert result.client_models[0].get_depth() <= 3  # the user's estimator, cloned and fitted
    assert result.final["mean_accuracy"] > 0.85


def test_multiclass_xgboost_on_wine():
    fed = fl.load_federation("wine", clients=5, seed=0)  # about 8 private examples each
    runs = {method: fl.run(method, fed, model="xgboost(n_estimators=20)", rounds=2, seed=0,
                           progress=False) for method in ("fedct", "local", "centralized")}
    acc = {m: r.final["mean_accuracy"] for m, r in runs.items()}
    assert acc["centralized"] > 0.85
    assert acc["fedct"] > acc["local"] + 0.05, acc  # co-training helps the tiny clients
    model = runs["fedct"].client_models[0]
    assert model.estimator_.get_params()["objective"] == "multi:softprob"
    proba = model.predict_proba(fed.X_test)
    assert proba.shape == (len(fed.y_test), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)


def test_multiclass_rulefit_one_vs_rest():
    fed = fl.load_federation("wine", clients=5, seed=0)
    model = build_learner(parse_model_spec("rulefit(n_estimators=20)")[0], n_classes=3,
                          random_state=0)
    pooled = fed.pooled()
    X = np.concatenate([pooled.X, fed.X_public])
    y = np.concatenate([pooled.y, fed.y_public])
    model.fit(X, y)
    assert len(model.estimators_) == 3  # one rule ensemble per class
    assert model.decision_function(fed.X_test).shape == (len(fed.y_test), 3)
    assert np.mean(model.predict(fed.X_test) == fed.y_test) > 0.85
    assert {r["class"] for r in model.rules()} <= {0, 1, 2}
    assert all(len(est.rules_without_feature_names_) <= 200 for est in model.estimators_)


def test_rulefit_agrees_with_imodels_evaluation_and_thresholds_the_logit_at_zero():
    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:200], y[:200]
    ours = RuleFitClassifier(n_estimators=30, random_state=0).fit(X, y)
    est = ours.estimators_[0]  # an imodels RuleFitClassifier (vectorised transform)
    assert 0 < len(est.rules_without_feature_names_) <= 200
    # imodels' own evaluation (pandas query per rule) of the same fitted rules
    logit = est._predict_continuous_output(X)
    np.testing.assert_allclose(ours.decision_function(X), logit)
    np.testing.assert_array_equal(ours.predict(X), (logit > 0).astype(int))
    assert np.mean(ours.predict(X) == y) > 0.9
    proba = ours.predict_proba(X)
    np.testing.assert_allclose(proba[:, 1], 1 / (1 + np.exp(-logit)))


def test_rule_matrix_is_the_query_semantics():
    X = np.array([[0.0, 5.0], [1.0, 2.0], [2.0, -1.0]])
    rules = ["X_0 <= 1.0 and X_1 > 2.0", "X_1 <= 2.0", "X_0 == X_0"]
    np.testing.assert_array_equal(rule_matrix(X, rules),
                                  [[1, 0, 1], [0, 1, 1], [0, 1, 1]])


def test_missing_classes_predict_in_the_global_label_space():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = np.where(X[:, 0] > 0, 3, 1)  # classes 1 and 3 of C = 5
    model = build_learner(parse_model_spec("xgboost(n_estimators=5)")[0], n_classes=5,
                          random_state=0).fit(X, y)
    assert set(np.unique(model.predict(X))) == {1, 3}
    proba = model.predict_proba(X)
    assert proba.shape == (60, 5) and np.all(proba[:, [0, 2, 4]] == 0)
    single = GlobalLabelClassifier(model.estimator, n_classes=5).fit(X, np.full(60, 2))
    assert np.all(single.predict(X) == 2) and np.all(single.predict_proba(X)[:, 2] == 1)
    rf = RuleFitClassifier(n_estimators=10, random_state=0).fit(X, y)
    assert set(np.unique(rf.predict(X))) <= {1, 3}


def test_client_missing_a_class_under_a_non_iid_partition():
    X, y = load_wine(return_X_y=True)
    fed = fl.make_federation(X, y, clients=3, unlabeled=60, test=30,
                             partition="shards:2", seed=0)
    counts = fed.summary()["client_class_counts"]
    assert any(0 in c for c in counts), counts  # some client lacks a class
    for spec in ("xgboost(n_estimators=10)", "rulefit(n_estimators=10)", "dt"):
        result = fl.run("fedct", fed, model=spec, rounds=2, seed=0, progress=False)
        assert result.final["mean_accuracy"] > 0.6
        for model in result.client_models:
            assert set(np.unique(model.predict(fed.X_test))) <= {0, 1, 2}


# ------------------------------------------------------------------ bad input

def test_unknown_model_name_lists_the_available_ones(breast_cancer_fed):
    with pytest.raises(fl.FedLabelsError, match=r"unknown model 'xgbost'.*xgboost \(xgb\)"):
        fl.run("fedct", breast_cancer_fed, model="dt,xgbost", rounds=1, progress=False)


def test_wrong_number_of_per_client_specs(breast_cancer_fed, capsys):
    with pytest.raises(fl.FedLabelsError, match="got 3 model specs for 5 clients"):
        fl.run("fedct", breast_cancer_fed, model="dt,rf,rulefit", rounds=1, progress=False)
    code = main(["run", "--model", "dt,rf", "--clients", "5", "--rounds", "1",
                 "--no-progress"])
    assert code == 2
    assert "got 2 model specs for 5 clients" in capsys.readouterr().err


def test_fit_failure_names_the_client_and_the_reason():
    X, y = load_breast_cancer(return_X_y=True)
    order = np.argsort(y, kind="stable")  # sorted labels: the first client sees only class 0
    fed = fl.make_federation(X[order], y[order], clients=3, unlabeled=100, test=50,
                             partition="shards:1", seed=0)
    single = [i for i, c in enumerate(fed.summary()["client_class_counts"])
              if sum(v > 0 for v in c) == 1]
    assert single
    with pytest.raises(LearnerFitError, match=rf"client {single[0]}: model LogisticRegression "
                                              r"failed to fit .* classes \[\d\].*2 classes"):
        fl.run("local", fed, model="logreg", rounds=1, progress=False)


def test_object_without_predict_is_rejected_at_construction(breast_cancer_fed):
    class FitOnly:
        def fit(self, X, y):
            return self

    with pytest.raises(fl.FedLabelsError, match="FitOnly has no predict method"):
        fl.run("fedct", breast_cancer_fed, model=FitOnly(), rounds=1, progress=False)
    with pytest.raises(fl.FedLabelsError, match="has no fit or predict method"):
        fl.run("fedct", breast_cancer_fed, model=["dt", object()], rounds=1, progress=False)


def test_bad_model_parameters():
    with pytest.raises(fl.FedLabelsError, match=r"^model spec 'rulefit\(max_rules=0\)': "
                       r"max_rules must be an integer >= 1, got '0'\.$"):
        build_learner(parse_model_spec("rulefit(max_rules=0)")[0], n_classes=2, random_state=0)


# ------------------------------------------------------------------ CLI and TOML

def test_per_client_models_from_cli_and_toml(tmp_path):
    out = tmp_path / "cli.json"
    assert main(["run", "--model", "dt,rf(n_estimators=5),xgb(n_estimators=5),dt,logreg",
                 "--rounds", "1", "--no-progress", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["models"][2] == "xgboost(n_estimators=5)"
    cfg = tmp_path / "run.toml"
    cfg.write_text('[run]\nmethod = "fedct"\ndataset = "wine"\nclients = 3\n'
                   'model = "dt,xgboost(n_estimators=5),rf(n_estimators=5)"\nrounds = 1\n')
    out = tmp_path / "toml.json"
    assert main(["run", "--config", str(cfg), "--output", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["models"] == ["decision_tree", "xgboost(n_estimators=5)",
                              "random_forest(n_estimators=5)"]
    assert data["final"]["mean_accuracy"] > 0.6


def test_rule_matrix_equals_imodels_pandas_query():
    from imodels.rule_set.rule_fit import RuleFit

    X, y = load_breast_cancer(return_X_y=True)
    est = RuleFitClassifier(n_estimators=20, random_state=1).fit(X[:150], y[:150]).estimators_[0]
    rules = [str(r) for r in est.rules_without_feature_names_]
    np.testing.assert_array_equal(rule_matrix(X, rules), RuleFit.transform(est, X, rules))
