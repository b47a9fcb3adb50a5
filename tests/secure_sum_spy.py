"""What the members of a secure aggregation mask and the noise shares they draw, recorded
on the real functions (DP-FedAvg's and DP-PATE's ``aggregation=secure`` tests)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedlabels.privacy import discrete_gaussian
from fedlabels.secure import masked_sum


class Spy:
    """Records what each client masks (its integer vector plus noise) and its noise shares
    (``noise``: (σ, sample) in the order drawn)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.values: dict[int, np.ndarray] = {}
        self.noise: list[tuple[float, np.ndarray]] = []
        mask, sample = masked_sum.mask_vector, discrete_gaussian.sample_discrete_gaussian

        def mask_vector(values: np.ndarray, my_id: int, *args: Any) -> np.ndarray:
            self.values[my_id] = np.asarray(values, dtype=np.int64).copy()
            return mask(values, my_id, *args)

        def sampler(sigma: float, size: int, rng: np.random.Generator) -> np.ndarray:
            out = sample(sigma, size, rng)
            self.noise.append((sigma, out.copy()))
            return out

        monkeypatch.setattr(masked_sum, "mask_vector", mask_vector)
        monkeypatch.setattr(discrete_gaussian, "sample_discrete_gaussian", sampler)
