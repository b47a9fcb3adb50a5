"""Run a method with a recording server, attack what it received, and summarise (VUL).

VUL of an attack = the mean ROC AUC over the audited clients at the worst (highest) view,
where a view is one recorded exchange (``round r``) or all of a client's releases together
(``all rounds``). ``privacy.vul`` is the VUL of the strongest attack.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from fedlabels.audit.adversaries import (
    attack_jobs,
    audit_view,
    nothing_sent_back,
    observations_for,
    reads_replies,
)
from fedlabels.audit.class_mix import class_mix, class_mix_note
from fedlabels.audit.coverage import uncovered_note
from fedlabels.audit.plan import AuditPlan, make_plan
from fedlabels.audit.recorder import Recorder, RecordingMethod
from fedlabels.audit.references import ReferenceModels, ReferenceOutputs
from fedlabels.audit.threats import AuditView, Observation, check_readable
from fedlabels.core.errors import FedLabelsError
from fedlabels.data import Federation
from fedlabels.engines import simulate
from fedlabels.learners import expand_per_client
from fedlabels.learners.text_input import refuse_text
from fedlabels.privacy.attacks import (
    ATTACKS,
    AttackResult,
    augmentation_attack,
    bootstrap_vul_ci,
    correct_label_counts,
    evaluate_attack,
    fit_shokri,
    gap_attack,
    label_frequency,
    lira_labels_offline,
    lira_offline,
    loss_attack,
    rmia_offline,
    roc_auc,
    shadow_features,
    true_class_probability,
)
from fedlabels.results import RunResult


def parse_attacks(attacks: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """Validate attack names (comma-separated string or list); ``None``/``all`` = every one."""
    if attacks is None:
        return list(ATTACKS)
    names = [a.strip().lower() for a in (attacks.split(",") if isinstance(attacks, str)
                                         else attacks) if a.strip()]
    if names == ["all"]:
        return list(ATTACKS)
    unknown = [a for a in names if a not in ATTACKS]
    if unknown or not names:
        raise FedLabelsError(f"unknown attack(s) {unknown or names!r}; choose from "
                             f"{', '.join(ATTACKS)} (comma-separated) or 'all'.")
    return list(dict.fromkeys(names))


#: the most reference models (each one trained per audited model spec) and augmented copies
#: per candidate an audit takes; LiRA's authors use up to 256 shadow models
MAX_REFS = MAX_AUG = 256


def check_counts(n_refs: int, views: int, aug_k: int) -> None:
    """The audit's counts, checked before the run (a bad one used to stop it after)."""
    if not 1 <= n_refs <= MAX_REFS:
        raise FedLabelsError(f"--audit-refs {n_refs}: the attacker trains 1 to {MAX_REFS} "
                             "reference models (default 4).")
    if views < 0:
        raise FedLabelsError(f"--audit-views {views}: give how many rounds to record and "
                             "attack, or 0 for all of them.")
    if not 1 <= aug_k <= MAX_AUG:
        raise FedLabelsError(f"--audit-aug {aug_k}: the augmentation attack takes 1 to "
                             f"{MAX_AUG} perturbed copies per candidate (default 4).")


def audit_rounds(rounds: int, n_views: int) -> set[int]:
    """Rounds (0-based) to record: round 1, the last, and evenly spaced ones (0 = all)."""
    if n_views <= 0 or n_views >= rounds:
        return set(range(rounds))
    picks = np.unique(np.round(np.linspace(0, rounds - 1, max(n_views, 2))).astype(int))
    return {int(r) for r in picks}


# ---------------------------------------------------------------------------- attacking

@dataclass
class _Signals:
    p_x: np.ndarray  # target's true-class signal on the candidates
    p_z: np.ndarray  # ... on the population points
    probs: np.ndarray | None  # (n, C) when soft outputs were observed
    correct: np.ndarray  # gap score
    aug: np.ndarray  # augmentation robustness
    n_correct: np.ndarray | None = None  # hard labels: correct releases per candidate
    n_releases: int = 1


