"""Run a method with a recording server, attack what it received, and summarise (VUL).

VUL of an attack = the mean ROC AUC over the audited clients at the worst (highest) view,
where a view is one recorded exchange (``round r``) or all of a client's releases together
(``all rounds``). ``privacy.vul`` is the VUL of the strongest attack.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlabels.audit.plan import AuditPlan, make_plan
from fedlabels.audit.recorder import Recorder, RecordingMethod
from fedlabels.audit.references import ReferenceModels, ReferenceOutputs, predict_proba_full
from fedlabels.audit.threats import (
    AuditView,
    Observation,
    ObservationContext,
    extract_observations,
    threat_for,
)
from fedlabels.data import Federation
from fedlabels.engines import simulate
from fedlabels.errors import FedLabelsError
from fedlabels.learners import expand_per_client
from fedlabels.privacy.attacks import (
    ATTACKS,
    AttackResult,
    augmentation_attack,
    evaluate_attack,
    fit_shokri,
    gap_attack,
    label_frequency,
    lira_offline,
    loss_attack,
    rmia_offline,
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
                    augmentation_attack(labels[:, aug], y))


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


def attack_view(obs_kind: str, values: np.ndarray, plan: AuditPlan, cid: int,
                refs: ReferenceOutputs, attacks: list[str], seed: int = 0,
                cache: dict[Any, Any] | None = None) -> dict[str, AttackResult]:
    """Run the chosen attacks on one client's observation; results keyed by attack name.

    ``cache`` (optional) keeps the Shokri attack classifier of a reference snapshot, which
    does not depend on the attacked client.
    """
    s = _target_signals(obs_kind, values, plan, cid)
    cand, pop = plan.cand_index[cid], plan.pop_index
    y, y_pop = plan.y_query[cand], plan.y_query[pop]
    membership = plan.membership[cid]
    px_refs = np.stack([true_class_probability(p[cand], y) for p in refs.probs_query])
    pz_refs = np.stack([true_class_probability(p[pop], y_pop) for p in refs.probs_query])
    signal = "p(y|x)" if obs_kind == "probs" else "smoothed fraction of correct hard labels"
    out: dict[str, AttackResult] = {}
    if "loss" in attacks:
        out["loss"] = evaluate_attack("loss", loss_attack(s.p_x), membership, signal=signal)
    if "lira" in attacks:
        out["lira"] = evaluate_attack("lira", lira_offline(s.p_x, px_refs), membership,
                                      signal=signal, n_refs=len(px_refs), variant="offline")
    if "rmia" in attacks:
        out["rmia"] = evaluate_attack("rmia", rmia_offline(s.p_x, px_refs, s.p_z, pz_refs),
                                      membership, signal=signal, n_refs=len(px_refs),
                                      n_population=len(pop), a=0.3, gamma=1.0,
                                      variant="offline")
    if "shadow" in attacks:
        key = ("shadow", id(refs), obs_kind)
        if cache is not None and key in cache:
            clf = cache[key]
        else:
            clf = fit_shokri(*_shadow_training(obs_kind, refs, plan.y_attacker), seed=seed)
            if cache is not None:
                cache[key] = clf
        target = shadow_features(s.p_x, s.probs, s.aug)
        out["shadow"] = evaluate_attack("shadow", clf.predict_proba(target)[:, 1],
                                        membership, n_shadow_models=len(refs.member),
                                        features="label-only" if s.probs is None else "soft")
    if "label-only" in attacks:
        out["label-only:gap"] = evaluate_attack("label-only:gap", s.correct, membership)
        out["label-only:aug"] = evaluate_attack(
            "label-only:aug", s.aug, membership, k=int(plan.settings["aug_k"]),
            sigma=float(plan.settings["aug_sigma"]))
    return out


# ---------------------------------------------------------------------------- summary

ROC_GRID = np.unique(np.r_[np.logspace(-4, 0, 81), np.linspace(0, 1, 101)])


@dataclass
class AuditReport:
    """Per-attack, per-view, per-client results and the summary written to the JSON."""

    method: str
    threat: AuditView
    settings: dict[str, Any]
    results: dict[str, dict[str, dict[int, AttackResult]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def attack_summary(self, attack: str) -> dict[str, Any]:
        views = self.results[attack]
        per_view: dict[str, dict[str, Any]] = {}
        for view, per_client in views.items():
            aucs = np.array([r.auc for r in per_client.values()])
            per_view[view] = {
                "auc_mean": float(aucs.mean()), "auc_std": float(aucs.std()),
                "tpr_at_1pct_fpr": float(np.mean([r.tpr_at_1pct_fpr
                                                  for r in per_client.values()])),
                "tpr_at_01pct_fpr": float(np.mean([r.tpr_at_01pct_fpr
                                                   for r in per_client.values()])),
                "per_client_auc": {str(c): r.auc for c, r in per_client.items()}}
        worst = max(per_view, key=lambda v: per_view[v]["auc_mean"])
        curves = [np.interp(ROC_GRID, r.fpr, r.tpr) for r in views[worst].values()]
        first = next(iter(views[worst].values()))
        return {"vul": per_view[worst]["auc_mean"], "worst_view": worst,
                "tpr_at_1pct_fpr": per_view[worst]["tpr_at_1pct_fpr"],
                "tpr_at_01pct_fpr": per_view[worst]["tpr_at_01pct_fpr"],
                "n_members": first.n_members, "n_nonmembers": first.n_nonmembers,
                "details": {k: v for k, v in first.to_dict().items()
                            if k not in ("attack", "auc", "tpr_at_1pct_fpr", "tpr_at_01pct_fpr",
                                         "roc_fpr", "roc_tpr", "n_members", "n_nonmembers")},
                "roc": {"fpr": [round(float(v), 5) for v in ROC_GRID],
                        "tpr": [round(float(v), 5) for v in np.mean(curves, axis=0)]},
                "per_view": per_view}

    def privacy(self) -> dict[str, Any]:
        """The ``privacy`` entries of the result JSON."""
        base = {"threat_model": self.threat.to_dict(), "audit": {
            "settings": self.settings, "seconds": self.seconds, "notes": self.notes,
            "vul_definition": "ROC AUC of the strongest attack, averaged over the audited "
                              "clients, at the worst view (a recorded round, or all rounds "
                              "together)"}}
        if self.threat.fixed_vul is not None:
            v = self.threat.fixed_vul
            return {"vul": v, "tpr_at_1pct_fpr": 0.01 if v == 0.5 else 1.0,
                    "strongest_attack": None, **base}
        attacks = {a: self.attack_summary(a) for a in self.results}
        if not attacks:
            raise FedLabelsError(f"{self.method}: nothing attackable was recorded.")
        best = max(attacks, key=lambda a: attacks[a]["vul"])
        base["audit"]["attacks"] = attacks
        return {"vul": attacks[best]["vul"], "tpr_at_1pct_fpr": attacks[best]["tpr_at_1pct_fpr"],
                "tpr_at_01pct_fpr": attacks[best]["tpr_at_01pct_fpr"],
                "strongest_attack": best, "worst_view": attacks[best]["worst_view"], **base}


def merge_privacy(result: RunResult, report: AuditReport) -> dict[str, Any]:
    """Add the audit to ``result.extra['privacy']`` (keeping a DP method's own entries)."""
    existing = dict(result.extra.get("privacy") or {})
    merged = {**existing, **report.privacy()}
    result.extra["privacy"] = merged
    return merged


# ---------------------------------------------------------------------------- runner

def _mean_observed(stack: np.ndarray) -> np.ndarray:
    """Mean over releases of (r, |Q|, C) probabilities, ignoring unobserved (NaN) rows."""
    seen = ~np.isnan(stack)
    count = seen.sum(axis=0)
    total = np.where(seen, stack, 0.0).sum(axis=0)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)


