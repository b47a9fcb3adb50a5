"""DP-FedAvg's server step against McMahan et al. (2018)'s fixed-denominator estimator.

Oracle: w_{t+1} - w_t = η · (Σ_i clip(Δ_i) + N(0, σ²S²I)) / (q·M), so with clients that
send zero updates the change of the global weights is Gaussian with standard deviation
η·σ·S / (q·M) per coordinate, whatever number of clients the secret Poisson sample picked
(a denominator of the realised number would scale it by q·M / k). And one client's clipped
update moves the mean by η·Δ / (q·M).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from fedlabels.comm import Message
from fedlabels.method.base import Settings
from fedlabels.methods.fedavg.dp_fedavg import DPFedAvgOptions, DPFedAvgServer, clip_update


class ConstantUpdates:
    """A grid whose clients reply with a fixed (already clipped) update each."""

    def __init__(self, updates: Mapping[int, np.ndarray]) -> None:
        self.updates = dict(updates)
        self.asked: list[int] = []

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.updates)

    def exchange(self, messages: Mapping[int, Message], rnd: int) -> dict[int, Message]:
        self.asked.append(len(messages))
        return {cid: Message("dpfedavg.update", arrays={"update": self.updates[cid]},
                             config={"norm": float(np.linalg.norm(self.updates[cid]))})
                for cid in messages}


def server(m: int, d: int, **options: float) -> DPFedAvgServer:
    opts = DPFedAvgOptions(**options)  # type: ignore[arg-type]
    settings = Settings(n_classes=2, n_features=d, n_clients=m, rounds=4, period=1,
                        options=opts)
    return DPFedAvgServer(np.zeros(d, dtype=np.float32), settings)


@pytest.mark.parametrize("q", [1.0, 0.5])
def test_noise_std_is_sigma_clip_over_expected_clients(q: float) -> None:
    m, d, sigma, clip, lr = 4, 200_000, 3.0, 0.5, 2.0
    srv = server(m, d, noise_multiplier=sigma, clip=clip, sample_rate=q, server_lr=lr)
    grid = ConstantUpdates({cid: np.zeros(d, dtype=np.float32) for cid in range(m)})
    expected = lr * sigma * clip / (q * m)
    for rnd in range(4):
        before = srv.weights.astype(np.float64)
        srv.run_round(rnd, grid)
        step = srv.weights.astype(np.float64) - before
        # 2e5 draws: the sample std is within 1 % of the truth (its sd is ~0.16 %)
        assert step.std() == pytest.approx(expected, rel=0.01)
        assert abs(step.mean()) < 5 * expected / np.sqrt(d)


def test_one_update_moves_the_mean_by_update_over_expected_clients() -> None:
    m, d, clip = 5, 100_000, 1.0
    update = np.zeros(d, dtype=np.float32)
    update[0] = clip  # a clipped update of norm S in the first coordinate
    srv = server(m, d, noise_multiplier=1e-6, clip=clip, sample_rate=1.0)
    grid = ConstantUpdates({0: update, **{c: np.zeros(d, dtype=np.float32)
                                           for c in range(1, m)}})
    srv.run_round(0, grid)
    assert srv.weights[0] == pytest.approx(clip / m, rel=1e-4)
    assert grid.asked == [m]


def test_clipping_scales_an_update_down_to_the_clip_never_up() -> None:
    """clip(Δ) = Δ · min(1, S/‖Δ‖): an update within S is sent as it is, one beyond it along
    its direction with norm S (the formula; a factor above 1 would change the update, not
    only bound it)."""
    rng = np.random.default_rng(0)
    direction = rng.normal(size=50)
    direction /= np.linalg.norm(direction)
    for norm in (0.1, 0.49, 0.9, 2.0, 30.0):
        clipped, seen = clip_update((norm * direction).astype(np.float32), 1.0)
        assert seen == pytest.approx(norm, rel=1e-6)
        np.testing.assert_allclose(clipped, min(norm, 1.0) * direction, rtol=1e-5, atol=1e-7)
