"""DP-SGD for the torch MLPs: Poisson sampling, per-example clipping, Gaussian noise.

One step of :func:`dpsgd_steps` (Abadi et al. 2016, with Poisson sampling as the RDP/PLD
analysis of the subsampled Gaussian assumes):

1. every private record joins the batch independently with probability q (the **sample is
   secret**: it is drawn from the caller's CSPRNG-seeded generator, never the run seed —
   amplification by subsampling needs it hidden);
2. each example's gradient is scaled to L2 norm at most C over all parameters (computed
   exactly per example from the layers' inputs and output gradients, see
   :func:`clipped_gradient_sum`);
3. the clipped gradients are summed and N(0, σ²C² I) is added (noise from the same secret
   generator); adding or removing one record moves the sum by at most C, so the step is the
   Poisson-subsampled Gaussian mechanism with noise multiplier σ;
4. if given, the per-example-clipped gradients of a minibatch of public auxiliary examples
   are added (FedCT's pseudo-labelled U: public data and post-processing of earlier DP
   releases, so they need no noise; clipped to the same C so that neither source dominates
   the step); the sum is divided by the *expected* number of examples (q·n, fixed, not the
   realised batch, plus the auxiliary batch) and the learner's Adam optimizer steps
   (post-processing).

The caller accounts for every step taken (:mod:`fedlabels.privacy.dpsgd_accounting`). Opacus
1.6.0 is not used for training: our MLP is a plain ``nn.Sequential`` of linear layers whose
per-example gradient norms come in closed form, and this keeps the sample and the noise under
our secret generator (Opacus draws its own unless ``secure_mode``, which needs torchcsprng).
Opacus's RDP accountant serves as an independent check of ours in the tests. Other torch
networks (your own module, a CNN without batch normalisation) get their per-example
gradients from ``torch.func`` (``vmap`` of ``grad``), the same clipping and the same noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import torch
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.stacked_mlp import each_module_once
from fedlabels.learners.torch_mlp import adam_step, release_gradients
from fedlabels.privacy.validation import check_noise_multiplier, check_sampling_rate


@dataclass(frozen=True)
class DPSGDConfig:
    """σ (noise multiplier), q (Poisson sampling rate per step) and C (per-example clip)."""

    noise_multiplier: float
    sample_rate: float
    clip: float

    def __post_init__(self) -> None:
        check_noise_multiplier(self.noise_multiplier)
        check_sampling_rate(self.sample_rate)
        if not self.clip > 0:
            raise FedLabelsError(f"the per-example clipping norm must be > 0, got {self.clip}.")


def check_dpsgd_learner(learner: Any, who: str) -> None:
    """DP-SGD trains torch classifiers (it needs per-example gradients) without batch
    normalisation (which mixes the examples of a batch) and with the default loss."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    if isinstance(learner, TorchMLPClassifier) and learner._target_dtype is np.int64 and (
            getattr(learner, "loss", None) is not None or _has_batch_norm(learner)):
        raise FedLabelsError(
            f"{who} trains with DP-SGD, which needs per-example gradients of cross-entropy: "
            f"a network with batch normalisation or its own loss cannot be used; pick one "
            "without (e.g. cnn(arch=small), or your module with the default loss).")
    from fedlabels.learners.text_input import accepts_text

    if accepts_text(learner):  # an mlp takes numbers, so the advice below cannot apply
        raise FedLabelsError(
            f"{who} trains with DP-SGD, which needs a torch MLP classifier on numeric "
            f"features; no text learner takes it (got {type(learner).__name__}): on text use "
            "--mechanism xor or --mechanism kary.")
    if not isinstance(learner, TorchMLPClassifier) or learner._target_dtype is not np.int64:
        raise FedLabelsError(
            f"{who} trains with DP-SGD, which needs a torch MLP classifier (e.g. --model "
            f"'mlp(hidden=128)'), got {type(learner).__name__}; DP tree learners are not "
            "supported (no maintained DP tree fits this protocol yet).")


