"""Prop. 1 (convergence), Prop. 2 (sensitivity), empirical and worst-case sensitivity."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from scipy import stats
from sklearn.neighbors import KNeighborsClassifier
from sklearn.tree import DecisionTreeClassifier

from fedlabels.analysis.convergence import convergence_bound, paper_figure_value
from fedlabels.cli import main
from fedlabels.core.errors import FedLabelsError
from fedlabels.methods.fedct.sensitivity import empirical_sensitivity
from fedlabels.privacy.sensitivity import (
    given_sensitivity,
    prop2_label_bound,
    prop2_sensitivity,
    resolve_sensitivity,
    worst_case_sensitivity,
)


def test_prop1_matches_a_direct_sum() -> None:
    b = convergence_bound(5, 10_000, 1.0, 1000)
    t = np.arange(1001, 2_000_001, dtype=np.float64)
    direct = 10_000 * 4.0 ** 2.5 * (np.sum(t ** -2.5) + (2_000_000.5) ** -1.5 / 1.5)
    assert b.delta == pytest.approx(direct, rel=1e-6)
    assert b.delta == pytest.approx(6.7411, abs=1e-3) and b.vacuous
    assert b.convergence_probability == 0.0


def test_prop1_paper_values_are_one_minus_bound_without_u_at_t0_1000() -> None:
    """The paper's 0.7868 (c = 10) and 0.9962 (quoted for c = 1, equal to c = 2) at m = 5."""
    assert paper_figure_value(5, 10.0, 1000) == pytest.approx(0.7868, abs=5e-5)
    assert paper_figure_value(5, 2.0, 1000) == pytest.approx(0.9962, abs=5e-5)
    assert paper_figure_value(5, 1.0, 1000) == pytest.approx(0.99933, abs=1e-5)
    # c = 1 gives 0.9962 only at t0 ~ 315 (same (4c)^{m/2} / t0^{m/2 - 1} ratio)
    assert paper_figure_value(5, 1.0, 315) == pytest.approx(0.9962, abs=1e-4)
    # with the |U| = 10^4 factor of the statement the bound is vacuous at t0 = 1000
    assert convergence_bound(5, 10_000, 10.0, 1000).delta == pytest.approx(2131.73, abs=0.01)


def test_prop1_monotone_in_t0_and_m() -> None:
    d = [convergence_bound(5, 1000, 1.0, t0).delta for t0 in (10, 100, 1000, 10_000)]
    assert all(a > b for a, b in pairwise(d))
    dm = [convergence_bound(m, 1000, 1.0, 1000).delta for m in (3, 5, 10, 50)]
    assert all(a > b for a, b in pairwise(dm))
    assert not convergence_bound(50, 10_000, 10.0, 1000).vacuous


def test_prop1_bad_input() -> None:
    with pytest.raises(FedLabelsError, match="m >= 3"):
        convergence_bound(2, 100, 1.0, 10)
    with pytest.raises(FedLabelsError, match="t0 >= 2c"):
        convergence_bound(5, 100, 10.0, 5)
    with pytest.raises(FedLabelsError, match="c must be"):
        convergence_bound(5, 100, 0.0, 10)


def test_bound_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bound", "convergence", "--clients", "5", "--unlabeled", "10000", "--c", "10",
                 "--t0", "1000"]) == 0
    out = capsys.readouterr().out
    assert "2131.73" in out and "vacuous" in out and "0.7868" in out
    assert main(["bound", "sensitivity", "--unlabeled", "10000", "--stability-rate", "0.01",
                 "--delta", "0.001"]) == 0
    assert "s* = 268 bits" in capsys.readouterr().out
    assert main(["bound", "convergence", "--clients", "5", "--unlabeled", "100", "--c", "1",
                 "--t0", "1"]) == 2  # t0 < 2c: a clear error, exit code 2


