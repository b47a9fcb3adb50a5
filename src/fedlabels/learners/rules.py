"""Evaluating RuleFit rule strings (``X_3 <= 0.5 and X_7 > 1.2``) on a feature matrix."""

from __future__ import annotations

import operator
import re

import numpy as np

_OPS = {"<=": operator.le, ">": operator.gt, "<": operator.lt, ">=": operator.ge,
        "==": operator.eq, "!=": operator.ne}
_TERM = re.compile(r"^\s*X_(\d+)\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")


def rule_matrix(X: np.ndarray, rules: list[str]) -> np.ndarray:
    """Binary (n, R) matrix: does each example satisfy each rule ``X_i <= t and ...``?

    A vectorised replacement of imodels' per-rule ``DataFrame.query`` (same rule strings,
    same thresholds), one numpy comparison per rule term.
    """
    X = np.asarray(X, dtype=float)
    out = np.ones((X.shape[0], len(rules)), dtype=bool)
    for j, rule in enumerate(rules):
        for term in str(rule).split(" and "):
            match = _TERM.match(term)
            if match is None:
                raise ValueError(f"cannot evaluate rule term {term!r}")
            col, op, rhs = int(match.group(1)), match.group(2), match.group(3)
            # imodels writes a root-only tree as the always-true rule "X_0 == X_0"
            other = re.fullmatch(r"X_(\d+)", rhs)
            value = X[:, int(other.group(1))] if other else float(rhs)
            out[:, j] &= _OPS[op](X[:, col], value)
    return out.astype(float)
