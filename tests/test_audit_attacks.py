"""Membership-inference attacks: metrics on known ROCs, and the sanity tests of privacy.md §1.4."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.torch_mlp import TorchMLPClassifier
from fedlabels.privacy.attacks import (
    augmentation_attack,
    correct_label_counts,
    evaluate_attack,
    gap_attack,
    gaussian_copies,
    label_frequency,
    lira_labels_offline,
    lira_offline,
    loss_attack,
    rmia_offline,
    roc_curve_points,
    shadow_features,
    shokri_attack,
    tpr_at_fpr,
    true_class_probability,
)

D, C = 20, 4


def _mlp(seed: int, X: np.ndarray, y: np.ndarray, steps: int = 300) -> TorchMLPClassifier:
    return TorchMLPClassifier(hidden_layer_sizes=(96,), n_classes=C, random_state=seed,
                              max_steps=steps).fit(X, y)


def _all_scores(target, refs, Xc, yc, Xz, yz, Xsh, ysh, msh, rng):
    """Scores of every attack against ``target`` on candidates (Xc, yc)."""
    px = true_class_probability(target.predict_proba(Xc), yc)
    pz = true_class_probability(target.predict_proba(Xz), yz)
    pxr = np.stack([true_class_probability(r.predict_proba(Xc), yc) for r, _ in refs])
    pzr = np.stack([true_class_probability(r.predict_proba(Xz), yz) for r, _ in refs])
    aug = gaussian_copies(Xc, 4, 0.5, rng)
    aug_labels = target.predict(aug.reshape(-1, D)).reshape(4, len(yc))
    # Shokri: each reference is a shadow model with known members msh[j]
    feats = [shadow_features(true_class_probability(r.predict_proba(Xsh), ysh),
                             r.predict_proba(Xsh)) for r, _ in refs]
    members = [m for _, m in refs]
    shadow = shokri_attack(np.concatenate(feats), np.concatenate(members),
                           shadow_features(px, target.predict_proba(Xc)))
    pred = target.predict(Xc)
    hits = np.stack([r.predict(Xc) == yc for r, _ in refs])
    lira_labels = lira_labels_offline(correct_label_counts(pred[None], yc), 1, pxr, hits)
    return {"loss": loss_attack(px), "lira": lira_offline(px, pxr), "lira-labels": lira_labels,
            "rmia": rmia_offline(px, pxr, pz, pzr), "shadow": shadow,
            "gap": gap_attack(target.predict(Xc), yc), "aug": augmentation_attack(aug_labels, yc)}


def _shadow_refs(rng, X_pool, y_pool, n_refs=3, steps=300):
    refs = []
    for j in range(n_refs):
        member = np.zeros(len(y_pool), dtype=bool)
        member[rng.choice(len(y_pool), len(y_pool) // 2, replace=False)] = True
        refs.append((_mlp(100 + j, X_pool[member], y_pool[member], steps), member))
    return refs


# --------------------------------------------------------------------------- metrics

def test_roc_matches_sklearn_and_tpr_at_fpr_on_a_known_curve():
    # 100 non-members, 100 members; the top score is a non-member (FPR 1 % reached at once),
    # then 30 members, then the rest interleaved
    scores = np.r_[1000.0, np.linspace(900, 871, 30), np.arange(169.0)[::-1]]
    membership = np.r_[0, np.ones(30), np.tile([0, 1], 70), np.zeros(29)].astype(int)
    assert membership.sum() == 100 and len(membership) == 200
    res = evaluate_attack("known", scores, membership)
    assert res.tpr_at_1pct_fpr == pytest.approx(0.30)
    assert res.tpr_at_01pct_fpr is None  # 0.1 % FPR is not resolved by 100 non-members
    assert tpr_at_fpr(res.fpr, res.tpr, 0.001) == 0.0  # no member above the top non-member
    assert res.auc == pytest.approx(roc_auc_score(membership, scores))
    fpr, tpr, _ = roc_curve(membership, scores, drop_intermediate=False)
    ours_f, ours_t = roc_curve_points(scores, membership)
    np.testing.assert_allclose(ours_f, fpr)
    np.testing.assert_allclose(ours_t, tpr)
    assert tpr_at_fpr(np.array([0, 0.005, 0.02, 1]), np.array([0, 0.2, 0.5, 1]), 0.01) == 0.2
    d = res.to_dict(max_points=20)
    assert len(d["roc_fpr"]) <= 20 and d["roc_fpr"][0] == 0 and d["roc_fpr"][-1] == 1
    assert d["n_members"] == 100 and d["fpr_resolution"] == pytest.approx(0.01)


def test_ties_and_constant_scores_give_chance():
    res = evaluate_attack("const", np.ones(50), np.r_[np.ones(25), np.zeros(25)])
    assert res.auc == 0.5
    np.testing.assert_allclose(res.fpr, [0, 1])


def test_gap_attack_auc_equals_half_plus_half_accuracy_gap():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 400)
    pred = y.copy()
    membership = np.r_[np.ones(200), np.zeros(200)]
    wrong_in = rng.choice(200, 10, replace=False)  # train accuracy 0.95
    wrong_out = 200 + rng.choice(200, 60, replace=False)  # test accuracy 0.70
    pred[np.r_[wrong_in, wrong_out]] = (y[np.r_[wrong_in, wrong_out]] + 1) % 3
    res = evaluate_attack("gap", gap_attack(pred, y), membership)
    assert res.auc == pytest.approx(0.5 + (0.95 - 0.70) / 2)


@pytest.mark.parametrize("bad", [
    lambda: evaluate_attack("x", np.ones(3), np.ones(4)),
    lambda: evaluate_attack("x", np.ones(4), np.ones(4)),
    lambda: evaluate_attack("x", np.array([0.1, np.nan, 0.2, 0.3]), np.array([1, 0, 1, 0])),
    lambda: evaluate_attack("x", np.ones(4), np.array([2, 0, 1, 0])),
    lambda: rmia_offline(np.ones(3), np.ones((2, 3)), np.ones(2), np.ones((2, 2)), a=1.5),
    lambda: true_class_probability(np.ones((3, 2)), np.array([0, 1, 2])),
    lambda: gaussian_copies(np.ones((2, 2)), 0, 0.5, np.random.default_rng(0)),
])
def test_bad_attack_inputs_raise_clear_errors(bad):
    with pytest.raises(FedLabelsError):
        bad()


def test_output_shapes_and_label_signals():
    y = np.array([0, 1, 2, 1])
    labels = np.array([[0, 1, 0, 1], [0, 0, 2, 1], [0, 1, 2, 0]])
    np.testing.assert_allclose(label_frequency(labels, y), (np.array([3, 2, 2, 2]) + .5) / 4)
    np.testing.assert_allclose(gap_attack(labels, y), [1, 2 / 3, 2 / 3, 2 / 3])
    assert augmentation_attack(labels[None].repeat(2, 0), y).shape == (4,)
    copies = gaussian_copies(np.zeros((5, 3)), 4, np.array([0.0, 1.0, 2.0]),
                             np.random.default_rng(0))
    assert copies.shape == (4, 5, 3) and np.all(copies[..., 0] == 0)
    scores = rmia_offline(np.array([0.9, 0.1]), np.full((2, 2), 0.5), np.linspace(.1, .9, 9),
                          np.full((2, 9), 0.5))
    assert scores.shape == (2,) and scores.min() >= 0 and scores.max() <= 1
    assert scores[0] > scores[1]
    assert lira_offline(np.array([0.9, 0.5]), np.full((3, 2), 0.5)).shape == (2,)


# --------------------------------------------------------------------------- sanity tests

def test_memorised_random_labels_are_detected():
    """A model that memorises random labels: LOSS, LiRA and RMIA reach AUC >= 0.8."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1100, D)).astype(np.float32)
    y = rng.integers(0, C, len(X))
    Xm, ym, Xn, yn = X[:200], y[:200], X[200:400], y[200:400]
    Xz, yz, Xpool, ypool = X[400:700], y[400:700], X[700:1100], y[700:1100]
    target = _mlp(0, Xm, ym)
    refs = _shadow_refs(rng, Xpool, ypool)
    Xc, yc = np.concatenate([Xm, Xn]), np.concatenate([ym, yn])
    membership = np.r_[np.ones(200), np.zeros(200)]
    scores = _all_scores(target, refs, Xc, yc, Xz, yz, Xpool, ypool, None, rng)
    aucs = {k: evaluate_attack(k, s, membership).auc for k, s in scores.items()}
    assert aucs["loss"] >= 0.8 and aucs["rmia"] >= 0.8 and aucs["lira"] >= 0.8, aucs
    assert aucs["shadow"] >= 0.7 and aucs["gap"] >= 0.7 and aucs["aug"] >= 0.7, aucs
    assert aucs["lira-labels"] >= 0.7, aucs
    res = evaluate_attack("rmia", scores["rmia"], membership)
    assert res.tpr_at_1pct_fpr > 0.01  # better than chance at low FPR


def test_unseen_members_give_chance():
    """Members and non-members from one distribution, neither trained on: AUC = 0.5 ± 0.05."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((C, D)) * 1.5
    yall = rng.integers(0, C, 3400)
    Xall = (centres[yall] + rng.standard_normal((3400, D)) * 1.5).astype(np.float32)
    target = _mlp(0, Xall[:200], yall[:200])
    refs = _shadow_refs(rng, Xall[200:600], yall[200:600], n_refs=2)
    Xc, yc = Xall[600:3000], yall[600:3000]  # "members" 1,200, non-members 1,200: all unseen
    membership = np.r_[np.ones(1200), np.zeros(1200)]
    scores = _all_scores(target, refs, Xc, yc, Xall[3000:], yall[3000:], Xall[200:600],
                         yall[200:600], None, rng)
    for name, s in scores.items():
        auc = evaluate_attack(name, s, membership).auc
        assert abs(auc - 0.5) <= 0.05, (name, auc)