def test_prop2_formula_and_binomial_quantile() -> None:
    n, p, delta = 10_000, 0.01, 1e-3
    probit = stats.norm.ppf(1 - delta)
    expected = math.ceil(n * p + probit * math.sqrt(n * p * (1 - p)) + probit ** 2 / 3)
    assert prop2_label_bound(n, p, delta) == expected == 134
    # Short's bound upper-bounds the true 1 - δ quantile of Binomial(n, p)
    for n2, p2 in [(500, 0.05), (2000, 0.001), (10_000, 0.2)]:
        assert prop2_label_bound(n2, p2, delta) >= stats.binom.ppf(1 - delta, n2, p2)
    s = prop2_sensitivity(n, p, delta)
    assert s.bits == 2 * 134 and s.labels == 134 and s.source == "prop2" and not s.formal
    assert prop2_sensitivity(100, 0.99, 1e-6).bits == 200  # capped at 2|U|


def test_prop2_bad_input() -> None:
    for rate in (0.0, 1.0, -0.2, 1.5):
        with pytest.raises(FedLabelsError, match="stability rate"):
            prop2_sensitivity(100, rate, 1e-3)
    with pytest.raises(FedLabelsError, match="delta"):
        prop2_sensitivity(100, 0.1, 1.0)


def test_worst_and_given_sensitivity() -> None:
    w = worst_case_sensitivity(370)
    assert w.bits == 740 and w.formal and w.source == "worst"
    assert given_sensitivity(20, 370).bits == 20
    # a fraction of a bit is rounded up: the noise is calibrated for at least what was given
    assert given_sensitivity(20.5, 370).bits == 21 and resolve_sensitivity("0.2", 10).bits == 1
    with pytest.raises(FedLabelsError, match="exceeds the worst case 2\\|U\\| = 740"):
        given_sensitivity(741, 370)
    for bad in (0, -3):
        with pytest.raises(FedLabelsError, match="sensitivity"):
            given_sensitivity(bad, 370)
    assert resolve_sensitivity("worst", 10).bits == 20
    assert resolve_sensitivity("empirical", 10) is None
    assert resolve_sensitivity("12", 10).bits == 12
    with pytest.raises(FedLabelsError, match="stability rate"):
        resolve_sensitivity("prop2", 10)
    with pytest.raises(FedLabelsError, match="empirical, prop2, worst"):
        resolve_sensitivity("huge", 10)


def test_empirical_sensitivity_on_a_tiny_1nn_problem() -> None:
    """1-NN on the line: removing the middle record flips exactly 2 labels on U (4 bits)."""
    X = np.array([[0.0], [1.0], [2.0]])
    y = np.array([0, 1, 0])
    U = np.array([[0.1], [0.9], [1.1], [1.9]])
    est = empirical_sensitivity(KNeighborsClassifier(n_neighbors=1), X, y, U, 2,
                                n_neighbours=3, relation="remove")
    assert sorted(est.details["changed_labels"]) == [1, 1, 2]
    assert est.bits == 4 and est.labels == 2  # 2 bits per changed one-hot row
    assert est.source == "empirical" and not est.formal
    # replacing a label: record 1 -> label 0 changes the two U points nearest to it
    rep = empirical_sensitivity(KNeighborsClassifier(n_neighbors=1), X, y, U, 2,
                                n_neighbours=3, relation="replace")
    assert sorted(rep.details["changed_labels"]) == [1, 1, 2]


def test_empirical_sensitivity_seeded_and_bounded() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] > 0).astype(int)
    U = rng.normal(size=(80, 4))
    tree = DecisionTreeClassifier(random_state=0)
    a = empirical_sensitivity(tree, X, y, U, 2, n_neighbours=8, seed=3)
    b = empirical_sensitivity(tree, X, y, U, 2, n_neighbours=8, seed=3)
    assert a.bits == b.bits and a.details["changed_labels"] == b.details["changed_labels"]
    assert 2 <= a.bits <= 2 * len(U)
    assert a.bits == max(2 * a.details["max_changed_labels"], 2)
    with pytest.raises(FedLabelsError, match="relation"):
        empirical_sensitivity(tree, X, y, U, 2, relation="swap")
    with pytest.raises(FedLabelsError, match="n_neighbours"):
        empirical_sensitivity(tree, X, y, U, 2, n_neighbours=0)
