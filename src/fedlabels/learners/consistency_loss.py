"""The consistency loss of :mod:`fedlabels.learners.consistency` in torch: the augmentations
and the thresholded cross-entropy on the strong view."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.consistency import AUGMENTATIONS, Consistency, image_shape


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
    return shifted_crops(images, offsets, flips, h, w).reshape(n, -1)


def shifted_crops(padded: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor,
                  h: int, w: int) -> torch.Tensor:
    """The h x w crops (N, C, h, w) of padded images (N, C, H', W') at ``offsets`` (N, 2),
    flipped horizontally where ``flips`` (N,): one gather for the whole batch."""
    dev = padded.device
    rows = (offsets[:, :1] + torch.arange(h)).to(dev)
    cols = (offsets[:, 1:] + torch.arange(w)).to(dev)
    cols = torch.where(flips[:, None].to(dev), cols.flip(1), cols)
    batch = torch.arange(len(padded), device=dev)[:, None, None]
    crops = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
    return crops.permute(0, 3, 1, 2)


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