def _target_signals(obs_kind: str, values: np.ndarray, plan: AuditPlan, cid: int
                    ) -> _Signals:
    cand, pop, aug = plan.cand_index[cid], plan.pop_index, plan.aug_index[cid]
    y, y_pop = plan.y_query[cand], plan.y_query[pop]
    if obs_kind == "probs":
        probs = np.where(np.isnan(values), 1.0 / values.shape[-1], values)  # unobserved: flat
        pred_aug = probs[aug.ravel()].argmax(axis=1).reshape(aug.shape)
        return _Signals(true_class_probability(probs[cand], y),
                        true_class_probability(probs[pop], y_pop), probs[cand],
                        gap_attack(probs[cand].argmax(axis=1), y),
                        augmentation_attack(pred_aug, y))
    labels = np.atleast_2d(values)  # (r, |Q|); -1 = not observed counts as wrong
    return _Signals(label_frequency(labels[:, cand], y), label_frequency(labels[:, pop], y_pop),
                    None, gap_attack(labels[:, cand], y),
                    augmentation_attack(labels[:, aug], y),
                    correct_label_counts(labels[:, cand], y), len(labels))


def constant_target(obs_kind: str, values: np.ndarray, plan: AuditPlan) -> np.ndarray:
    """The baseline's constant target, shaped like ``values``: every hard label correct, or
    probabilities that put all mass on the true class. It carries no membership information,
    so a calibrated attack on it must score AUC 0.5 up to sampling noise."""
    if obs_kind == "probs":
        return np.eye(values.shape[-1])[plan.y_query]
    return np.broadcast_to(plan.y_query, np.atleast_2d(values).shape).copy()


