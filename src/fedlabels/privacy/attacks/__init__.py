"""Membership-inference attacks (numpy / scikit-learn): LOSS, LiRA, RMIA, Shokri, label-only.

The functions score candidates from what an attacker observed; :func:`evaluate_attack` turns
scores into ROC AUC (the papers' VUL), TPR at 1 % / 0.1 % FPR and the ROC curve points.
:mod:`fedlabels.audit` runs them against what a federated method's server receives.
"""

from fedlabels.privacy.attacks.metrics import (
    AttackResult,
    evaluate_attack,
    roc_auc,
    roc_curve_points,
    thin_curve,
    tpr_at_fpr,
)
from fedlabels.privacy.attacks.scores import (
    augmentation_attack,
    fit_shokri,
    gap_attack,
    gaussian_copies,
    label_frequency,
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
    "evaluate_attack",
    "fit_shokri",
    "gap_attack",
    "gaussian_copies",
    "label_frequency",
    "lira_offline",
    "logit_confidence",
    "loss_attack",
    "population_threshold",
    "rmia_offline",
    "roc_auc",
    "roc_curve_points",
    "shadow_features",
    "shokri_attack",
    "thin_curve",
    "tpr_at_fpr",
    "true_class_probability",
]