def audit_federation(method: str, federation: Federation, models: list[Any], *,
                     rounds: int, period: int = 50, quorum: float | None = None, seed: int = 0,
                     eval_every: int = 1, options: dict[str, Any] | None = None,
                     config: dict[str, Any] | None = None, progress: bool | None = None,
                     attacks: str | list[str] | None = None, n_members: int = 200,
                     n_refs: int = 4, n_population: int = 200, aug_k: int = 4,
                     aug_sigma: float = 0.5, views: int = 3, clients: list[int] | None = None,
                     ) -> tuple[RunResult, AuditReport]:
    """Run ``method`` on ``federation`` under its threat model and attack each client.

    ``views`` is how many rounds are recorded and attacked (round 1, the last, evenly
    spaced in between; 0 = all). Returns the run's result (with ``privacy`` merged in) and
    the full :class:`AuditReport`.
    """
    from fedlabels.protocols import get_method

    impl = get_method(method)
    names = parse_attacks(attacks)
    threat = threat_for(method)
    t0 = time.perf_counter()
    plan = make_plan(federation, n_members=n_members, n_population=n_population, aug_k=aug_k,
                     aug_sigma=aug_sigma, clients=clients, seed=seed)
    run_fed, offset = (plan.with_queries_in_public() if threat.queries_in_public
                       else (plan.evaluation, None))
    keep = audit_rounds(rounds, views)
    recorder = Recorder(keep=lambda r: r in keep)
    specs = expand_per_client(list(models), federation.n_clients)
    settings = {**plan.settings, "n_refs": n_refs, "attacks": names,
                "recorded_rounds": [r + 1 for r in sorted(keep)]}
    report = AuditReport(method, threat, settings)
    t_run = time.perf_counter()
    recording = RecordingMethod(impl, recorder)
    options = dict(options or {})
    if quorum is not None:
        options["quorum"] = quorum
    result = simulate(recording, run_fed, specs, rounds=rounds, period=period, seed=seed,
                      eval_every=eval_every, progress=progress, config=config,
                      options=impl.parse_options(options))
    report.seconds["run"] = time.perf_counter() - t_run
    if threat.fixed_vul is not None:
        sent = sum(1 for e in recorder.exchanges if e.up.arrays)
        if threat.fixed_vul == 0.5 and sent:
            raise FedLabelsError(f"{method}: the threat model says nothing is sent, but "
                                 f"{sent} protocol replies carried arrays; fix its threat model.")
        report.notes.append(threat.fixed_reason)
        report.seconds["total"] = time.perf_counter() - t0
        merge_privacy(result, report)
        return result, report

    t_att = time.perf_counter()
    ctx = ObservationContext(n_classes=federation.n_classes, n_features=federation.n_features,
                             n_public=len(run_fed.X_public), q_offset=offset,
                             X_query=plan.X_query, specs=specs)
    refs_by_spec: dict[str, ReferenceModels] = {}
    cache: dict[Any, Any] = {}
    per_client_obs = {c: extract_observations(recorder.exchanges, c, ctx, impl.threat_model)
                      for c in plan.clients}
    if threat.student:  # the released student (identical at every client): white-box
        student = getattr(recording.clients.get(plan.clients[0]), "student", None)
        if student is not None:
            probs = predict_proba_full(student, plan.X_query, federation.n_classes)
            for obs_list in per_client_obs.values():
                last = max((o.ordinal for o in obs_list), default=1)
                obs_list.append(Observation("student", "probs", probs, last))
    if not any(per_client_obs.values()):
        raise FedLabelsError(f"{method}: no attackable message was recorded in rounds "
                             f"{sorted(r + 1 for r in keep)}; record more rounds (--audit-views 0)"
                             ".")
    # reference snapshots must be taken in increasing step order: visit views by ordinal
    jobs = []
    coverage = [o.coverage for obs_list in per_client_obs.values() for o in obs_list]
    for c, obs_list in per_client_obs.items():
        for obs in obs_list:
            jobs.append((obs.ordinal, c, obs))
        for kind in ("probs", "labels"):
            same = [o for o in obs_list if o.kind == kind]
            if len(same) > 1:
                values = (_mean_observed(np.stack([o.values for o in same]))
                          if kind == "probs" else np.stack([o.values for o in same]))
                label = "all rounds" + (f" ({kind})" if len({o.kind for o in obs_list}) > 1
                                        else "")
                jobs.append((max(o.ordinal for o in same), c,
                             Observation(label, kind, values, max(o.ordinal for o in same))))
    for ordinal, c, obs in sorted(jobs, key=lambda j: j[0]):
        key = repr(specs[c])
        if key not in refs_by_spec:
            refs_by_spec[key] = ReferenceModels(specs[c], plan, n_refs, federation.n_classes,
                                                seed)
        refs = refs_by_spec[key].outputs(ordinal * period)
        for name, res in attack_view(obs.kind, obs.values, plan, c, refs, names, seed,
                                     cache).items():
            report.results.setdefault(name, {}).setdefault(obs.view, {})[c] = res
    if coverage and min(coverage) < 1.0:
        report.notes.append(f"the method answered about {min(coverage):.0%} to "
                            f"{max(coverage):.0%} of the query set per exchange; unobserved "
                            "points count as uninformative (uniform / wrong label)")
    report.seconds["attacks"] = time.perf_counter() - t_att
    report.seconds["total"] = time.perf_counter() - t0
    merge_privacy(result, report)
    return result, report
