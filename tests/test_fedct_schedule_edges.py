"""FedCT's pseudo-label weights by hand: vote_power raises each example's vote share to
the power p; the consistency loss ramps from 0 in round 0 over pseudo_warmup rounds."""

from __future__ import annotations

import numpy as np

from fedlabels.methods.fedct.fedct import FedCTOptions
from fedlabels.methods.fedct.schedule import example_weights
from fedlabels.methods.fedct.unlabeled import consistency_spec


def test_vote_power_raises_the_share_to_the_power():
    share = np.array([0.5, 0.75, 1.0])
    for p in (0.5, 2.0, 3.0):
        got = example_weights(FedCTOptions(vote_power=p), 0, share, 3)
        np.testing.assert_allclose(got, share ** p, rtol=1e-6)


def test_consistency_weight_ramps_from_zero_over_the_warmup():
    opts = FedCTOptions(consistency_weight=2.0, pseudo_warmup=4)
    X = np.zeros((3, 2))
    weights = [consistency_spec(opts, rnd, X).weight for rnd in range(6)]  # type: ignore
    assert weights == [0.0, 0.5, 1.0, 1.5, 2.0, 2.0]