def dpsgd_fit(learners: list[Any]) -> str:
    """What DP-SGD makes of a run's ``learners``: ``"yours"`` (it trains every one),
    ``"no-batch-norm"`` (a torch network with batch normalisation or its own loss) or
    ``"mlp"`` (another learner: a torch network must replace it)."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    kinds = []
    for learner in learners:
        try:
            check_dpsgd_learner(learner, "")
            kinds.append("yours")
        except FedLabelsError:
            torch_net = isinstance(learner, TorchMLPClassifier) and \
                learner._target_dtype is np.int64
            kinds.append("no-batch-norm" if torch_net else "mlp")
    return next((k for k in ("mlp", "no-batch-norm") if k in kinds), "yours")


def _has_batch_norm(learner: Any) -> bool:
    """Whether the learner's network (built, or as its spec would build it) normalises
    over the batch."""
    network = getattr(learner, "network", None)
    if network is None:
        return False
    model = getattr(learner, "model_", None)
    if model is not None:
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    return network in ("cifar10", "pneumonia", "mri", "svhn", "resnet18")


def _is_linear_stack(model: nn.Module) -> TypeGuard[nn.Sequential]:
    """A ``Sequential`` of ``Linear`` and parameterless layers, each module used once
    (:func:`~fedlabels.learners.stacked_mlp.each_module_once`)."""
    return isinstance(model, nn.Sequential) and all(
        isinstance(m, nn.Linear) or not any(True for _ in m.parameters())
        for m in model) and each_module_once(model)


def _clipped_sum_func(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, clip: float
                      ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """:func:`clipped_gradient_sum` for any network, per-example gradients by torch.func."""
    from torch.func import functional_call, grad, vmap

    names = [n for n, _ in model.named_parameters()]
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, (p, buffers), (x.unsqueeze(0),))
        return nn.functional.cross_entropy(out.float(), y.unsqueeze(0))

    # "different": a network with dropout draws each example's masks (its gradient is that
    # of its own masked pass); torch refused random draws under vmap by default
    per = vmap(grad(loss), in_dims=(None, 0, 0), randomness="different")(params, xb, yb)
    norms = torch.sqrt(sum(per[n].flatten(1).pow(2).sum(1) for n in names))
    ok, scale = clip_scale(norms, clip)
    masked = xb.device.type != "cpu" or not bool(ok.all())  # as clipped_gradient_sum's
    summed = []
    for n in names:
        shape = (-1, *[1] * (per[n].dim() - 1))
        scaled = per[n] * scale.view(shape)
        summed.append((torch.where(ok.view(shape), scaled, 0.0) if masked else scaled).sum(0))
    return summed, norms


def clip_scale(norms: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(finite, scale): per example, whether its gradient is finite, and its clip factor
    ``min(1, C / norm)``, 0 where it is not. A non-finite gradient adds nothing, never NaN to
    the sum: model weights a server chose can overflow on chosen records only, and a NaN
    update would then show, without noise, whether such a record was sampled."""
    ok = torch.isfinite(norms)
    return ok, torch.where(ok, torch.clamp(clip / (norms + 1e-12), max=1.0), 0.0)


