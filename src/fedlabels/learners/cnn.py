"""The papers' convolutional networks, built for a given input shape (C, H, W).

From the FedCT paper's appendix (Abourayya et al., *Protecting Sensitive Data through
Federated Co-Training*): ``cifar10`` (Table 10), ``pneumonia`` (Table 12), ``mri``
(Table 13, the same stack as Pneumonia), ``svhn`` (Table 14). The tables give layers and
widths but no dropout rates or activations for Tables 12–14: we use ReLU after every
convolution and dense layer, dropout 0.25 after a pooled block and 0.5 before the output
layer. A max-pool is skipped where the image is already 1 pixel wide, and the first dense
layer takes whatever the stack outputs, so every architecture fits any (C, H, W), e.g.
Fashion-MNIST's (1, 28, 28) or the 8×8 digits.

``small`` is the CNN of McMahan et al. (2017) for 28×28 grey images (two 5×5
convolutions with 32 and 64 channels, each followed by 2×2 max-pooling, a dense layer of 512
units); ``resnet18`` is ResNet-18 for small images (He et al. 2016, with the 3×3 stem of
the CIFAR variant: four stages of two basic blocks, ``width`` 64–512 channels).

Every network is an ``nn.Sequential`` whose last module is the output layer, so the layer
before it gives the penultimate features (``hidden_features``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

ARCHITECTURES = ("cifar10", "pneumonia", "mri", "svhn", "small", "resnet18")


def _pool(size: list[int]) -> list[nn.Module]:
    """A 2×2 max-pool, unless the image is already 1 pixel high or wide."""
    if min(size) < 2:
        return []
    size[:] = [s // 2 for s in size]
    return [nn.MaxPool2d(2)]


def _conv(c_in: int, c_out: int, bn: bool) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU()]
    return layers + ([nn.BatchNorm2d(c_out)] if bn else [])


def cifar10(shape: tuple[int, int, int], n_classes: int) -> nn.Sequential:
    """Table 10: three blocks of two conv–ReLU–BN layers (32, 64, 128), pool, dropout;
    dense 128–ReLU–BN–dropout; linear output."""
    size, layers, c = list(shape[1:]), [], shape[0]
    for width in (32, 64, 128):
        layers += [*_conv(c, width, True), *_conv(width, width, True), *_pool(size),
                   nn.Dropout(0.25)]
        c = width
    flat = c * size[0] * size[1]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(),
                         nn.BatchNorm1d(128), nn.Dropout(0.5), nn.Linear(128, n_classes))


def pneumonia(shape: tuple[int, int, int], n_classes: int) -> nn.Sequential:
    """Tables 12 and 13: conv 32–BN, conv 64–BN, pool, conv 64–BN, pool, linear output."""
    size = list(shape[1:])
    layers = [*_conv(shape[0], 32, True), *_conv(32, 64, True), *_pool(size),
              *_conv(64, 64, True), *_pool(size)]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * size[0] * size[1], n_classes))


def svhn(shape: tuple[int, int, int], n_classes: int) -> nn.Sequential:
    """Table 14: three blocks (32, 64, 128) of conv–BN, conv, pool, dropout; dense 128,
    dropout, linear output."""
    size, layers, c = list(shape[1:]), [], shape[0]
    for width in (32, 64, 128):
        layers += [*_conv(c, width, True), *_conv(width, width, False), *_pool(size),
                   nn.Dropout2d(0.25)]
        c = width
    flat = c * size[0] * size[1]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(),
                         nn.Dropout(0.5), nn.Linear(128, n_classes))


def small(shape: tuple[int, int, int], n_classes: int) -> nn.Sequential:
    """McMahan et al.'s CNN: 5×5 conv 32, pool, 5×5 conv 64, pool, dense 512, output."""
    size = list(shape[1:])
    layers: list[nn.Module] = [nn.Conv2d(shape[0], 32, 5, padding=2), nn.ReLU(),
                               *_pool(size), nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(),
                               *_pool(size)]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * size[0] * size[1], 512),
                         nn.ReLU(), nn.Linear(512, n_classes))


class BasicBlock(nn.Module):
    """Two 3×3 conv–BN layers with a shortcut (a 1×1 conv–BN where the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out))
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride,
                                                    bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet18(shape: tuple[int, int, int], n_classes: int, width: int = 64) -> nn.Sequential:
    """ResNet-18 (CIFAR stem): stages of two basic blocks, ``width``·(1, 2, 4, 8) channels."""
    layers: list[nn.Module] = [nn.Conv2d(shape[0], width, 3, padding=1, bias=False),
                               nn.BatchNorm2d(width), nn.ReLU()]
    c = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        out = width * mult
        layers += [BasicBlock(c, out, 1 if stage == 0 else 2), BasicBlock(out, out, 1)]
        c = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(c, n_classes))


BUILDERS: dict[str, Callable[..., nn.Sequential]] = {
    "cifar10": cifar10, "pneumonia": pneumonia, "mri": pneumonia, "svhn": svhn,
    "small": small, "resnet18": resnet18}
