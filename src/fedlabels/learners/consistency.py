"""Consistency regularisation on unlabeled rows (FixMatch-style) for the torch learners:
what a learner is asked to do (no torch here, so the methods can declare their
options without loading it; the loss is in :mod:`fedlabels.learners.consistency_loss`).

Each training step draws one minibatch of the unlabeled rows, predicts it as it is (the
weak view, no gradient) and, where the top class probability reaches ``threshold``, takes
that class as the target of a strongly augmented view:

    loss_U = weight · mean_j 1[max_c p_jc >= threshold] · CE(f(aug(x_j)), argmax_c p_jc)

(the mean over the whole minibatch; rows below the threshold add 0), added to the step's
supervised loss. The augmentations draw from the learner's seeded generator (training
randomness, like minibatch order, not privacy noise):

* ``noise``: Gaussian noise of standard deviation ``strength`` times the row's RMS;
* ``dropout``: each feature zeroed with probability ``strength``, the rest scaled by
  ``1 / (1 - strength)``;
* ``shift``: rows as images (C, H, W), shifted by up to ``strength`` pixels each way
  (edges replicated) and flipped left-right with probability 1/2.

The MLP applies them to its input rows; the transformer learner to the pooled text
embedding (the head's input).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

AUGMENTATIONS = ("noise", "dropout", "shift")


@dataclass(frozen=True)
class Consistency:
    """What a learner's ``train_steps`` needs for the consistency loss on ``X``."""

    X: Any
    weight: float
    threshold: float
    augment: str = "noise"
    strength: float = 0.1
    #: (C, H, W) for ``shift``; None: square images guessed from the row length
    shape: tuple[int, int, int] | None = None


def image_shape(n_features: int) -> tuple[int, int, int] | None:
    """(1, s, s) for s² features, (3, s, s) for 3s², else None."""
    for channels in (1, 3):
        side = math.isqrt(n_features // channels)
        if n_features % channels == 0 and channels * side * side == n_features and side > 1:
            return (channels, side, side)
    return None
