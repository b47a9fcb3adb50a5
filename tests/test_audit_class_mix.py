"""The audit's class-mix check: members and non-members of another class mix (non-iid)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import fedlabels as fl
from fedlabels.audit import audit_federation
from fedlabels.audit.class_mix import chi2_statistic, class_mix, permutation_p_value


def test_the_statistic_and_p_value_match_scipys_chi_square():
    """Large counts, where the χ² approximation holds: the permutation p-value agrees with
    scipy's asymptotic one; the statistic is scipy's (no continuity correction)."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(4), 400)
    labels = rng.choice(5, size=1600, p=[0.3, 0.25, 0.2, 0.15, 0.1])
    labels[:400] = rng.choice(5, size=400, p=[0.25, 0.25, 0.2, 0.17, 0.13])  # a mild shift
    table = np.zeros((4, 5))
    np.add.at(table, (groups, labels), 1)
    ref = stats.chi2_contingency(table, correction=False)
    stat, p = permutation_p_value(groups, labels, n_perm=1999, seed=1)
    assert stat == pytest.approx(ref.statistic) == pytest.approx(chi2_statistic(table))
    assert abs(p - ref.pvalue) < 0.03, (p, ref.pvalue)
    assert chi2_statistic(np.array([[3, 0, 5], [6, 0, 10]])) == pytest.approx(0.0)  # same mix


def test_identical_class_mixes_give_p_one_and_disjoint_ones_the_smallest_p():
    same = {c: np.tile(np.arange(4), 10) for c in range(3)}  # members then non-members
    member = {c: np.r_[np.ones(20), np.zeros(20)].astype(np.int8) for c in range(3)}
    out = class_mix(same, member, n_perm=199)
    assert out["chi2"] == 0.0 and out["p_value"] == 1.0 and not out["differs"]
    apart = {c: np.r_[np.full(20, c % 2), np.full(20, 2)] for c in range(3)}
    out = class_mix(apart, member, n_perm=199)
    assert out["p_value"] == pytest.approx(1 / 200) and out["differs"]
    assert out["total_variation"] == {"0": 1.0, "1": 1.0, "2": 1.0}


@pytest.mark.parametrize(("partition", "noted"), [("iid", False), ("shards:2", True)])
def test_a_non_iid_audit_says_its_members_differ_in_class_mix(partition, noted):
    """shards:2: each client holds two classes, the non-members all ten, so the class alone
    separates members from non-members; the null VUL (ghosts drawn like the non-members)
    cannot show it, and the audit now says so."""
    fed = fl.load_federation("digits", clients=5, partition=partition, test=600,
                             unlabeled=600, seed=0)
    result, _ = audit_federation("fedct", fed, "dt", rounds=1, period=5, seed=0, n_refs=2,
                                 n_members=60, n_population=50, aug_k=2, progress=False,
                                 attacks="loss")
    audit = result.extra["privacy"]["audit"]
    assert audit["class_mix"]["differs"] is noted
    assert any("class mix differs" in n for n in audit["notes"]) is noted
    if noted:
        assert min(audit["class_mix"]["total_variation"].values()) > 0.5
