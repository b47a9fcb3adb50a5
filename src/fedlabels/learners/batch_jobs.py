"""What a client hands to the clients-together rendezvous: one ``train_steps``,
``distill_steps``, DP-SGD or ``predict_proba`` call (kept apart from the modules that run
them, :mod:`fedlabels.learners.batched` and its neighbours, so the learners can build jobs
without importing the runners)."""

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


@dataclass
class DistillJob:
    """One client's ``distill_steps`` call (soft targets, plus its private rows if given)."""

    learner: Any
    X_soft: np.ndarray
    P_soft: np.ndarray
    n_steps: int
    X: np.ndarray | None = None
    y: np.ndarray | None = None
    weight: float = 1.0


@dataclass
class DPSGDJob:
    """One client's DP-SGD call (:func:`fedlabels.learners.dpsgd.dpsgd_steps`): its secret
    generator ``rng`` draws its Poisson samples and its noise, as when it trains alone."""

    learner: Any
    X: np.ndarray
    y: np.ndarray
    n_steps: int
    config: Any
    rng: np.random.Generator
    X_aux: np.ndarray | None = None
    y_aux: np.ndarray | None = None
    aux_index: np.ndarray | None = None