def clipped_gradient_sum(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, clip: float
                         ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Σ_i clip_C(∇ℓ(x_i, y_i)) per parameter, and the per-example norms before clipping.

    For a stack of ``Linear`` and elementwise layers, example i's gradient of a linear
    layer is ``b_i a_iᵀ`` (weight) and ``b_i`` (bias), with a_i the layer's input and b_i the
    gradient of the summed loss at its output; so ``||g_i||² = Σ_layers ||b_i||²(||a_i||² +
    1)`` and the clipped sum is ``(s ⊙ B)ᵀ A`` — exact per-example clipping without
    materialising per-example gradients (one forward, one backward pass).
    """
    params = list(model.parameters())
    if len(yb) == 0:
        return [torch.zeros_like(p) for p in params], torch.zeros(0)
    if not _is_linear_stack(model):
        return _clipped_sum_func(model, xb, yb, clip)
    inputs, outputs = [], []
    h = xb
    for layer in model:
        if isinstance(layer, nn.Linear):
            inputs.append(h.detach())
            h = layer(h)
            outputs.append(h)
        else:
            h = layer(h)
    loss = nn.functional.cross_entropy(h, yb, reduction="sum")
    back = torch.autograd.grad(loss, outputs)
    sq = sum((b.pow(2).sum(dim=1) * (a.pow(2).sum(dim=1) + 1.0))
             for a, b in zip(inputs, back, strict=True))
    norms = torch.sqrt(torch.as_tensor(sq))
    ok, scale = clip_scale(norms, clip)  # a non-finite example: 0, its a and b too (0·inf)
    # on the CPU, where reading it costs no wait, a batch of finite examples (the usual
    # case) skips the masks, each a copy of a layer's inputs that would change nothing
    masked = xb.device.type != "cpu" or not bool(ok.all())
    summed: list[torch.Tensor] = []
    for a, b in zip(inputs, back, strict=True):
        sb = b * scale[:, None]
        if masked:
            sb, a = torch.where(ok[:, None], sb, 0.0), torch.where(ok[:, None], a, 0.0)
        summed += [sb.T @ a, sb.sum(dim=0)]
    return summed, norms


def dpsgd_steps(mlp: Any, X: np.ndarray, y: np.ndarray, n_steps: int, config: DPSGDConfig,
                rng: np.random.Generator, X_aux: np.ndarray | None = None,
                y_aux: np.ndarray | None = None, aux_index: np.ndarray | None = None,
                rendezvous: Any = None) -> int:
    """Take ``n_steps`` DP-SGD steps on the private ``(X, y)``; returns the steps taken.

    ``rng`` must be a secret generator (:func:`fedlabels.core.randomness.numpy_generator`): it
    draws the Poisson sample and the noise. The auxiliary set ``X_aux[aux_index]`` (public)
    contributes one plain minibatch per step, as in :meth:`TorchMLPClassifier.train_steps`.
    With a rendezvous (``rendezvous``, else the learner's own when the simulator's clients
    train together) the steps run with the other clients'
    (:mod:`fedlabels.learners.batched_dpsgd`), drawn from the same ``rng``.
    """
    if int(n_steps) != n_steps or n_steps < 0:
        raise FedLabelsError(f"DP-SGD steps must be an integer >= 0, got {n_steps!r}.")
    X = np.ascontiguousarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    mlp._ensure_initialised(X, y)
    mlp._resident()
    if rendezvous is not None or mlp._rendezvous is not None:
        from fedlabels.learners.batch_jobs import DPSGDJob

        job = DPSGDJob(mlp, X, y, int(n_steps), config, rng, X_aux, y_aux, aux_index)
        if rendezvous is None:
            mlp._hand_over(job)
        else:  # another learner's (DP-FedCT's labeller joins its client's site model's)
            rendezvous.submit(job)
        return int(n_steps)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    n, q, clip = len(y), config.sample_rate, config.clip
    expected = q * n
    n_aux = 0 if X_aux is None or y_aux is None else len(y_aux)
    if n_aux:
        Xa = torch.from_numpy(np.ascontiguousarray(X_aux, dtype=np.float32))
        ya = torch.from_numpy(np.asarray(y_aux, dtype=np.int64))
        rows = None if aux_index is None else torch.from_numpy(
            np.asarray(aux_index, dtype=np.int64))
        aux = mlp._cursor(1, n_aux)  # public rows: the seeded minibatch order is fine
    model, opt = mlp.model_, mlp.optimizer_
    params = list(model.parameters())
    model.train()
    for _ in range(int(n_steps)):
        idx = torch.from_numpy(np.flatnonzero(rng.random(n) < q))
        dev = mlp.device
        # training inputs: a network that augments crops and flips each example (its
        # own draws, from the learner's seeded generator), as its plain steps do
        summed, _ = clipped_gradient_sum(model, mlp._inputs(Xt[idx].to(dev), True),
                                         yt[idx].to(dev), clip)
        # in place: the sums and the drawn noise are this step's own tensors
        noisy = [s.add_(torch.from_numpy(rng.standard_normal(tuple(s.shape), dtype=np.float32))
                        .to(dev).mul_(config.noise_multiplier * clip)) for s in summed]
        weight = expected
        if n_aux:  # public: clipped like the private examples (no source dominates), no noise
            aidx = torch.from_numpy(aux.next())
            xa = Xa[aidx] if rows is None else Xa[rows[aidx]]
            public, _ = clipped_gradient_sum(model, mlp._inputs(xa.to(dev), True),
                                             ya[aidx].to(dev), clip)
            noisy = [g.add_(a) for g, a in zip(noisy, public, strict=True)]
            weight += len(aidx)
        for p, g in zip(params, noisy, strict=True):
            p.grad = g.div_(weight)
        adam_step(opt)
    release_gradients(opt)
    mlp.steps_ += int(n_steps)
    return int(n_steps)
