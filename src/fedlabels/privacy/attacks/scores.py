"""Membership scores: LOSS, LiRA (offline), RMIA (offline), Shokri shadow models, label-only.

Every attack maps what the attacker observed about a target (probabilities or hard labels on
the candidates) and, where it needs them, the outputs of its own reference / shadow models
(trained on attacker data disjoint from the target's) to one score per candidate; higher means
"more likely a member". All functions are vectorised over candidates.

References: Yeom et al. 2018 (LOSS); Carlini et al. 2022 (LiRA); Zarifzadeh, Liu & Shokri 2024
(RMIA); Shokri et al. 2017 (shadow models); Choquette-Choo et al. 2021 and Li & Zhang 2021
(label-only: gap, augmentation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError

EPS = 1e-6


# ------------------------------------------------------------------------------ signals

def true_class_probability(probs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """p(y | x) from an (n, C) probability matrix, clipped to [EPS, 1 - EPS]."""
    probs = np.asarray(probs, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if probs.ndim != 2 or len(probs) != len(y):
        raise FedLabelsError(f"probabilities must be (n, C) with n = len(y) = {len(y)}; got "
                             f"shape {probs.shape}.")
    if len(y) and (y.min() < 0 or y.max() >= probs.shape[1]):
        raise FedLabelsError(f"labels must lie in [0, {probs.shape[1]}); got range "
                             f"[{y.min()}, {y.max()}].")
    return np.clip(probs[np.arange(len(y)), y], EPS, 1 - EPS)


def logit_confidence(p_true: np.ndarray) -> np.ndarray:
    """LiRA's logit-scaled confidence phi = log(p / (1 - p))."""
    p = np.clip(np.asarray(p_true, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def correct_label_counts(labels: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per candidate, how many of the r releases in ``labels`` (r, n) are correct."""
    labels = np.atleast_2d(np.asarray(labels))
    return np.asarray((labels == np.asarray(y)[None, :]).sum(axis=0))


def label_frequency(labels: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Smoothed fraction of hard-label releases that are correct: (k + 1/2) / (r + 1).

    ``labels`` is (r, n): r releases (rounds, or perturbed copies) of n labels. This turns
    label-only observations into a probability-like signal for LOSS / RMIA / Shokri.
    """
    r = np.atleast_2d(np.asarray(labels)).shape[0]
    return (correct_label_counts(labels, y) + 0.5) / (r + 1.0)


# ------------------------------------------------------------------------------ attacks

def loss_attack(p_true: np.ndarray) -> np.ndarray:
    """LOSS / population attack (Yeom et al.): score = p(y|x) = exp(-cross-entropy).

    The threshold that reaches a given FPR can be calibrated on population data with
    :func:`population_threshold`; the ROC is threshold-free.
    """
    return np.asarray(p_true, dtype=np.float64).copy()


def population_threshold(population_scores: np.ndarray, fpr: float) -> float:
    """The score threshold that flags a fraction ``fpr`` of population (non-member) points."""
    if not 0 < fpr < 1:
        raise FedLabelsError(f"fpr must lie in (0, 1), got {fpr}.")
    return float(np.quantile(np.asarray(population_scores, dtype=np.float64), 1 - fpr))


def lira_offline(p_target: np.ndarray, p_refs_out: np.ndarray,
                 per_example_variance_min_refs: int = 8) -> np.ndarray:
    """Offline LiRA (Carlini et al. 2022): how far the target's phi lies above the OUT Gaussian.

    Parameters
    ----------
    p_target : (n,) p(y|x) of the target model on the candidates.
    p_refs_out : (k, n) p(y|x) of k reference models that did not train on the candidates.
    per_example_variance_min_refs : with fewer references the variance is pooled over all
        candidates (Carlini et al.'s "fixed variance", more stable with few models).

    Returns
    -------
    (n,) the one-sided z-score (phi_target - mu_out) / sigma_out (monotone in LiRA's
    likelihood-ratio test statistic, so the ROC is the same).
    """
    refs = np.atleast_2d(np.asarray(p_refs_out, dtype=np.float64))
    phi_t = logit_confidence(p_target)
    if refs.shape[1] != len(phi_t):
        raise FedLabelsError(f"reference outputs cover {refs.shape[1]} candidates, the target "
                             f"{len(phi_t)}.")
    phi_r = logit_confidence(refs)
    mu = phi_r.mean(axis=0)
    if refs.shape[0] >= max(2, per_example_variance_min_refs):
        sigma = phi_r.std(axis=0, ddof=1)
    else:
        sigma = np.full_like(mu, (phi_r - mu).std() if refs.shape[0] > 1 else phi_r.std())
    return (phi_t - mu) / np.maximum(sigma, 1e-3)


def lira_labels_offline(n_correct: np.ndarray, n_releases: int, p_refs_out: np.ndarray,
                        correct_refs_out: np.ndarray, prior_strength: float | None = None
                        ) -> np.ndarray:
    """Offline LiRA for hard labels: score = -log P_OUT(K >= k), a one-sided p-value.

    The target released r hard labels of each candidate and k of them were correct. Under OUT
    (the target did not train on x) each release is correct with an unknown probability q(x),
    which the attacker learns from its OUT reference models: reference j labels x correctly
    or not (``correct_refs_out``), and the references' mean p(y|x) p̄ sets a Beta prior of
    strength s (``prior_strength``, default: the number of references, so the soft and the
    hard evidence weigh equally) around which those counts update. With c of n references
    correct, q ~ Beta(c + s·p̄, n - c + s·(1 - p̄)) and K ~ BetaBinomial(r, ·) (a Bernoulli
    for r = 1). Members are labelled correctly more often than OUT models do, so a small
    P_OUT(K >= k) is evidence of membership. A target whose labels are all wrong (k = 0)
    scores 0, and a constant target scores only the references' difficulty, which carries
    no membership information when members and non-members come from one distribution.

    Parameters
    ----------
    n_correct : (n,) k, correct releases per candidate (0..r).
    n_releases : r >= 1.
    p_refs_out : (m, n) reference models' p(y|x) on the candidates.
    correct_refs_out : (m, n) whether each reference's hard label (argmax) is correct.
    prior_strength : s > 0, pseudo-count of the prior centred on the soft mean.

    The r releases are treated as exchangeable draws given q; releases of one model over
    rounds are correlated, which changes the scale of the score but not its ranking among
    candidates with the same k.
    """
    from scipy.stats import betabinom

    k = np.asarray(n_correct, dtype=np.int64)
    p_refs = np.atleast_2d(np.asarray(p_refs_out, dtype=np.float64))
    hits = np.atleast_2d(np.asarray(correct_refs_out, dtype=bool))
    strength = float(len(p_refs) if prior_strength is None else prior_strength)
    if n_releases < 1 or strength <= 0:
        raise FedLabelsError(f"label LiRA needs r >= 1 releases and a prior strength > 0; got "
                             f"r={n_releases}, strength={strength}.")
    if p_refs.shape != hits.shape or p_refs.shape[1] != len(k):
        raise FedLabelsError(f"reference outputs {p_refs.shape} / {hits.shape} must be "
                             f"(references, {len(k)} candidates).")
    if len(k) and (k.min() < 0 or k.max() > n_releases):
        raise FedLabelsError(f"correct-label counts must lie in [0, {n_releases}].")
    p_bar = np.clip(p_refs.mean(axis=0), EPS, 1 - EPS)
    c = hits.sum(axis=0)
    alpha = c + strength * p_bar
    beta = (len(hits) - c) + strength * (1 - p_bar)
    return np.asarray(-betabinom.logsf(k - 1, n_releases, alpha, beta))


def rmia_offline(px_target: np.ndarray, px_refs: np.ndarray, pz_target: np.ndarray,
                 pz_refs: np.ndarray, a: float = 0.3, gamma: float = 1.0) -> np.ndarray:
    """Offline RMIA (Zarifzadeh et al. 2024): pairwise likelihood ratios against population z.

    score(x) = Pr_z[ (p(x|θ) / p(x)) / (p(z|θ) / p(z)) > γ ], with the offline estimate
    p(x) = ((1 + a) · mean_ref p(x|θ_ref) + (1 − a)) / 2 over OUT reference models.

    Parameters
    ----------
    px_target, pz_target : p(y|x) of the target on the candidates x and the population z.
    px_refs, pz_refs : (k, n) and (k, n_z) the same for k reference models.
    a : offline scaling in [0, 1].
    gamma : ratio threshold γ >= 1.

    Returns
    -------
    (n,) scores in [0, 1]: (count of dominated z + r / (1 + r)) / (n_z + 1), where r is the
    candidate's own ratio. The count is a step function of r, so the second term only breaks
    its ties (without it, members that dominate every z tie at 1 and TPR at low FPR is lost).
    """
    if not 0 <= a <= 1:
        raise FedLabelsError(f"RMIA offline parameter a must lie in [0, 1], got {a}.")
    if gamma < 1:
        raise FedLabelsError(f"RMIA gamma must be >= 1, got {gamma}.")
    px_refs = np.atleast_2d(np.asarray(px_refs, dtype=np.float64))
    pz_refs = np.atleast_2d(np.asarray(pz_refs, dtype=np.float64))
    if len(pz_target) < 1:
        raise FedLabelsError("RMIA needs at least one population point z.")

    def prior(p_refs: np.ndarray) -> np.ndarray:
        return ((1 + a) * p_refs.mean(axis=0) + (1 - a)) / 2

    ratio_x = np.asarray(px_target, dtype=np.float64) / prior(px_refs)
    ratio_z = np.sort(np.asarray(pz_target, dtype=np.float64) / prior(pz_refs))
    # count z with ratio_x / ratio_z > gamma  <=>  ratio_z < ratio_x / gamma
    count = np.searchsorted(ratio_z, ratio_x / gamma, side="left")
    return (count + ratio_x / (1 + ratio_x)) / (len(ratio_z) + 1)


def gap_attack(pred_labels: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Label-only gap attack: 'member' iff correctly classified (mean over releases if 2-D)."""
    labels = np.atleast_2d(np.asarray(pred_labels))
    return (labels == np.asarray(y)[None, :]).mean(axis=0)


def augmentation_attack(aug_labels: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Label-only augmentation attack: fraction of perturbed copies still labelled correctly.

    ``aug_labels`` is (..., n): any number of leading axes (copies, rounds) of hard labels.
    """
    labels = np.asarray(aug_labels)
    flat = labels.reshape(-1, labels.shape[-1])
    return (flat == np.asarray(y)[None, :]).mean(axis=0)


def gaussian_copies(X: np.ndarray, k: int, sigma: float | np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    """k noise-perturbed copies of each row, shape (k, n, d) (float32).

    ``sigma`` is the noise standard deviation, one value or one per feature.
    """
    if k < 1:
        raise FedLabelsError(f"the number of perturbed copies k must be >= 1, got {k}.")
    X = np.asarray(X, dtype=np.float32)
    noise = rng.standard_normal((k, *X.shape)).astype(np.float32)
    return X[None] + np.asarray(sigma, dtype=np.float32) * noise


# ------------------------------------------------------------------------------ Shokri

def shadow_features(p_signal: np.ndarray, probs: np.ndarray | None = None,
                    aug_signal: np.ndarray | None = None) -> np.ndarray:
    """Attack-model features: the true-class signal, its logit, and (soft outputs) the sorted
    top-3 probabilities and entropy, or (label-only) the augmentation robustness."""
    cols = [np.asarray(p_signal, dtype=np.float64), logit_confidence(p_signal)]
    if probs is not None:
        p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1.0)
        top = -np.sort(-p, axis=1)[:, : min(3, p.shape[1])]
        cols += [*top.T, -(p * np.log(p)).sum(axis=1)]
    if aug_signal is not None:
        cols.append(np.asarray(aug_signal, dtype=np.float64))
    return np.column_stack(cols)


def fit_shokri(shadow_X: np.ndarray, shadow_membership: np.ndarray, seed: int = 0) -> Any:
    """The Shokri attack classifier (gradient boosting) fitted on shadow features."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    shadow_membership = np.asarray(shadow_membership).astype(int)
    if len(np.unique(shadow_membership)) < 2:
        raise FedLabelsError("the shadow data must contain members and non-members.")
    clf = HistGradientBoostingClassifier(max_iter=100, max_depth=3, learning_rate=0.1,
                                         l2_regularization=1.0, random_state=seed)
    return clf.fit(shadow_X, shadow_membership)


def shokri_attack(shadow_X: np.ndarray, shadow_membership: np.ndarray,
                  target_X: np.ndarray, seed: int = 0) -> np.ndarray:
    """Shokri et al. (2017): fit an attack classifier on shadow models' outputs on their own
    members / non-members, and score the target's outputs with it.

    Parameters
    ----------
    shadow_X : (n_s, f) features of the shadow models' outputs (see :func:`shadow_features`).
    shadow_membership : (n_s,) 1 if the shadow model trained on that record.
    target_X : (n, f) the same features of the target's outputs on the candidates.
    seed : seeds the attack classifier (:func:`fit_shokri`).
    """
    if shadow_X.shape[1] != target_X.shape[1]:
        raise FedLabelsError(f"shadow features have {shadow_X.shape[1]} columns, the target's "
                             f"{target_X.shape[1]}.")
    return fit_shokri(shadow_X, shadow_membership, seed).predict_proba(target_X)[:, 1]
