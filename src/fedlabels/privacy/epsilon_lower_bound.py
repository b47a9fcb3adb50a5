"""Empirical lower bounds on ε from an auditor's membership guesses (DP auditing).

Both estimators return ε_lb such that, with probability at least 1 − β over the mechanism's
randomness (and the auditor's inclusion draw), a mechanism that really is (ε, δ)-DP for every
ε ≥ ε_lb would have produced guesses this good less often than β. So ε_lb above a claimed ε
falsifies the claim at confidence 1 − β; ε_lb below it says nothing either way.

* **One run** (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run"):
  m canaries, each included independently with probability ½; the auditor guesses "in" for
  the k₊ highest scores and "out" for the k₋ lowest, abstaining on the rest. Under (ε, δ)-DP
  the number of correct guesses V among r = k₊ + k₋ satisfies
  P[V ≥ v] ≤ P[Bin(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Bin(r, q) < v] / i,
  q = e^ε / (1 + e^ε) (their main theorem with δ, as computed in the paper's code);
  ε_lb is the largest ε whose bound is still below β. With δ = 0 the bound is the Binomial
  tail alone.
* **Clopper–Pearson over repeated runs** (the classic audit): scores of n_in runs with one
  canary and n_out without; for a threshold t, CP upper bounds on FPR and FNR give
  ε_lb = max(log((1 − δ − FNR_hi) / FPR_hi), log((1 − δ − FPR_hi) / FNR_hi)).

Choosing among several guess counts or thresholds after looking at the scores is paid for
with a Bonferroni correction (each choice is tested at β / #choices), so the maximum over
choices is still a valid (1 − β) bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats
from scipy.special import expit

from fedlabels.core.errors import FedLabelsError

#: fractions of the canaries guessed (k₊ = k₋ = round(f · m), and k₋ = 0) by default
GUESS_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.5)


def _check_beta(beta: float) -> None:
    if not 0 < beta < 1:
        raise FedLabelsError(f"beta (the audit's failure probability) must be in (0, 1), "
                             f"got {beta}.")


def _check_delta(delta: float) -> None:
    if not 0 <= delta <= 1:
        raise FedLabelsError(f"delta must be in [0, 1], got {delta}.")


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """Largest probability of ≥ ``v`` correct guesses out of ``r`` (``m`` canaries) under
    (ε, δ)-DP (Steinke et al. 2023)."""
    if not 0 <= v <= r <= m:
        raise FedLabelsError(f"need 0 <= correct ({v}) <= guesses ({r}) <= canaries ({m}).")
    if epsilon < 0:
        raise FedLabelsError(f"epsilon must be >= 0, got {epsilon}.")
    _check_delta(delta)
    q = float(expit(epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))  # P[Bin(r, q) >= v]
    if v == 0 or delta == 0:
        return min(tail, 1.0)
    i = np.arange(1, v + 1)
    below = np.cumsum(stats.binom.pmf(v - i, r, q))  # P[v - i <= Bin(r, q) < v]
    alpha = float(np.max(below / i))
    return min(tail + 2 * m * delta * alpha, 1.0)


def one_run_epsilon(m: int, r: int, v: int, *, delta: float = 0.0, beta: float = 0.05,
                    tol: float = 1e-9) -> float:
    """Largest ε at which ``v`` correct guesses out of ``r`` still have p-value < ``beta``
    (0 when even ε = 0 explains them)."""
    _check_beta(beta)
    if one_run_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            raise FedLabelsError("the one-run bound does not reach beta; check the inputs.")
    while hi - lo > tol:  # invariant: p(lo) < beta <= p(hi)
        mid = (lo + hi) / 2
        if one_run_p_value(m, r, v, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


def default_guesses(m: int) -> list[tuple[int, int]]:
    """The (k₊, k₋) choices tried by default: k₊ = k₋ and k₋ = 0 at a few fractions of m."""
    ks = sorted({max(1, round(f * m)) for f in GUESS_FRACTIONS})
    out = [(k, 0) for k in ks] + [(k, k) for k in ks if 2 * k <= m]
    return list(dict.fromkeys(out))


def one_run_audit(scores: np.ndarray, included: np.ndarray, *, delta: float = 0.0,
                  beta: float = 0.05, guesses: list[tuple[int, int]] | None = None
                  ) -> dict[str, Any]:
    """One-run audit: guess the top-k₊ scores "in" and the bottom-k₋ "out" (ties broken by
    canary order, which is independent of the inclusion draw); ε_lb is the best over the
    ``guesses`` choices, each tested at β / #choices."""
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    m = len(scores)
    if included.shape != scores.shape or m == 0:
        raise FedLabelsError(f"need one score and one inclusion flag per canary; got "
                             f"{scores.shape} scores and {included.shape} flags.")
    _check_beta(beta)
    choices = default_guesses(m) if guesses is None else list(guesses)
    bad = [g for g in choices if g[0] < 0 or g[1] < 0 or g[0] + g[1] > m or sum(g) == 0]
    if bad or not choices:
        raise FedLabelsError(f"guesses {bad or choices} are not (k_plus, k_minus) with "
                             f"1 <= k_plus + k_minus <= {m}.")
    order = np.argsort(-scores, kind="stable")  # highest first
    level = beta / len(choices)
    best: dict[str, Any] = {"epsilon_lower_bound": 0.0, "k_plus": 0, "k_minus": 0,
                            "guesses": 0, "correct": 0}
    for k_plus, k_minus in choices:
        correct = int(included[order[:k_plus]].sum()
                      + (~included[order[m - k_minus:]]).sum())
        eps = one_run_epsilon(m, k_plus + k_minus, correct, delta=delta, beta=level)
        if eps > best["epsilon_lower_bound"] or best["guesses"] == 0:
            best = {"epsilon_lower_bound": eps, "k_plus": k_plus, "k_minus": k_minus,
                    "guesses": k_plus + k_minus, "correct": correct}
    # the most these m canaries can show: every guess right, at the best choice
    ceiling = max(one_run_epsilon(m, k_plus + k_minus, k_plus + k_minus, delta=delta,
                                  beta=level) for k_plus, k_minus in choices)
    return {"estimator": "one-run", **best, "n_canaries": m, "n_included": int(included.sum()),
            "epsilon_ceiling": ceiling,
            "beta": beta, "delta": delta, "choices": len(choices),
            "reference": "Steinke, Nasr & Jagielski 2023 (one training run), Bonferroni over "
                         "the guess counts tried"}


