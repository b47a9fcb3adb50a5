"""DD, FedMD, PATE, DP-PATE and FREDY end to end on small bundled data."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fedlabels as fl
from fedlabels.consensus import vote_counts
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier

MLP = "mlp(hidden=16)"


def run(method, fed, rounds=2, period=10, **options):
    return fl.run(method, fed, model=MLP, rounds=rounds, period=period, seed=0,
                  options=options)


@pytest.fixture(scope="module")
def digits_fed():
    return fl.load_federation("digits", clients=4, unlabeled=400, private=400,
                              test=300, seed=0)


# ------------------------------------------------------------------ the torch hook


def test_distill_steps_follow_the_soft_targets():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5)).astype(np.float32)
    targets = np.tile(np.array([[0.1, 0.8, 0.1]], dtype=np.float32), (200, 1))
    model = TorchMLPClassifier(hidden_layer_sizes=(8,), n_classes=3, learning_rate=1e-2,
                               random_state=0)
    model.distill_steps(X, targets, 300)
    probs = model.predict_proba(X)
    assert np.allclose(probs.mean(axis=0), targets[0], atol=0.03)


def test_dd_trains_on_the_averaged_soft_labels(digits_fed):
    with_soft = run("dd", digits_fed, rounds=3, period=40, distill_weight=1.0)
    without = run("dd", digits_fed, rounds=3, period=40, distill_weight=0.0)
    w1 = np.concatenate([m.get_weights() for m in with_soft.client_models])
    w0 = np.concatenate([m.get_weights() for m in without.client_models])
    assert not np.allclose(w1, w0)  # the distillation term changes the models
    # clients pulled towards one average agree more on U than without the term
    X_u = digits_fed.X_public

    def disagreement(models):
        preds = np.stack([m.predict(X_u) for m in models])
        return float(np.mean(preds != preds[0]))

    assert disagreement(with_soft.client_models) < disagreement(without.client_models)
    # payload: |U| x C float16 probabilities per client per round, plus a small header
    payload = len(X_u) * digits_fed.n_classes * 2
    up = np.asarray(with_soft.rounds[0].bytes_up)
    assert np.all(up >= payload) and np.all(up < payload + 200)
    assert with_soft.extra["soft_labels"]["dtype"] == "float16"
    assert with_soft.final["mean_accuracy"] > 0.5


def test_dd_rejects_models_without_soft_training(breast_cancer_fed):
    with pytest.raises(FedLabelsError, match="soft"):
        fl.run("dd", breast_cancer_fed, model="dt", rounds=1)
    with pytest.raises(FedLabelsError, match="distill_weight"):
        run("dd", breast_cancer_fed, distill_weight=-1)


def test_fedmd_uses_the_labelled_public_slice(digits_fed):
    result = run("fedmd", digits_fed, rounds=3, public_labeled=100, public_subset=200,
                 transfer_steps=30, digest_steps=10)
    # round 1 also carries the 100 bit-packed public labels (4 bits each for 10 classes)
    down = np.asarray([r.bytes_down for r in result.rounds])
    assert np.all(down[0] >= 50) and np.all(down[1] > down[0])  # later: the consensus
    up = np.asarray(result.rounds[1].bytes_up)
    assert np.all(up >= 200 * digits_fed.n_classes * 2)
    assert result.final["mean_accuracy"] > 0.5
    assert result.extra["fedmd"]["public_labeled"] == 100
    with pytest.raises(FedLabelsError, match="exceeds"):
        run("fedmd", digits_fed, public_labeled=10_000)


# ------------------------------------------------------------------ PATE / DP-PATE


def test_pate_student_is_what_every_client_reports(breast_cancer_fed, tmp_path):
    result = run("pate", breast_cancer_fed, rounds=3, period=50, queries=200, teacher_steps=50)
    accs = result.final["client_accuracies"]
    assert len(set(accs)) == 1  # one released student, reported by every client
    server = result.rounds[0].server
    assert server["answered_fraction"] == 1.0 and server["labels_equal_plain_argmax"] == 1.0
    assert result.final["mean_accuracy"] > 0.8
    path = result.save_json(tmp_path / "pate.json")
    privacy = json.loads(path.read_text())["privacy"]
    assert privacy["epsilon"] is None and privacy["accountant"] == "none"


@pytest.mark.parametrize("method, options", [
    ("pate", {}), ("dp-pate", {"noise_sigma": 2.0}),
    ("fredy", {"epsilon_per_query": 1.0, "teacher_rounds": 2})])
def test_teacher_student_assumptions_are_whole_sentences(breast_cancer_fed, method, options):
    # privacy["assumptions"] was a str: the result's threat_model listed it letter by letter
    result = run(method, breast_cancer_fed, rounds=1, period=5, queries=20, **options)
    privacy, threat = result.extra["privacy"], result.extra["threat_model"]
    assert isinstance(privacy["assumptions"], list)
    assert threat["assumptions"] == privacy["assumptions"]
    assert all(len(a.split()) > 3 for a in threat["assumptions"])


def test_dp_pate_noise_changes_labels_and_is_accounted(breast_cancer_fed, tmp_path):
    result = run("dp-pate", breast_cancer_fed, queries=100, teacher_steps=30,
                 noise_sigma=3.0, delta=1e-5)
    privacy = result.extra["privacy"]
    assert privacy["mechanism"] == "GNMax" and privacy["noise_sigma"] == 3.0
    # data-independent: 100 Gaussian mechanisms of std σ and L2 sensitivity √2, composed
    # by dp-accounting's analytic Gaussian (one mechanism of multiplier σ/√(2·100)); the RDP
    # sum of λ/σ² beside it
    import dp_accounting as dpa

    from fedlabels.privacy.gnmax import gnmax_rdp_data_independent
    from fedlabels.privacy.vote_accounting import epsilon_from_rdp

    expected = dpa.get_epsilon_gaussian(3.0 / (2 * 100) ** 0.5, 1e-5)
    assert privacy["epsilon"] == pytest.approx(expected, rel=1e-6)
    assert privacy["accountant"] == "exact_gaussian"
    rdp, _ = epsilon_from_rdp(100 * gnmax_rdp_data_independent(3.0), 1e-5)
    assert privacy["epsilon_by_accountant"]["rdp_data_independent"] == pytest.approx(rdp)
    assert privacy["epsilon_data_dependent"] <= privacy["epsilon"]
    assert privacy["delta"] == 1e-5 and "disjoint" in " ".join(privacy["assumptions"])
    assert result.rounds[0].server["labels_equal_plain_argmax"] < 1.0  # σ = 3 vs 5 votes
    saved = json.loads(result.save_json(tmp_path / "r.json").read_text())["privacy"]
    assert {"epsilon", "delta", "accountant", "assumptions"} <= set(saved)


def test_dp_pate_calibrates_sigma_from_epsilon(breast_cancer_fed):
    result = run("dp-pate", breast_cancer_fed, queries=50, teacher_steps=20, epsilon=50.0)
    assert result.extra["privacy"]["epsilon"] == pytest.approx(50.0, rel=1e-3)


def test_confident_gnmax_abstains(breast_cancer_fed):
    result = run("dp-pate", breast_cancer_fed, queries=200, teacher_steps=30,
                 noise_sigma=1.0, threshold=4.5, threshold_sigma=1.0)
    assert 0 < result.rounds[0].server["answered_fraction"] < 1
    assert result.extra["privacy"]["mechanism"] == "confident GNMax"
    with pytest.raises(FedLabelsError, match="labelled none"):
        run("dp-pate", breast_cancer_fed, queries=50, teacher_steps=5, noise_sigma=1.0,
            threshold=1e6, threshold_sigma=1.0)


# ------------------------------------------------------------------ FREDY


def test_fredy_teachers_keep_local_models_and_state_the_caveat(digits_fed):
    result = run("fredy", digits_fed, rounds=2, queries=300, teacher_rounds=3,
                 epsilon_per_query=0.5)
    weights = [m.get_weights() for m in result.client_models]
    assert not np.allclose(weights[0], weights[1])  # last local models, not the average
    privacy = result.extra["privacy"]
    n = digits_fed.n_clients
    assert privacy["l1_sensitivity"] == 2 * n
    assert privacy["epsilon_per_query"] == pytest.approx(0.5 * n)  # formal, non-disjoint
    assert privacy["if_disjoint_teachers"]["epsilon_per_query"] == pytest.approx(0.5)
    assert privacy["epsilon"] > privacy["if_disjoint_teachers"]["epsilon"]
    assert privacy["epsilon_by_accountant"]["basic"] == pytest.approx(300 * 0.5 * n)
    said = " ".join(privacy["assumptions"])
    assert "FedAvg" in said and "disjoint" in said
    assert len(set(result.final["client_accuracies"])) == 1
    # the released labels are a noisy version of the teachers' plain vote
    votes = np.stack([m.predict(digits_fed.X_public) for m in result.client_models])
    assert vote_counts(votes, 10).shape == (len(digits_fed.X_public), 10)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("method,options,match", [
    ("pate", {"queries": 10_000}, "exceeds the public set"),
    ("pate", {"teachers": 3}, "must equal the number of clients"),
    ("dp-pate", {}, "needs --noise-sigma"),
    ("dp-pate", {"noise_sigma": -1.0}, "noise_sigma must lie in"),
    ("dp-pate", {"epsilon": 0.0}, "epsilon must lie in"),
    ("dp-pate", {"noise_sigma": 1.0, "delta": 1.5}, "delta must lie in"),
    ("dp-pate", {"noise_sigma": 1.0, "threshold": 3.0}, "needs --opt threshold_sigma"),
    ("dp-pate", {"noise_sigma": 1.0, "epsilon": 1.0}, "not both"),
    ("dp-pate", {"noise_sigma": 1.0, "threshold_sigma": 1.0}, "applies only to confident"),
    ("dp-pate", {"epsilon": 1.0, "threshold": 3.0, "threshold_sigma": 1.0},
     "covers plain GNMax only"),
    ("fredy", {}, "FREDY needs exactly one of --epsilon"),
    ("fredy", {"epsilon": 1.0, "epsilon_per_query": 0.1}, "FREDY needs exactly one"),
    ("fredy", {"epsilon": -0.1}, "epsilon must lie in"),
    ("fredy", {"epsilon": 1.0, "delta": 0.0}, "delta must lie in"),
    ("fredy", {"epsilon": 1.0, "teacher_steps": 2}, "has no option 'teacher_steps'"),
    ("pate", {"delta": 1e-5}, "has no option 'delta'"),
    ("pate", {"student_model": "no_such_model"}, "unknown model"),
    ("pate", {"student_model": "dt,rf"}, "one model spec"),
])
def test_bad_inputs_are_clear_errors(breast_cancer_fed, method, options, match):
    if method != "fredy":  # FREDY's teachers take b steps per FedAvg round, no teacher_steps
        options = {"teacher_steps": 2, **options}
    with pytest.raises(FedLabelsError, match=match):
        run(method, breast_cancer_fed, rounds=1, period=2, **options)


def test_fewer_than_two_teachers():
    fed = fl.load_federation("breast_cancer", clients=1, seed=0)
    with pytest.raises(FedLabelsError, match="at least 2 teachers"):
        run("pate", fed, rounds=1)


def test_student_on_labelled_queries_of_one_class_predicts_that_class(breast_cancer_fed):
    # one labelled query holds one class: logistic regression cannot be fitted on it, so
    # the student predicts the one released class (a noisy release may hold one class)
    result = run("pate", breast_cancer_fed, rounds=1, queries=1, teacher_steps=2,
                 student_model="logreg")
    y = breast_cancer_fed.y_test
    assert result.final["mean_accuracy"] in (np.mean(y == 0), np.mean(y == 1))



def test_cli_flags_reach_the_method(tmp_path):
    import argparse

    from fedlabels.api import run_config
    from fedlabels.cli.run_options import add_run_options, config_from_args

    parser = argparse.ArgumentParser()
    add_run_options(parser)

    def config(*argv):
        return config_from_args(parser.parse_args(["--model", MLP, "--rounds", "1",
                                                    "--period", "5", *argv]))

    cfg = config("--method", "fredy", "--teachers", "3", "--epsilon-per-query", "0.5",
                 "--delta", "1e-6", "--queries", "100", "--opt", "teacher_rounds=2")
    assert cfg.clients == 3
    assert cfg.options == {"teacher_rounds": 2, "epsilon_per_query": 0.5, "delta": 1e-6,
                           "queries": 100, "teachers": 3}
    privacy = run_config(cfg).extra["privacy"]
    assert privacy["epsilon_per_query_nominal"] == 0.5 and privacy["queries"] == 100
    assert config("--method", "dp-pate", "--noise-sigma", "2").options == {"noise_sigma": 2.0}
    with pytest.raises(FedLabelsError, match="sigma"):
        run_config(config("--method", "dp-pate", "--noise-sigma", "-1"))


def test_a_str_assumption_from_older_saved_state_stays_one_sentence():
    from fedlabels.methods import get_method

    threat = get_method("pate").threat_model
    said = "one record of one teacher changes"
    assert threat.as_run({"assumptions": said}, None)["assumptions"] == [said]
