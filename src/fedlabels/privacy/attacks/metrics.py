"""ROC metrics of a membership-inference attack: AUC (= VUL), TPR at low FPR, curve points."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError


def check_membership(scores: np.ndarray, membership: np.ndarray,
                     min_per_class: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Validate a score vector and a 0/1 membership vector of the same length."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    m = np.asarray(membership).ravel()
    if s.shape != m.shape:
        raise FedLabelsError(f"scores ({s.size}) and membership ({m.size}) must have the same "
                             "length: one membership score per candidate.")
    if not np.isin(m, (0, 1, True, False)).all():
        raise FedLabelsError("membership must be 0/1 (1 = member); got values "
                             f"{np.unique(m)[:5].tolist()}.")
    m = m.astype(bool)
    n_in, n_out = int(m.sum()), int((~m).sum())
    if min(n_in, n_out) < min_per_class:
        raise FedLabelsError(f"an attack needs at least {min_per_class} member(s) and "
                             f"non-member(s); got {n_in} members and {n_out} non-members.")
    if not np.isfinite(s).all():
        raise FedLabelsError(f"{int((~np.isfinite(s)).sum())} membership scores are not "
                             "finite (NaN or inf); check the target's outputs.")
    return s, m


def roc_curve_points(scores: np.ndarray, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FPR and TPR at every distinct threshold (higher score = 'member'), from (0, 0) to (1, 1).

    Ties are one threshold, so a constant score gives the chance diagonal's endpoints only.
    """
    s, m = check_membership(scores, membership)
    order = np.argsort(-s, kind="mergesort")
    s_sorted, m_sorted = s[order], m[order]
    tp = np.cumsum(m_sorted)
    fp = np.cumsum(~m_sorted)
    last_of_tie = np.r_[np.flatnonzero(np.diff(s_sorted) != 0), len(s_sorted) - 1]
    tpr = np.r_[0.0, tp[last_of_tie] / m.sum()]
    fpr = np.r_[0.0, fp[last_of_tie] / (~m).sum()]
    return fpr, tpr


def roc_auc(scores: np.ndarray, membership: np.ndarray) -> float:
    """Area under the ROC curve of the attack's ``scores`` against the true ``membership``
    (1: a member); ties count one half (Mann-Whitney U / (n_in n_out))."""
    s, m = check_membership(scores, membership)
    from scipy.stats import rankdata

    ranks = rankdata(s)  # average ranks for ties
    n_in, n_out = m.sum(), (~m).sum()
    return float((ranks[m].sum() - n_in * (n_in + 1) / 2) / (n_in * n_out))


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """The largest TPR among ROC points with FPR <= ``target`` (no interpolation)."""
    if not 0 <= target <= 1:
        raise FedLabelsError(f"target FPR must lie in [0, 1], got {target}.")
    ok = np.asarray(fpr) <= target + 1e-12
    return float(np.max(np.asarray(tpr)[ok])) if ok.any() else 0.0


def thin_curve(fpr: np.ndarray, tpr: np.ndarray, max_points: int = 200
               ) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` ROC points, endpoints kept (for JSON and plots)."""
    if len(fpr) <= max_points:
        return fpr, tpr
    idx = np.unique(np.round(np.linspace(0, len(fpr) - 1, max_points)).astype(int))
    return fpr[idx], tpr[idx]


@dataclass
class AttackResult:
    """ROC summary of one attack on one target.

    ``auc`` is the paper's VUL; ``tpr_at_1pct_fpr`` / ``tpr_at_01pct_fpr`` are the TPR at
    1 % and 0.1 % FPR, ``None`` where 1 / #non-members (``fpr_resolution``) cannot resolve
    that FPR. ``scores`` / ``membership`` are kept for the bootstrap (not serialised).
    """

    attack: str
    auc: float
    tpr_at_1pct_fpr: float | None
    tpr_at_01pct_fpr: float | None
    fpr: np.ndarray
    tpr: np.ndarray
    n_members: int
    n_nonmembers: int
    details: dict[str, Any] = field(default_factory=dict)
    scores: np.ndarray | None = field(default=None, repr=False)
    membership: np.ndarray | None = field(default=None, repr=False)

    @property
    def fpr_resolution(self) -> float:
        return 1.0 / self.n_nonmembers

    def to_dict(self, max_points: int = 101) -> dict[str, Any]:
        fpr, tpr = thin_curve(self.fpr, self.tpr, max_points)
        return {"attack": self.attack, "auc": self.auc,
                "tpr_at_1pct_fpr": self.tpr_at_1pct_fpr,
                "tpr_at_01pct_fpr": self.tpr_at_01pct_fpr,
                "n_members": self.n_members, "n_nonmembers": self.n_nonmembers,
                "fpr_resolution": self.fpr_resolution,
                "roc_fpr": [round(float(v), 5) for v in fpr],
                "roc_tpr": [round(float(v), 5) for v in tpr], **self.details}


def resolvable(target: float, n_nonmembers: int) -> bool:
    """Whether ``n_nonmembers`` resolve FPR ``target``: target >= 1 / N."""
    return target * n_nonmembers >= 1 - 1e-9


def resolved_tpr(fpr: np.ndarray, tpr: np.ndarray, target: float,
                 n_nonmembers: int) -> float | None:
    """TPR at FPR ``target``, or ``None`` when ``target`` < 1 / ``n_nonmembers`` (unresolved)."""
    return tpr_at_fpr(fpr, tpr, target) if resolvable(target, n_nonmembers) else None


def evaluate_attack(name: str, scores: np.ndarray, membership: np.ndarray,
                    **details: Any) -> AttackResult:
    """ROC AUC, TPR at 1 % / 0.1 % FPR (where resolved) and the ROC points of ``scores``."""
    s, m = check_membership(scores, membership)
    fpr, tpr = roc_curve_points(s, m)
    n_out = int((~m).sum())
    return AttackResult(attack=name, auc=roc_auc(s, m),
                        tpr_at_1pct_fpr=resolved_tpr(fpr, tpr, 0.01, n_out),
                        tpr_at_01pct_fpr=resolved_tpr(fpr, tpr, 0.001, n_out), fpr=fpr,
                        tpr=tpr, n_members=int(m.sum()), n_nonmembers=n_out, details=details,
                        scores=s, membership=m)
