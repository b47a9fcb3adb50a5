"""Consistency regularisation on unlabeled rows (FixMatch-style) for the torch learners.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedlabels.core.errors import FedLabelsError

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


def _shift(x: torch.Tensor, spec: Consistency, rng: np.random.Generator) -> torch.Tensor:
    shape = spec.shape or image_shape(x.shape[1])
    if shape is None:
        raise FedLabelsError(f"augment shift needs image rows; {x.shape[1]} features are not "
                             "C x H x H (use augment noise or dropout).")
    n, (c, h, w) = len(x), shape
    pad = max(1, int(spec.strength))
    images = nn.functional.pad(x.reshape(n, c, h, w), (pad, pad, pad, pad), mode="replicate")
    offsets = torch.from_numpy(rng.integers(0, 2 * pad + 1, size=(n, 2)))
    flips = torch.from_numpy(rng.random(n) < 0.5)
    dev = x.device
    rows = (offsets[:, :1] + torch.arange(h)).to(dev)
    cols = (offsets[:, 1:] + torch.arange(w)).to(dev)
    cols = torch.where(flips[:, None].to(dev), cols.flip(1), cols)
    batch = torch.arange(n, device=dev)[:, None, None]
    crops = images.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
    return crops.permute(0, 3, 1, 2).reshape(n, -1)


def augment(x: torch.Tensor, spec: Consistency, rng: np.random.Generator) -> torch.Tensor:
    """The strong view of the (N, d) batch ``x``."""
    if spec.augment == "noise":
        rms = x.detach().pow(2).mean(dim=1, keepdim=True).sqrt()
        noise = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))
        return x + spec.strength * rms * noise.to(x.device)
    if spec.augment == "dropout":
        keep = torch.from_numpy(rng.random(x.shape) >= spec.strength).to(x.device)
        return x * keep / (1.0 - spec.strength)
    if spec.augment == "shift":
        return _shift(x, spec, rng)
    raise FedLabelsError(f"unknown augment {spec.augment!r}; use one of "
                         f"{', '.join(AUGMENTATIONS)}.")


def consistency_loss(spec: Consistency, x: torch.Tensor,
                     logits_of: Callable[[torch.Tensor], torch.Tensor],
                     rng: np.random.Generator) -> torch.Tensor:
    """``loss_U`` of the module docstring for the batch ``x`` (inputs of ``logits_of``)."""
    with torch.no_grad():
        conf, target = torch.softmax(logits_of(x.detach()), dim=1).max(dim=1)
        mask = (conf >= spec.threshold).float()
    losses = nn.functional.cross_entropy(logits_of(augment(x, spec, rng)), target,
                                         reduction="none")
    return spec.weight * (losses * mask).mean()
