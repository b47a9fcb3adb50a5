"""DS-FL's tempered softmax at a small temperature and FedMD's public subsets and sizes,
against the options' own descriptions."""

from __future__ import annotations

import numpy as np

from fedlabels.methods.distillation.dsfl import tempered_softmax
from fedlabels.methods.distillation.fedmd import FedMDOptions, fedmd_sizes, subset_indices


def test_tempered_softmax_stays_finite_at_a_small_temperature():
    """T = 0.001 (allowed: any T > 0) scales a probability gap of 0.9 to 900 nats: exp
    overflows unless the row maximum is taken out first."""
    p = tempered_softmax(np.array([[0.95, 0.05], [0.5, 0.5]]), 0.001)
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p, [[1.0, 0.0], [0.5, 0.5]], atol=1e-12)


def test_a_public_subset_of_all_of_u_is_every_row_once():
    for seed in range(5):
        assert subset_indices(seed, 50, 50).tolist() == list(range(50))
        sub = subset_indices(seed, 50, 20)
        assert len(np.unique(sub)) == 20 and sub.tolist() == sorted(sub.tolist())


def test_fedmd_default_sizes_follow_their_help():
    """|D₀| = min(1000, max(1, |U| // 5)) and |d_t| = min(5000, |U|) by default."""
    for n_public in (3, 9, 10, 1000, 7000):
        assert fedmd_sizes(FedMDOptions(), n_public) == (min(1000, max(1, n_public // 5)),
                                                         min(5000, n_public))