def _shadow_training(obs_kind: str, refs: ReferenceOutputs, y_att: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Shokri training set: each reference model's outputs on its members and non-members,
    in the same form (probabilities or hard labels) as the target's observation."""
    feats, member = [], []
    for j in range(len(refs.member)):
        probs = refs.probs_attacker[j]
        aug = augmentation_attack(refs.labels_attacker_aug[j], y_att)
        if obs_kind == "probs":
            f = shadow_features(true_class_probability(probs, y_att), probs, aug)
        else:
            f = shadow_features(label_frequency(probs.argmax(axis=1)[None, :], y_att), None, aug)
        feats.append(f)
        member.append(refs.member[j])
    return np.concatenate(feats), np.concatenate(member)


#: attacks calibrated with the attacker's reference / shadow models: each gets a baseline
CALIBRATED = ("lira", "rmia", "shadow")


def _attack_scores(obs_kind: str, values: np.ndarray, plan: AuditPlan, cid: int,
                   refs: ReferenceOutputs, attacks: list[str], seed: int,
                   cache: dict[Any, Any] | None) -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
    """Scores and parameters of the chosen attacks on one client's observation."""
    s = _target_signals(obs_kind, values, plan, cid)
    cand, pop = plan.cand_index[cid], plan.pop_index
    y, y_pop = plan.y_query[cand], plan.y_query[pop]
    px_refs = np.stack([true_class_probability(p[cand], y) for p in refs.probs_query])
    pz_refs = np.stack([true_class_probability(p[pop], y_pop) for p in refs.probs_query])
    signal = "p(y|x)" if obs_kind == "probs" else "smoothed fraction of correct hard labels"
    out: dict[str, tuple[np.ndarray, dict[str, Any]]] = {}
    if "loss" in attacks:
        out["loss"] = loss_attack(s.p_x), {"signal": signal}
    if "lira" in attacks and s.n_correct is None:
        out["lira"] = lira_offline(s.p_x, px_refs), {"signal": signal, "n_refs": len(px_refs),
                                                     "variant": "offline"}
    elif "lira" in attacks and s.n_correct is not None:
        hits = refs.probs_query[:, cand].argmax(axis=2) == y[None, :]
        out["lira"] = (lira_labels_offline(s.n_correct, s.n_releases, px_refs, hits),
                       {"signal": "correct hard labels k of r, -log P_OUT(K >= k)",
                        "n_refs": len(px_refs), "variant": "offline, beta-binomial",
                        "n_releases": s.n_releases})
    if "rmia" in attacks:
        out["rmia"] = rmia_offline(s.p_x, px_refs, s.p_z, pz_refs), {
            "signal": signal, "n_refs": len(px_refs), "n_population": len(pop), "a": 0.3,
            "gamma": 1.0, "variant": "offline"}
    if "shadow" in attacks:
        key = ("shadow", id(refs), obs_kind)
        if cache is not None and key in cache:
            clf = cache[key]
        else:
            clf = fit_shokri(*_shadow_training(obs_kind, refs, plan.y_attacker), seed=seed)
            if cache is not None:
                cache[key] = clf
        target = shadow_features(s.p_x, s.probs, s.aug)
        out["shadow"] = clf.predict_proba(target)[:, 1], {
            "n_shadow_models": len(refs.member),
            "features": "label-only" if s.probs is None else "soft"}
    if "label-only" in attacks:
        out["label-only:gap"] = s.correct, {}
        out["label-only:aug"] = s.aug, {"k": int(plan.settings["aug_k"]),
                                        "sigma": float(plan.settings["aug_sigma"])}
    return out


def attack_view(obs_kind: str, values: np.ndarray, plan: AuditPlan, cid: int,
                refs: ReferenceOutputs, attacks: list[str], seed: int = 0,
                cache: dict[Any, Any] | None = None) -> dict[str, AttackResult]:
    """Run the chosen attacks on one client's observation; results keyed by attack name.

    Every calibrated attack (:data:`CALIBRATED`) also runs on the :func:`constant_target`;
    its AUC is ``details["constant_target_auc"]``. ``cache`` (optional) keeps the Shokri
    attack classifier of a reference snapshot, which does not depend on the attacked client.
    """
    membership = plan.membership[cid]
    scores = _attack_scores(obs_kind, values, plan, cid, refs, attacks, seed, cache)
    baseline = _attack_scores(obs_kind, constant_target(obs_kind, values, plan), plan, cid,
                              refs, [a for a in attacks if a in CALIBRATED], seed, cache)
    out: dict[str, AttackResult] = {}
    for name, (s, details) in scores.items():
        if name in baseline:
            details["constant_target_auc"] = roc_auc(baseline[name][0], membership)
        out[name] = evaluate_attack(name, s, membership, **details)
    return out


# ---------------------------------------------------------------------------- summary

ROC_GRID = np.unique(np.r_[np.logspace(-4, 0, 81), np.linspace(0, 1, 101)])
TPR_KEYS = {"tpr_at_1pct_fpr": 0.01, "tpr_at_01pct_fpr": 0.001}


def _mean_or_none(values: list[float | None]) -> float | None:
    """Mean over clients, ``None`` when any value is (an FPR the non-members cannot resolve)."""
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if len(known) == len(values) else None


@dataclass
class AuditReport:
    """Per-attack, per-view, per-client results and the summary written to the JSON.

    Intervals: :func:`fedlabels.privacy.attacks.bootstrap_vul_ci` with ``n_boot``
    replicates (members per client and the shared non-members resampled; the maximum over
    attacks and views recomputed in every replicate), seeded by the audit seed.
    """

    method: str
    threat: AuditView
    settings: dict[str, Any]
    results: dict[str, dict[str, dict[int, AttackResult]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    n_boot: int = 1000
    _intervals: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def scores(self) -> dict[str, dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]]:
        """``scores[attack][view][client] = (member scores, non-member scores)``, as
        :func:`~fedlabels.privacy.attacks.bootstrap_vul_ci` and
        :func:`~fedlabels.privacy.attacks.bootstrap_vul_difference` take them."""
        return {a: {v: {c: (r.scores[r.membership], r.scores[~r.membership])
                        for c, r in per_client.items()
                        if r.scores is not None and r.membership is not None}
                    for v, per_client in views.items()}
                for a, views in self.results.items()}

    def intervals(self) -> dict[str, Any]:
        """Bootstrap intervals of VUL and of every attack's AUC and TPRs (computed once)."""
        if self._intervals is None:
            scores = self.scores()
            self._intervals = bootstrap_vul_ci(scores, n_boot=self.n_boot,
                                               seed=int(self.settings.get("seed", 0)),
                                               fpr_targets=tuple(TPR_KEYS.values()))
        return self._intervals

    def attack_summary(self, attack: str) -> dict[str, Any]:
        views = self.results[attack]
        per_view: dict[str, dict[str, Any]] = {}
        for view, per_client in views.items():
            aucs = np.array([r.auc for r in per_client.values()])
            const = [r.details.get("constant_target_auc") for r in per_client.values()]
            per_view[view] = {
                "auc_mean": float(aucs.mean()), "auc_std": float(aucs.std()),
                **{k: _mean_or_none([getattr(r, k) for r in per_client.values()])
                   for k in TPR_KEYS},
                "constant_target_auc": _mean_or_none(const) if const[0] is not None else None,
                "per_client_auc": {str(c): r.auc for c, r in per_client.items()}}
        worst = max(per_view, key=lambda v: per_view[v]["auc_mean"])
        curves = [np.interp(ROC_GRID, r.fpr, r.tpr) for r in views[worst].values()]
        first = next(iter(views[worst].values()))
        ci = self.intervals()["attacks"][attack]
        return {"vul": per_view[worst]["auc_mean"], "worst_view": worst,
                "auc_ci": ci["auc_ci"],
                **{k: per_view[worst][k] for k in TPR_KEYS},
                "tpr_ci": {k: ci["tpr_ci"][str(f)] for k, f in TPR_KEYS.items()},
                "constant_target_auc": per_view[worst]["constant_target_auc"],
                "n_members": first.n_members, "n_nonmembers": first.n_nonmembers,
                "fpr_resolution": first.fpr_resolution,
                "details": {k: v for k, v in first.to_dict().items()
                            if k not in ("attack", "auc", *TPR_KEYS, "constant_target_auc",
                                         "roc_fpr", "roc_tpr", "n_members", "n_nonmembers",
                                         "fpr_resolution")},
                "roc": {"fpr": [round(float(v), 5) for v in ROC_GRID],
                        "tpr": [round(float(v), 5) for v in np.mean(curves, axis=0)]},
                "per_view": per_view}

    def privacy(self) -> dict[str, Any]:
        """The ``privacy`` entries of the result JSON."""
        base = {"threat_model": self.threat.to_dict(), "audit": {
            "settings": self.settings, "seconds": self.seconds, "notes": self.notes,
            "vul_definition": "ROC AUC of the strongest attack, averaged over the audited "
                              "clients, at the worst view (a recorded round, or all rounds "
                              "together)",
            "interval": f"95 % bootstrap, {self.n_boot} replicates: each client's members "
                        "and the shared non-members resampled, every attack / view AUC "
                        "recomputed, the maximum taken in each replicate; basic intervals "
                        "for AUCs, percentile intervals for TPRs"}}
        if self.threat.fixed_vul is not None:
            v = self.threat.fixed_vul
            return {"vul": v, "vul_ci": [v, v], "tpr_at_1pct_fpr": 0.01 if v == 0.5 else 1.0,
                    "strongest_attack": None, **base}
        attacks = {a: self.attack_summary(a) for a in self.results}
        if not attacks:
            raise FedLabelsError(f"{self.method}: nothing attackable was recorded.")
        best = max(attacks, key=lambda a: attacks[a]["vul"])
        base["audit"]["attacks"] = attacks
        top = attacks[best]
        return {"vul": top["vul"], "vul_ci": self.intervals()["vul_ci"],
                **{k: top[k] for k in TPR_KEYS}, "tpr_ci": top["tpr_ci"],
                "fpr_resolution": top["fpr_resolution"],
                "strongest_attack": best, "worst_view": top["worst_view"], **base}


def merge_privacy(result: RunResult, report: AuditReport) -> dict[str, Any]:
    """Add the audit to ``result.extra['privacy']`` (keeping a DP method's own entries)."""
    existing = dict(result.extra.get("privacy") or {})
    merged = {**existing, **report.privacy()}
    result.extra["privacy"] = merged
    return merged


#: per-client members below which an audit's intervals are too wide to read a VUL by
SMALL_AUDIT_MEMBERS = 50
#: how far a calibrated attack's constant-target AUC may stray from 0.5 (docs/audit.md)
CONSTANT_TARGET_BAND = 0.05


def reliability_notes(attacks: dict[str, dict[str, Any]], members: int) -> list[str]:
    """What makes this audit's figures hard to read: a small sample, and calibrated attacks
    whose constant-target baseline strays from 0.5 (their AUC then measures the sample)."""
    notes = []
    if members < SMALL_AUDIT_MEMBERS:
        notes.append(f"only {members} members per client (as many non-members): the "
                     "intervals are wide and a VUL near the null VUL says little; a larger "
                     "held-out split (--test) and --audit-members give a readable audit")
    off = {name: s["constant_target_auc"] for name, s in sorted(attacks.items())
           if s.get("constant_target_auc") is not None
           and abs(s["constant_target_auc"] - 0.5) > CONSTANT_TARGET_BAND + 1e-9}
    if off:
        listed = ", ".join(f"{name} {auc:.3f}" for name, auc in off.items())
        notes.append(f"the constant-target baseline strays from 0.5 ± "
                     f"{CONSTANT_TARGET_BAND} ({listed}): the reference models alone separate "
                     "this sample's members from its non-members, so these attacks' VULs "
                     "are not measures of leakage here")
    return notes


# ---------------------------------------------------------------------------- runner

def audit_federation(method: str, federation: Federation, models: str | list[Any], *,
                     rounds: int, period: int = 50, quorum: float | None = None, seed: int = 0,
                     eval_every: int = 1, options: dict[str, Any] | None = None,
                     config: dict[str, Any] | None = None, progress: bool | None = None,
                     attacks: str | list[str] | None = None, n_members: int = 200,
                     n_refs: int = 4, n_population: int = 200, aug_k: int = 4,
                     aug_sigma: float = 0.5, views: int = 3, clients: list[int] | None = None,
                     threat: str = "forged-u") -> tuple[RunResult, AuditReport]:
    """Run ``method`` on ``federation`` and attack each client under ``threat``
    (:data:`fedlabels.audit.adversaries.THREATS`: forged-u, fixed-u, released-model,
    curious-client). ``models``: model names as ``fl.run`` takes them (``"dt"``,
    ``"dt,rf"``) or parsed specs (:func:`~fedlabels.learners.parse_model_spec`).

    Sizes are fitted to the split (:func:`~fedlabels.audit.plan.size_audit`; what was chosen
    is in ``privacy.audit.settings``). ``views`` is how many rounds are recorded and attacked
    (round 1, the last, evenly spaced in between; 0 = all). Every attack also runs with ghost
    members in place of the members (``privacy.null_vul``, ``privacy.null_vul_ci``).
    Returns the run's result (with ``privacy`` merged in) and the full :class:`AuditReport`.
    """
    from fedlabels.methods import get_method

    if federation.task != "classification":
        raise FedLabelsError(
            f"the membership audit attacks class labels and probabilities; {federation.name} "
            f"is a {federation.task} task, which it does not cover yet. Audit a "
            "classification dataset.")
    refuse_text(federation.X_public, "the membership audit (its attacks perturb features)",
                "audit a numeric dataset")
    impl = get_method(method)
    names = parse_attacks(attacks)
    view = audit_view(method, threat)
    check_counts(n_refs, views, aug_k)
    t0 = time.perf_counter()
    plan = make_plan(federation, n_members=n_members, n_population=n_population, aug_k=aug_k,
                     aug_sigma=aug_sigma, clients=clients, seed=seed)
    run_fed, offset = (plan.with_queries_in_public() if view.queries_in_public
                       else (plan.evaluation, None))
    keep = audit_rounds(rounds, views)
    # the replies observations_for reads are checked as they arrive (not after the last round)
    recorder = Recorder(keep=lambda r: r in keep, down=view.curious,
                        check=partial(check_readable, threat=impl.threat_model)
                        if reads_replies(view) else None)
    if isinstance(models, str):  # "dt" or "dt,rf": model names, as fl.run takes them
        from fedlabels.learners import as_models

        models = as_models(models)
    specs = expand_per_client(list(models), federation.n_clients)
    settings = {**plan.settings, "n_refs": n_refs, "attacks": names, "threat": view.threat,
                "recorded_rounds": [r + 1 for r in sorted(keep)]}
    report = AuditReport(method, view, settings)
    t_run = time.perf_counter()
    recording = RecordingMethod(impl, recorder)
    parsed = impl.parse_options({**(options or {}),
                                 **({"quorum": quorum} if quorum is not None else {})})
    if plan.evaluation.X_public is not None:  # sizes from the ordinary U, not U + Q
        parsed = impl.sized_for(parsed, len(plan.evaluation.X_public))
    result = simulate(recording, run_fed, specs, rounds=rounds, period=period, seed=seed,
                      eval_every=eval_every, progress=progress, config=config, options=parsed)
    report.seconds["run"] = time.perf_counter() - t_run
    t_att = time.perf_counter()
    per_client_obs: dict[int, list[Observation]] = {}
    if view.fixed_vul is None:
        per_client_obs = observations_for(view, recorder, recording, plan, run_fed, offset,
                                          specs, federation.n_classes, period, seed, rounds,
                                          impl)
        if view.curious and not any(per_client_obs.values()):
            report.threat = replace(view, fixed_vul=0.5,
                                    fixed_reason=nothing_sent_back(recorder.exchanges))
    if report.threat.fixed_vul is not None:
        sent = sum(1 for e in recorder.exchanges if e.up.arrays)
        if report.threat.fixed_vul == 0.5 and sent and not view.curious:
            raise FedLabelsError(f"{method}: the threat model says nothing is sent, but "
                                 f"{sent} protocol replies carried arrays; fix its threat model.")
        report.notes.append(report.threat.fixed_reason)
        report.seconds["total"] = time.perf_counter() - t0
        privacy = merge_privacy(result, report)
        privacy.update(null_vul=0.5, null_vul_ci=[0.5, 0.5])  # ghosts: never in the data
        return result, report

    null = AuditReport(method, view, settings)
    refs_by_spec: dict[str, ReferenceModels] = {}
    cache: dict[Any, Any] = {}
    null_plan = plan.null_plan()
    for ordinal, c, obs in attack_jobs(per_client_obs):
        key = repr(specs[c])
        if key not in refs_by_spec:
            refs_by_spec[key] = ReferenceModels(specs[c], plan, n_refs, federation.n_classes,
                                                seed)
        refs = refs_by_spec[key].outputs(ordinal * period)
        for target, p in ((report, plan), (null, null_plan)):
            for name, res in attack_view(obs.kind, obs.values, p, c, refs, names, seed,
                                         cache).items():
                target.results.setdefault(name, {}).setdefault(obs.view, {})[c] = res
    coverage = [o.coverage for obs_list in per_client_obs.values() for o in obs_list]
    if coverage and min(coverage) < 1.0:
        report.notes.append(f"the method answered about {min(coverage):.0%} to "
                            f"{max(coverage):.0%} of the query set per exchange; unobserved "
                            "points count as uninformative (uniform / wrong label)")
    report.seconds["attacks"] = time.perf_counter() - t_att
    report.seconds["total"] = time.perf_counter() - t0
    privacy = merge_privacy(result, report)
    uncovered = uncovered_note(view.threat, impl.capabilities.canary_view, privacy)
    mix = class_mix({c: plan.candidate_labels(c) for c in plan.clients}, plan.membership,
                    seed=seed)
    privacy["audit"]["class_mix"] = mix
    mix_note = class_mix_note(mix)
    privacy["audit"]["notes"] = [*privacy["audit"]["notes"], *reliability_notes(
        privacy["audit"]["attacks"], int(plan.settings["n_members_per_client"])),
        *([mix_note] if mix_note else []), *([uncovered] if uncovered else [])]
    null_privacy = null.privacy()
    privacy.update(null_vul=null_privacy["vul"], null_vul_ci=null_privacy.get("vul_ci"))
    privacy["audit"]["null"] = {
        "definition": "the same attacks, views and maximum with each client's members "
                      "replaced by ghost members: held-out records no client trained on",
        "strongest_attack": null_privacy["strongest_attack"],
        "worst_view": null_privacy["worst_view"],
        "attacks": {a: s["vul"] for a, s in null_privacy["audit"]["attacks"].items()}}
    return result, report
