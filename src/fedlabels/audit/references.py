"""The attacker's reference / shadow models, trained on its own data like a client's model.

Each of ``n_refs`` models trains on a random half of the attacker data (as many records as a
client holds when the attacker pool is twice a client's size), with the clients' model spec.
Torch models take the same number of local steps as the attacked client had taken when it
sent the observed message (snapshots at those step counts); scikit-learn models are fit once.
The same models serve as OUT references (LiRA, RMIA: they never saw the candidates) and as
Shokri shadow models (their own members / non-members in the attacker pool are known).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlabels.audit.plan import AuditPlan
from fedlabels.core.errors import FedLabelsError
from fedlabels.learners import build_learner, is_iterative


def predict_proba_full(learner: Any, X: np.ndarray, n_classes: int) -> np.ndarray:
    """(n, C) probabilities; a scikit-learn model that saw fewer classes gets zero columns."""
    probs = np.asarray(learner.predict_proba(X), dtype=np.float64)
    if probs.shape[1] == n_classes:
        return probs
    out = np.zeros((len(X), n_classes))
    out[:, np.asarray(learner.classes_, dtype=np.int64)] = probs
    return out


@dataclass(frozen=True)
class ReferenceOutputs:
    """Reference models' outputs at one training length."""

    steps: int | None
    probs_query: np.ndarray  # (k, |Q|, C)
    probs_attacker: np.ndarray  # (k, n_a, C)
    labels_attacker_aug: np.ndarray  # (k, aug_k, n_a)
    member: np.ndarray  # (k, n_a) bool: reference j trained on attacker record i


class ReferenceModels:
    """``n_refs`` models of one spec on halves of the attacker pool, with step snapshots."""

    def __init__(self, spec: Any, plan: AuditPlan, n_refs: int, n_classes: int,
                 seed: int) -> None:
        if n_refs < 1:
            raise FedLabelsError(f"the audit needs at least 1 reference model, got {n_refs}.")
        self.plan = plan
        self.n_classes = n_classes
        n_a = len(plan.y_attacker)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EF]))
        self.member = np.zeros((n_refs, n_a), dtype=bool)
        for j in range(n_refs):
            self.member[j, rng.choice(n_a, n_a // 2, replace=False)] = True
        seeds = rng.integers(0, 2**31 - 1, size=n_refs)
        self.learners = [build_learner(spec, n_classes=n_classes, random_state=int(s))
                         for s in seeds]
        self.iterative = is_iterative(self.learners[0])
        self.steps_done = 0
        self.cache: dict[int | None, ReferenceOutputs] = {}

    def _train_to(self, steps: int) -> None:
        plan = self.plan
        for j, learner in enumerate(self.learners):
            X, y = plan.X_attacker[self.member[j]], plan.y_attacker[self.member[j]]
            if self.iterative:
                if steps > self.steps_done:
                    learner.train_steps(X, y, steps - self.steps_done)
            elif self.steps_done == 0:
                learner.fit(X, y)
        self.steps_done = max(self.steps_done, steps, 1)

    def outputs(self, steps: int) -> ReferenceOutputs:
        """Outputs after ``steps`` local steps (torch; must not decrease) or the fit model."""
        key = steps if self.iterative else None
        if key in self.cache:
            return self.cache[key]
        if self.iterative and steps < self.steps_done:
            raise FedLabelsError("reference snapshots must be requested in increasing order.")
        self._train_to(max(int(steps), 1))
        plan, c = self.plan, self.n_classes
        k, n_a, d = plan.X_attacker_aug.shape
        pq = np.stack([predict_proba_full(m, plan.X_query, c) for m in self.learners])
        pa = np.stack([predict_proba_full(m, plan.X_attacker, c) for m in self.learners])
        aug = np.stack([predict_proba_full(m, plan.X_attacker_aug.reshape(-1, d), c)
                        .argmax(axis=1).reshape(k, n_a) for m in self.learners])
        out = ReferenceOutputs(key, pq, pa, aug, self.member)
        self.cache[key] = out
        return out
