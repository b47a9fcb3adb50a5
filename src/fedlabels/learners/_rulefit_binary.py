"""The binary RuleFit used by :class:`fedlabels.learners.tabular.RuleFitClassifier`.

A module of its own (imported only when RuleFit is used) so that fitted models pickle by
reference: ``fedlabels.learners._rulefit_binary.BinaryRuleFit``.
"""

from __future__ import annotations

from typing import Any

import imodels
import numpy as np
from imodels.util.rule import Rule
from sklearn.linear_model import LogisticRegression

from fedlabels.learners.rules import rule_matrix


class BinaryRuleFit(imodels.RuleFitClassifier):
    """imodels' binary RuleFit; vectorised rule evaluation, bisection for the L1 strength."""

    def transform(self, X: Any = None, rules: Any = None) -> np.ndarray:
        return rule_matrix(X, list(rules))

    def _score_rules(self, X: np.ndarray, y: np.ndarray, rules: list[str]) -> Any:
        # as imodels' RuleFit._score_rules, but the regularisation strength is found by
        # bisection over imodels' grid (the least regularisation keeping <= max_rules
        # non-zero terms) instead of fitting every grid point from the top down
        parts = []
        if self.include_linear:
            self.winsorizer.train(X)
            winsorized = self.winsorizer.trim(X)
            self.stddev, self.mean = np.std(winsorized, axis=0), np.mean(winsorized, axis=0)
            if self.lin_standardise:
                self.friedscale.train(X)
                parts.append(self.friedscale.scale(X))
            else:
                parts.append(X.copy())
        if len(rules):
            parts.append(self.transform(X, rules))
        if not parts:
            return [], [], 0
        X_concat = np.concatenate(parts, axis=1)
        alphas = np.flip(np.logspace(-4, 4, num=100, base=10))  # imodels' grid
        threshold = 1e-6 / max(np.mean(np.abs(y)), 1e-12)

        def n_terms(alpha: float) -> int:
            model = LogisticRegression(l1_ratio=1.0, C=1 / alpha, solver="liblinear",
                                       random_state=self.random_state)
            model.fit(X_concat, y)
            return int(np.sum(np.abs(model.coef_) > threshold))

        lo, hi = 0, len(alphas) - 1  # alphas[lo] assumed feasible
        if n_terms(alphas[hi]) <= self.max_rules:
            lo = hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if n_terms(alphas[mid]) <= self.max_rules:
                lo = mid
            else:
                hi = mid
        final = LogisticRegression(l1_ratio=1.0, C=1 / alphas[lo], solver="liblinear",
                                   random_state=self.random_state, max_iter=200)
        final.fit(X_concat, y)
        coef = final.coef_.ravel()
        n_lin = coef.shape[0] - len(rules)
        coefs = list(coef[:n_lin])
        support = X_concat[:, n_lin:].mean(axis=0)
        kept = []
        for rule, w, s in zip(rules, coef[n_lin:], support, strict=True):
            if abs(w) > threshold:
                kept.append(Rule(rule, args=[w], support=s))
                coefs.append(w)
        return kept, coefs, final.intercept_

    def decision_function(self, X: Any) -> np.ndarray:
        """The fitted logit: intercept + rule terms (+ linear terms)."""
        X = np.asarray(X, dtype=float)
        n_lin = self.n_features_ if self.include_linear else 0
        coef = np.asarray(self.coef, dtype=float)
        score = np.full(len(X), float(np.ravel(self.intercept)[0]))
        if len(self.rules_without_feature_names_):
            rules = [str(r) for r in self.rules_without_feature_names_]
            score += rule_matrix(X, rules) @ coef[n_lin:]
        if n_lin:
            Xl = self.friedscale.scale(X) if self.lin_standardise else X
            score += Xl @ coef[:n_lin]
        return score

