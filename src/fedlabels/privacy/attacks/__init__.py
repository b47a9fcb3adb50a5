"""Membership-inference attacks (numpy / scikit-learn): LOSS, LiRA, RMIA, Shokri, label-only.

The functions score candidates from what an attacker observed; :func:`evaluate_attack` turns
scores into ROC AUC (the papers' VUL), TPR at 1 % / 0.1 % FPR and the ROC curve points;
:mod:`.bootstrap` gives their intervals.
:mod:`fedlabels.audit` runs them against what a federated method's server receives.
"""

from fedlabels.privacy.attacks.bootstrap import (
    bootstrap_vul_ci,
    bootstrap_vul_difference,
    draw_resamples,
    percentile_interval,
    vul_difference,
    weighted_auc,
    weighted_tpr_at_fpr,
)
from fedlabels.privacy.attacks.metrics import (
    AttackResult,
    evaluate_attack,
    resolvable,
    resolved_tpr,
    roc_auc,
    roc_curve_points,
    thin_curve,
    tpr_at_fpr,
)
from fedlabels.privacy.attacks.scores import (
    augmentation_attack,
    correct_label_counts,
    fit_shokri,
    gap_attack,
    gaussian_copies,
    label_frequency,
    lira_labels_offline,
    lira_offline,
    logit_confidence,
    loss_attack,
    population_threshold,
    rmia_offline,
    shadow_features,
    shokri_attack,
    true_class_probability,
)

ATTACKS = ("loss", "lira", "rmia", "shadow", "label-only")

__all__ = [
    "ATTACKS",
    "AttackResult",
    "augmentation_attack",
    "bootstrap_vul_ci",
    "bootstrap_vul_difference",
    "correct_label_counts",
    "draw_resamples",
    "evaluate_attack",
    "fit_shokri",
    "gap_attack",
    "gaussian_copies",
    "label_frequency",
    "lira_labels_offline",
    "lira_offline",
    "logit_confidence",
    "loss_attack",
    "percentile_interval",
    "population_threshold",
    "resolvable",
    "resolved_tpr",
    "rmia_offline",
    "roc_auc",
    "roc_curve_points",
    "shadow_features",
    "shokri_attack",
    "thin_curve",
    "tpr_at_fpr",
    "true_class_probability",
    "vul_difference",
    "weighted_auc",
    "weighted_tpr_at_fpr",
]
