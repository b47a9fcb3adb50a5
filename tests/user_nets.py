"""User-defined torch networks for the tests of ``module:`` model specs and TorchModel."""

from __future__ import annotations

import torch
from torch import nn


def tiny_mlp(n_features: int, n_classes: int) -> nn.Module:
    """A user's own network on flat rows."""
    return nn.Sequential(nn.Linear(n_features, 24), nn.Tanh(), nn.Linear(24, n_classes))


def tiny_cnn(n_classes: int, input_shape: tuple[int, int, int]) -> nn.Module:
    """A user's own network on images: it names input_shape, so it gets (N, C, H, W)."""
    c, h, w = input_shape
    return nn.Sequential(nn.Conv2d(c, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * h * w, n_classes))


class Residual(nn.Module):
    """Not an nn.Sequential: no penultimate layer for hidden_features."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        super().__init__()
        self.a = nn.Linear(n_features, n_features)
        self.out = nn.Linear(n_features, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x + torch.relu(self.a(x)))


def wrong_width(n_features: int, n_classes: int) -> nn.Module:
    """Outputs n_classes + 1 columns: refused."""
    return nn.Linear(n_features, n_classes + 1)


def not_a_module(n_features: int, n_classes: int) -> object:
    """Returns something that is not a torch module: refused."""
    return {"weights": [1, 2, 3]}


def sgd(params):  # a user's optimiser factory
    return torch.optim.SGD(params, lr=0.05)


class WithBuffer(nn.Module):
    """A user's network with a buffer (a fixed input scale): stacked with its buffers."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((n_features,), 0.5))
        self.out = nn.Linear(n_features, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x * self.scale)


def with_buffer(n_features: int, n_classes: int) -> nn.Module:
    return WithBuffer(n_features, n_classes)


def cumulative_bn(n_features: int, n_classes: int) -> nn.Module:
    """Batch normalisation with a cumulative average (``momentum=None``): trained alone."""
    return nn.Sequential(nn.Linear(n_features, 16), nn.BatchNorm1d(16, momentum=None),
                         nn.ReLU(), nn.Linear(16, n_classes))


def bn_net(n_features: int, n_classes: int) -> nn.Module:
    """Batch normalisation (1-d, after a linear layer without a bias: a bias there has no
    gradient but rounding's, which Adam would amplify), no dropout."""
    return nn.Sequential(nn.Linear(n_features, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
                         nn.Linear(16, n_classes))


def bn_dropout_net(n_features: int, n_classes: int, p: float = 0.3) -> nn.Module:
    """Batch normalisation and dropout."""
    return nn.Sequential(nn.Linear(n_features, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
                         nn.Dropout(p), nn.Linear(16, n_classes))


def bn_without_running_stats(n_features: int, n_classes: int) -> nn.Module:
    """Batch normalisation that uses the batch's statistics in evaluation too."""
    return nn.Sequential(nn.Linear(n_features, 16, bias=False),
                         nn.BatchNorm1d(16, track_running_stats=False), nn.ReLU(),
                         nn.Linear(16, n_classes))


class FunctionalDropout(nn.Module):
    """Dropout drawn with ``F.dropout``, not an ``nn.Dropout`` layer; ``always``: in
    evaluation too (Monte Carlo dropout), so prediction draws random numbers."""

    def __init__(self, n_features: int, n_classes: int, always: bool = False) -> None:
        super().__init__()
        self.a = nn.Linear(n_features, 16)
        self.out = nn.Linear(16, n_classes)
        self.always = always

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.dropout(torch.relu(self.a(x)), 0.3,
                                  training=self.training or self.always)
        return self.out(h)


def functional_dropout(n_features: int, n_classes: int) -> nn.Module:
    return FunctionalDropout(n_features, n_classes)


def always_dropout(n_features: int, n_classes: int) -> nn.Module:
    return FunctionalDropout(n_features, n_classes, always=True)


def dropout_net(n_features: int, n_classes: int) -> nn.Module:
    """Dropout as a layer, in a network that is not a plain Linear/ReLU stack."""
    return nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Dropout(0.3),
                         nn.Linear(16, n_classes))


def shared_relu(n_features: int, n_classes: int) -> nn.Module:
    """One ReLU object used twice (``named_children`` lists it once)."""
    act = nn.ReLU()
    return nn.Sequential(nn.Linear(n_features, 16), act, nn.Linear(16, 8), act,
                         nn.Linear(8, n_classes))


class RowNormalised(nn.Module):
    """Each input row scaled to unit norm: its gradient at a row of zeros is NaN."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        super().__init__()
        self.out = nn.Linear(n_features, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x / x.norm(dim=-1, keepdim=True))


def row_normalised(n_features: int, n_classes: int) -> nn.Module:
    return RowNormalised(n_features, n_classes)


class NoWeights(nn.Module):
    """Slices its input into logits: no parameter to train (refused in one line)."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes = n_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :self.n_classes]


def no_weights(n_features: int, n_classes: int) -> nn.Module:
    return NoWeights(n_classes)


def needs_depth(n_features: int, n_classes: int, depth: int) -> nn.Module:
    """A factory with an argument of its own and no default: the spec must give it."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(n_features, n_features), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(n_features, n_classes))


def too_big(n_features: int, n_classes: int) -> nn.Module:
    """A hidden layer of 2^46 weights (256 TiB, beyond any address space): building it
    fails at once in torch's allocator, under any overcommit setting."""
    hidden = 2**46 // n_features
    return nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))


class HugeActivations(nn.Module):
    """Small weights, but a training forward pass whose intermediate (batch x 2^44 floats)
    no machine holds; predicting (evaluation mode) is cheap."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        super().__init__()
        self.out = nn.Linear(n_features, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.out(x)
        if self.training:
            logits = logits + x.new_zeros(len(x), 2**44).sum(1, keepdim=True)
        return logits


def huge_activations(n_features: int, n_classes: int) -> nn.Module:
    return HugeActivations(n_features, n_classes)


def buggy(n_features: int, n_classes: int) -> nn.Module:
    """A factory with a bug of its own: it raises."""
    raise ValueError(f"no layout for {n_features} features")
