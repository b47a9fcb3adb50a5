"""The stacked clients' MLP (``Linear`` and ``ReLU`` layers alone) as batched matrix
products, forward and, for its training step, backward by hand.

Clients that share an MLP train together on stacked weights (:mod:`fedlabels.learners.
batched`). Their forward pass is one ``baddbmm`` per layer (:class:`LinearStack`), the same
arithmetic as ``vmap`` of ``functional_call`` without its per-call dispatch. Their step's
gradient, that of the weighted cross-entropy ``sum(w * CE(logits, y))``, is computed here
without autograd (:meth:`LinearStack.gradients`): the output's gradient is
``w * (softmax(logits) - onehot(y))``, and each layer passes it back with two batched
matrix products and a row sum (a ``ReLU`` masks it where its output is 0). On a GPU the step
of a few small networks is bound by the host (the autograd engine's backward call was the
largest item of a paper-scale round on an H200); by hand it is 40 aten calls a step of the
paper's MLP where autograd's were 70 (docs/neural.md), and no engine. The gradients equal
autograd's up to floating-point rounding (``tests/test_stacked_mlp.py``, in float64
against autograd).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import torch
from torch import nn

#: a layer of the stack: (weight (clients, out, in), bias (clients, out) or None), or None
#: for a ReLU
Layer = tuple[torch.Tensor, torch.Tensor | None] | None


def linear_relu(model: nn.Module) -> TypeGuard[nn.Sequential]:
    """Whether ``model`` is a ``Sequential`` of ``Linear`` and ``ReLU`` layers alone, each
    module once (what :class:`LinearStack` runs; a layer used twice shares its weights,
    which the stack's per-layer gradients would not add up, and ``named_children`` lists a
    module once, so a ``ReLU`` used twice would drop out of the stack)."""
    return type(model) is nn.Sequential and each_module_once(model) and all(
        type(m) in (nn.Linear, nn.ReLU) for m in model)


def each_module_once(model: nn.Sequential) -> bool:
    """Whether no module appears twice in ``model`` (iterating a ``Sequential`` lists every
    use; ``children()`` and ``named_children()`` list a module used twice once)."""
    return len({id(m) for m in model}) == len(model)


class LinearStack:
    """The stacked clients' forward pass of a ``Linear``/``ReLU`` network: input
    (clients, rows, features), or (rows, features) that every client reads; output
    (clients, rows, classes). Given a list ``taps``, the forward pass appends each linear
    layer's (input, detached; output) to it (DP-SGD's per-example gradients,
    :mod:`fedlabels.learners.batched_dpsgd`)."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self.layers = list(layers)
        # the parameters themselves, each transposed in the call (_linear): a transpose
        # kept from here would keep its autograd node, and the parameters' gradient
        # accumulators with it, alive on the stream that built it, and a CUDA graph
        # captured on another stream fails in its backward ("would make the legacy stream
        # depend on a capturing blocking stream", seen on an H200 with torch 2.11)

    def __call__(self, x: torch.Tensor,
                 taps: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
        h = x
        for layer in self.layers:
            if layer is None:
                h = torch.relu(h)
                continue
            given = h
            h = _linear(h, *layer)
            if taps is not None:
                taps.append((given.detach(), h))
        return h

    def gradients(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> None:
        """Set every stacked parameter's ``.grad`` to the gradient of
        ``sum(w * cross_entropy(self(x), y))``, as ``loss.backward()`` would into unset
        gradients, without autograd. ``x`` (clients, rows, features); ``w`` (clients, rows),
        a row of weight 0 (padding) adds nothing; ``y`` each row's class (clients, rows),
        or its target distribution (clients, rows, classes): distillation's soft
        cross-entropy ``-sum(target * log_softmax)``."""
        with torch.no_grad():
            saved: list[torch.Tensor] = []  # a linear layer's input, a ReLU's output
            h = x
            for layer in self.layers:
                if layer is None:
                    h = torch.relu(h)
                    saved.append(h)
                else:
                    saved.append(h)
                    h = _linear(h, *layer)
            # d/dlogits of w * CE, in autograd's own arithmetic (so the clients' steps
            # round as alone): the loss's gradient at log_softmax's output (-w at the
            # row's class; -w * t for a soft target t), then log_softmax's backward,
            # which gives w * (softmax - onehot), or w * (softmax * sum(t) - t)
            logp = torch.log_softmax(h, dim=-1)
            minus_w = w.unsqueeze(-1).to(logp.dtype).neg()
            if y.is_floating_point():
                at_logp = y * minus_w
            else:
                at_logp = torch.zeros_like(logp).scatter_(-1, y.unsqueeze(-1), minus_w)
            g = torch.ops.aten._log_softmax_backward_data(at_logp, logp, -1, logp.dtype)
            first = next(k for k, layer in enumerate(self.layers) if layer is not None)
            for k in range(len(self.layers) - 1, first - 1, -1):
                layer = self.layers[k]
                if layer is None:  # ReLU: the gradient where its output was positive
                    g = torch.ops.aten.threshold_backward(g, saved[k], 0)
                    continue
                weight, bias = layer
                weight.grad = torch.bmm(g.transpose(1, 2), saved[k])
                if bias is not None:
                    bias.grad = g.sum(dim=1)
                if k > first:  # the gradient of the layer's input, for the layers before
                    g = torch.bmm(g, weight)


def _linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``h @ weight.T + bias`` per client (``h`` shared by all clients where 2-D)."""
    wt = weight.transpose(1, 2)
    if bias is None:
        return torch.matmul(h, wt)
    if h.dim() == 2:  # one input for every client: broadcast
        return torch.matmul(h, wt) + bias.unsqueeze(1)
    return torch.baddbmm(bias.unsqueeze(1), h, wt)


def linear_stack(base: nn.Module, params: dict[str, torch.Tensor]) -> LinearStack | None:
    """The stacked clients' :class:`LinearStack` over ``params`` (stacked, named as
    ``base``'s parameters) for a network of ``Linear`` and ``ReLU`` layers alone
    (:func:`linear_relu`, the MLP); ``None`` for any other network, which runs as ``vmap``
    of ``functional_call``."""
    if not linear_relu(base):
        return None
    return LinearStack([None if type(m) is nn.ReLU else (params[f"{name}.weight"],
                                                         params.get(f"{name}.bias"))
                        for name, m in base.named_children()])
