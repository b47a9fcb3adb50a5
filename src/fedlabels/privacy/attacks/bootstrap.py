"""Bootstrap intervals for audit summaries: VUL (max over attacks and views of a mean AUC over
clients), per-attack AUC and TPR at a low FPR, and the difference of two methods' VULs.

Design (docs/audit.md, "Statistics"). The records are the sampling units: each audited
client's members are an independent sample, and the non-members are *one* sample shared by
every client. A replicate therefore resamples each client's members independently and the
non-members once, with the same non-member draw for every client, attack and view (so the
per-client AUCs stay paired as in the estimate), then recomputes every AUC, the mean over
clients, and the maximum over attacks and views: the selection effect of that maximum is
inside the interval. Clients are fixed (the federation's), not resampled. The interval is the
basic bootstrap interval of the replicates (bias-corrected: see :func:`basic_interval`).

Resampling is represented by multiplicity weights (how often each record was drawn), so an
AUC replicate is a weighted Mann-Whitney statistic computed in O(B · n) with sorted scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.core.intervals import normal_quantile
from fedlabels.privacy.attacks.metrics import resolvable

#: a client's (member scores, non-member scores); non-member rows must be the same records,
#: in the same order, for every client of one audit (they are shared)
ClientScores = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Resamples:
    """Multiplicity weights of ``n_boot`` bootstrap replicates."""

    members: dict[int, np.ndarray]  # client -> (B, n_members of that client)
    nonmembers: np.ndarray  # (B, n_nonmembers), shared by all clients

    @property
    def n_boot(self) -> int:
        return int(self.nonmembers.shape[0])


def draw_resamples(n_members: Mapping[int, int], n_nonmembers: int, n_boot: int,
                   seed: int = 0) -> Resamples:
    """Seeded multinomial resampling weights: members per client, non-members jointly."""
    if n_boot < 1:
        raise FedLabelsError(f"the bootstrap needs n_boot >= 1 replicates, got {n_boot}.")
    if n_nonmembers < 1 or min(n_members.values(), default=0) < 1:
        raise FedLabelsError("the bootstrap needs at least one member per client and one "
                             "non-member.")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xB007]))

    def weights(n: int) -> np.ndarray:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64)

    nonmembers = weights(n_nonmembers)
    return Resamples({c: weights(n) for c, n in sorted(n_members.items())}, nonmembers)


def weighted_auc(member_scores: np.ndarray, nonmember_scores: np.ndarray,
                 w_members: np.ndarray, w_nonmembers: np.ndarray) -> np.ndarray:
    """(B,) ROC AUCs (ties count one half) of B weighted samples, weights (B, n) each."""
    s = np.asarray(member_scores, dtype=np.float64)
    t = np.sort(np.asarray(nonmember_scores, dtype=np.float64))
    order = np.argsort(nonmember_scores, kind="mergesort")
    wn = np.atleast_2d(w_nonmembers)[:, order]
    wm = np.atleast_2d(w_members)
    cum = np.concatenate([np.zeros((len(wn), 1)), np.cumsum(wn, axis=1)], axis=1)
    lo, hi = np.searchsorted(t, s, side="left"), np.searchsorted(t, s, side="right")
    below = cum[:, lo] + 0.5 * (cum[:, hi] - cum[:, lo])  # weighted non-members below s_i
    return np.asarray((wm * below).sum(axis=1) / (wm.sum(axis=1) * wn.sum(axis=1)))


def weighted_tpr_at_fpr(member_scores: np.ndarray, nonmember_scores: np.ndarray,
                        w_members: np.ndarray, w_nonmembers: np.ndarray,
                        target: float) -> np.ndarray:
    """(B,) largest TPR among ROC thresholds with FPR <= ``target`` (no interpolation), as
    :func:`fedlabels.privacy.attacks.tpr_at_fpr` on each weighted sample."""
    s = np.asarray(member_scores, dtype=np.float64)
    t = np.asarray(nonmember_scores, dtype=np.float64)
    wn, wm = np.atleast_2d(w_nonmembers), np.atleast_2d(w_members)
    order = np.argsort(-t, kind="mergesort")
    levels, starts = np.unique(-t[order], return_index=True)  # distinct scores, descending
    per_level = np.add.reduceat(wn[:, order], starts, axis=1)
    fp = np.cumsum(per_level, axis=1)  # weighted non-members scoring >= each level
    allowed = target * wn.sum(axis=1, keepdims=True) + 1e-9
    first_bad = (fp > allowed).argmax(axis=1)  # highest level whose inclusion breaks the FPR
    none_bad = ~(fp > allowed).any(axis=1)
    # members strictly above that level are flagged; sorted descending, count via searchsorted
    s_order = np.argsort(-s, kind="mergesort")
    cum_m = np.concatenate([np.zeros((len(wm), 1)), np.cumsum(wm[:, s_order], axis=1)], axis=1)
    above = np.searchsorted(np.sort(s), -levels, side="right")  # members <= level
    n_above = len(s) - above[first_bad]
    tp = cum_m[np.arange(len(wm)), n_above]
    tp = np.where(none_bad, cum_m[:, -1], tp)
    return np.asarray(tp / wm.sum(axis=1))


def basic_interval(estimate: float, values: np.ndarray, level: float = 0.95) -> list[float]:
    """[2θ̂ - q_hi, 2θ̂ - q_lo] (the basic bootstrap interval), clipped to [0, 1].

    It subtracts the bootstrap's estimate of the estimator's bias, which matters for a
    maximum over noisy AUCs: a replicate's maximum exceeds the estimate's maximum on average
    by about as much as the estimate exceeds the true maximum.
    """
    lo, hi = percentile_interval(values, level)
    return [float(np.clip(2 * estimate - hi, 0, 1)), float(np.clip(2 * estimate - lo, 0, 1))]


def perfect_separation_floor(n_members: Mapping[int, int], n_nonmembers: int, n_pairs: int,
                             level: float = 0.95) -> float:
    """A lower confidence bound on a mean AUC over clients that the sample shows as 1.

    Every member then outscores every non-member, so each client's first k = min(members,
    non-members) member / non-member pairs (paired by position, which is independent of the
    scores) are k independent concordant trials of probability AUC_c: AUC_c ≥ a^(1/k), the
    one-sided Clopper-Pearson bound at a = (1 - level) / 2 / (clients · ``n_pairs``), holds
    for every client and every one of the ``n_pairs`` attack / view pairs at once (Bonferroni;
    the non-members are shared, so the clients are dependent). The bootstrap cannot give it:
    every replicate of a perfectly separated sample is 1 again, and its interval is [1, 1].
    """
    a = (1 - level) / 2 / (len(n_members) * max(n_pairs, 1))
    return float(np.mean([a ** (1 / min(n, n_nonmembers)) for n in n_members.values()]))


def percentile_interval(values: np.ndarray, level: float = 0.95) -> list[float]:
    """[lo, hi] percentile interval of bootstrap replicates."""
    if not 0 < level < 1:
        raise FedLabelsError(f"the interval level must lie in (0, 1), got {level}.")
    lo, hi = np.quantile(np.asarray(values, dtype=np.float64), [(1 - level) / 2,
                                                                 (1 + level) / 2])
    return [float(lo), float(hi)]


def bootstrap_vul_ci(scores: Mapping[str, Mapping[str, Mapping[int, ClientScores]]], *,
                     n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                     fpr_targets: tuple[float, ...] = (0.01, 0.001)) -> dict[str, Any]:
    """Bootstrap intervals of VUL = max over attacks and views of the mean AUC over clients.

    Parameters
    ----------
    scores : ``scores[attack][view][client] = (member_scores, nonmember_scores)``; every
        client's non-member rows are the same shared records in the same order.
    n_boot, seed, level : replicates, resampling seed, interval level.
    fpr_targets : FPRs at which the TPR gets an interval (only where 1 / N resolves them).

    Returns
    -------
    ``{"vul_ci": [lo, hi], "n_boot": B, "level": level, "attacks": {attack: {"auc_ci",
    "tpr_ci": {target: [lo, hi] or None}}}}``. An attack's AUC replicate is the maximum
    over its views of the mean over clients; its TPR replicate is the mean TPR over
    clients at the view that maximises that replicate's AUC (the view selection as in the
    estimate); ``vul_ci`` bootstraps the maximum over all attacks and views. AUC intervals
    are basic intervals (:func:`basic_interval`, bias-corrected for the maximum), TPR
    intervals percentile intervals (bounded at 0, where the basic interval misbehaves).
    Where an AUC estimate is 1 the replicates are all 1, and the lower end is
    :func:`perfect_separation_floor` instead.
    """
    if not scores:
        raise FedLabelsError("bootstrap_vul_ci needs the scores of at least one attack.")
    first = next(iter(next(iter(scores.values())).values()))
    n_members = {c: len(m) for c, (m, _) in first.items()}
    n_non = len(next(iter(first.values()))[1])
    draws = draw_resamples(n_members, n_non, n_boot, seed)
    out: dict[str, Any] = {"n_boot": n_boot, "level": level, "attacks": {}}
    best, best_point = np.full(n_boot, -np.inf), -np.inf
    n_pairs = 0  # attack / view pairs, for the perfect-separation floor's Bonferroni
    for attack, views in scores.items():
        aucs, tprs, points = [], [], []
        for per_client in views.values():
            if len(per_client) == 0:
                continue
            client_aucs, client_tprs, client_points = [], [], []
            for c, (mem, non) in per_client.items():
                if c not in draws.members or len(mem) != n_members[c] or len(non) != n_non:
                    raise FedLabelsError(f"{attack}: client {c}'s scores do not match the "
                                         "other views' member / non-member counts.")
                wm = draws.members[c]
                client_aucs.append(weighted_auc(mem, non, wm, draws.nonmembers))
                client_points.append(weighted_auc(mem, non, np.ones(len(mem)),
                                                  np.ones(n_non))[0])
                client_tprs.append(np.reshape(
                    [weighted_tpr_at_fpr(mem, non, wm, draws.nonmembers, f)
                     for f in fpr_targets], (len(fpr_targets), n_boot)))
            aucs.append(np.mean(client_aucs, axis=0))  # (B,)
            points.append(float(np.mean(client_points)))
            tprs.append(np.mean(client_tprs, axis=0))  # (len(targets), B)
        auc_views = np.stack(aucs)  # (V, B)
        pick = auc_views.argmax(axis=0)
        auc_rep = auc_views[pick, np.arange(n_boot)]
        tpr_rep = np.stack(tprs)[pick, :, np.arange(n_boot)]  # (B, len(targets))
        auc_ci = basic_interval(max(points), auc_rep, level)
        if max(points) >= 1.0:  # perfectly separated: the bootstrap says [1, 1]
            auc_ci[0] = min(auc_ci[0], perfect_separation_floor(n_members, n_non, len(points),
                                                                level))
        n_pairs += len(points)
        out["attacks"][attack] = {
            "auc_ci": auc_ci,
            "tpr_ci": {str(f): (percentile_interval(tpr_rep[:, i], level)
                                if resolvable(f, n_non) else None)
                       for i, f in enumerate(fpr_targets)}}
        best, best_point = np.maximum(best, auc_rep), max(best_point, max(points))
    out["vul_ci"] = basic_interval(best_point, best, level)
    if best_point >= 1.0:
        out["vul_ci"][0] = min(out["vul_ci"][0],
                               perfect_separation_floor(n_members, n_non, n_pairs, level))
    return out


def _max_replicates(scores: Mapping[str, Mapping[str, Mapping[int, ClientScores]]],
                    draws: Resamples) -> tuple[float, np.ndarray]:
    """VUL (max over attacks and views of the mean AUC over clients) and its replicates."""
    point, reps = -np.inf, np.full(draws.n_boot, -np.inf)
    for views in scores.values():
        for per_client in views.values():
            if not per_client:
                continue
            aucs, points = [], []
            for c, (mem, non) in per_client.items():
                if c not in draws.members or draws.members[c].shape[1] != len(mem) \
                        or draws.nonmembers.shape[1] != len(non):
                    raise FedLabelsError(f"client {c}'s scores do not match the candidates "
                                         "the resampling was drawn for.")
                aucs.append(weighted_auc(mem, non, draws.members[c], draws.nonmembers))
                points.append(weighted_auc(mem, non, np.ones(len(mem)), np.ones(len(non)))[0])
            reps = np.maximum(reps, np.mean(aucs, axis=0))
            point = max(point, float(np.mean(points)))
    return point, reps


def _candidate_counts(scores: Mapping[str, Mapping[str, Mapping[int, ClientScores]]]
                      ) -> tuple[dict[int, int], int]:
    if not scores:
        raise FedLabelsError("a VUL difference needs the scores of at least one attack.")
    first = next(iter(next(iter(scores.values())).values()))
    return {c: len(m) for c, (m, _) in first.items()}, len(next(iter(first.values()))[1])


def bootstrap_vul_difference(scores_a: Mapping[str, Mapping[str, Mapping[int, ClientScores]]],
                             scores_b: Mapping[str, Mapping[str, Mapping[int, ClientScores]]],
                             *, paired: bool, n_boot: int = 1000, seed: int = 0,
                             level: float = 0.95) -> dict[str, Any]:
    """Basic bootstrap interval of VUL_a - VUL_b from the two audits' scores (as
    :func:`bootstrap_vul_ci` takes them; ``AuditReport.scores()``).

    ``paired=True``: the two audits scored the *same* candidates (same federation, seed and
    sizes: the members and non-members of one plan), so one resampling of those records
    serves both, and the interval accounts for their correlation (the rule of
    :func:`vul_difference` ignores it and is conservative). ``paired=False``: independent
    audits, resampled independently (seeds ``seed`` and ``seed + 1``).
    """
    counts_a, non_a = _candidate_counts(scores_a)
    counts_b, non_b = _candidate_counts(scores_b)
    if paired and (counts_a != counts_b or non_a != non_b):
        raise FedLabelsError(
            f"paired: the audits scored different candidates ({counts_a} members per client "
            f"and {non_a} non-members against {counts_b} and {non_b}); audit both with the "
            "same federation, seed and sizes, or use paired=False.")
    draws_a = draw_resamples(counts_a, non_a, n_boot, seed)
    draws_b = draws_a if paired else draw_resamples(counts_b, non_b, n_boot, seed + 1)
    point_a, reps_a = _max_replicates(scores_a, draws_a)
    point_b, reps_b = _max_replicates(scores_b, draws_b)
    d = point_a - point_b
    lo, hi = percentile_interval(reps_a - reps_b, level)
    ci = [float(np.clip(2 * d - hi, -1, 1)), float(np.clip(2 * d - lo, -1, 1))]
    return {"difference": d, "ci": ci, "level": level, "paired": paired, "n_boot": n_boot,
            "differs": not ci[0] <= 0 <= ci[1]}


def vul_difference(a: Mapping[str, Any], b: Mapping[str, Any], level: float = 0.95, *,
                   input_level: float = 0.95) -> dict[str, Any]:
    """Whether two audits' VULs differ: an interval of VUL_a - VUL_b from their intervals.

    ``a`` and ``b`` are ``privacy`` entries with ``vul`` and ``vul_ci`` (intervals at
    ``input_level``: the audit's are 95 %). Each interval gives a standard error (width /
    (2 z_in)); the difference gets d ± z · sqrt(se_a² + se_b²) at ``level``, the interval for
    independent estimates. Two audits with the same seed share their
    candidates, which correlates their VULs positively and makes this interval conservative.
    The VULs differ when the interval excludes 0 (more powerful than requiring the two
    intervals not to overlap, which tests at about the 0.6 % level instead of 5 %). Its
    coverage is about that of the two intervals it is built from
    (``benchmarks/audit_interval_coverage.py``, docs/audit.md).
    """
    for what, value in (("level", level), ("input_level", input_level)):
        if not 0 < value < 1:
            raise FedLabelsError(f"vul_difference: {what} must lie in (0, 1), got {value}.")
    z, z_in = (normal_quantile((1 + v) / 2) for v in (level, input_level))
    for name, p in (("first", a), ("second", b)):
        if p.get("vul") is None or p.get("vul_ci") is None:
            raise FedLabelsError(f"the {name} audit has no vul / vul_ci; re-run the audit.")
    se = [(p["vul_ci"][1] - p["vul_ci"][0]) / (2 * z_in) for p in (a, b)]
    d = float(a["vul"]) - float(b["vul"])
    half = z * float(np.hypot(*se))
    return {"difference": d, "ci": [d - half, d + half], "level": level,
            "differs": bool(abs(d) > half)}