def clopper_pearson_upper(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson upper bound on a proportion seen k times in n."""
    k = np.asarray(k)
    upper = stats.beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1))
    return np.where(k >= n, 1.0, upper)


def clopper_pearson_audit(scores_in: np.ndarray, scores_out: np.ndarray, *, delta: float = 0.0,
                          beta: float = 0.05, max_thresholds: int = 16) -> dict[str, Any]:
    """Classic audit: ``scores_in`` from runs with the canary, ``scores_out`` without; guess
    "in" when score ≥ t. Up to ``max_thresholds`` thresholds (score quantiles), each with
    its two CP bounds at β / (2 · #thresholds), so the best is a (1 − β) bound."""
    s_in = np.asarray(scores_in, dtype=np.float64)
    s_out = np.asarray(scores_out, dtype=np.float64)
    if len(s_in) == 0 or len(s_out) == 0:
        raise FedLabelsError("the Clopper-Pearson audit needs runs with and without the canary.")
    _check_beta(beta)
    _check_delta(delta)
    values = np.unique(np.r_[s_in, s_out])
    if len(values) > max_thresholds:
        values = np.unique(np.quantile(values, np.linspace(0, 1, max_thresholds)))
    alpha = beta / (2 * len(values))
    fp = (s_out[None, :] >= values[:, None]).sum(axis=1)
    fn = (s_in[None, :] < values[:, None]).sum(axis=1)
    fpr_hi = clopper_pearson_upper(fp, len(s_out), alpha)
    fnr_hi = clopper_pearson_upper(fn, len(s_in), alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.maximum(np.log((1 - delta - fnr_hi) / fpr_hi),
                         np.log((1 - delta - fpr_hi) / fnr_hi))
    eps = np.nan_to_num(eps, nan=0.0, neginf=0.0)
    j = int(np.argmax(eps))
    # the most these runs can show: no false positive or negative at some threshold
    u_in = float(clopper_pearson_upper(0, len(s_in), alpha))
    u_out = float(clopper_pearson_upper(0, len(s_out), alpha))
    ceiling = max(0.0, float(np.log(max(1 - delta - u_in, 1e-300) / u_out)),
                  float(np.log(max(1 - delta - u_out, 1e-300) / u_in)))
    return {"estimator": "clopper-pearson", "epsilon_lower_bound": max(float(eps[j]), 0.0),
            "epsilon_ceiling": ceiling,
            "threshold": float(values[j]), "fpr": float(fp[j] / len(s_out)),
            "fnr": float(fn[j] / len(s_in)), "fpr_upper": float(fpr_hi[j]),
            "fnr_upper": float(fnr_hi[j]), "runs_with": len(s_in), "runs_without": len(s_out),
            "beta": beta, "delta": delta, "thresholds": len(values),
            "reference": "Clopper-Pearson intervals on FPR/FNR over repeated runs (Jagielski "
                         "et al. 2020), Bonferroni over thresholds"}
