"""What a client hands to the clients-together rendezvous: one ``train_steps`` or one
``predict_proba`` call (kept apart from :mod:`fedlabels.learners.batched`, which runs
them, so the learners can build jobs without importing the runner)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class TrainJob:
    """One client's ``train_steps`` call."""

    learner: Any
    X: np.ndarray
    y: np.ndarray
    n_steps: int
    X_aux: np.ndarray | None = None
    y_aux: np.ndarray | None = None
    w_aux: np.ndarray | None = None
    aux_index: np.ndarray | None = None


@dataclass
class PredictJob:
    """One client's ``predict_proba`` call; ``out`` receives the probabilities."""

    learner: Any
    X: np.ndarray
    out: Any = None
