"""Any torch network as a learner: the papers' CNNs by name, or your own ``nn.Module``.

:class:`TorchNetClassifier` is the torch MLP's learner (warm-started ``train_steps``,
``distill_steps``, batched prediction, flat weights for FedAvg, its whole state as plain
arrays) with another network. Rows stay flat in the federation; for images the learner
reshapes each batch to (N, C, H, W) with ``input_shape`` (given, or the dataset's, or
guessed from a square number of features) and, with ``augment``, draws a random crop (zero
padding ``H // 8``) and a horizontal flip per training example from its seeded generator,
which also seeds the dropout masks of each step (a run repeats; so does a restored state).

``network`` is an architecture of :mod:`fedlabels.learners.cnn` or a factory: any callable
returning an ``nn.Module`` whose output is (batch, n_classes); it is called with those of
``n_features``, ``n_classes`` and ``input_shape`` that it names, under a torch RNG seeded
from the learner's seed (the global RNG is left as it was). ``optimizer`` (``params ->
torch.optim.Optimizer``, default Adam) and ``loss`` (``(logits, y) -> scalar``, default
cross-entropy) are optional callables too.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypedDict, Unpack

import numpy as np
import torch
from torch import nn

from fedlabels.core.errors import FedLabelsError, out_of_memory, raised_at
from fedlabels.learners.cnn import ARCHITECTURES, BUILDERS
from fedlabels.learners.consistency_loss import shifted_crops
from fedlabels.learners.model_spec import (
    SPEC_NAMES,
    factory_parameters,
    missing_factory_arguments,
)
from fedlabels.learners.seeds import RandomStateLike
from fedlabels.learners.torch_mlp import TorchMLPClassifier, check_numbers

#: rows per forward pass when predicting, when ``predict_batch_size`` is None: on a CPU the
#: small CNN predicted 28x28 images in chunks of 256 in 0.61-0.80x the time of 1024 (one
#: torch thread, the CLI's default; about equal with two; docs/neural.md has the command
#: and the figures); a GPU keeps 1024
PREDICT_BATCH_CPU = 256
PREDICT_BATCH_GPU = 1024


def guess_shape(n_features: int) -> tuple[int, int, int] | None:
    """(1, s, s) for s² features, (3, s, s) for 3s², else None."""
    for channels in (1, 3):
        side = math.isqrt(n_features // channels)
        if n_features % channels == 0 and channels * side * side == n_features and side > 1:
            return (channels, side, side)
    return None


def factory_name(factory: Any) -> str:
    """``module:qualname`` of a factory (what a result and a state record)."""
    return f"{getattr(factory, '__module__', '?')}:" \
           f"{getattr(factory, '__qualname__', type(factory).__name__)}"


def module_text(module: nn.Module) -> str:
    """A loss module as it was built: ``CrossEntropyLoss(label_smoothing=0.1)``, its
    plain settings that differ from the class's defaults (torch's own repr shows none:
    ``CrossEntropyLoss()`` whatever the smoothing) and the shapes of its tensors (a class
    weight); the repr where the class cannot be built without arguments."""
    try:
        default = type(module)()
    except Exception:
        return repr(module)
    plain = (bool, int, float, str, type(None))
    changed = {k: v for k, v in vars(module).items()
               if not k.startswith("_") and k != "training" and isinstance(v, plain)
               and getattr(default, k, object()) != v}
    inner = [f"{k}={v!r}" for k, v in changed.items()]
    inner += [f"{k}=tensor{list(v.shape)}" for k, v in  # a class weight: its shape
              {**module._buffers, **module._parameters}.items() if v is not None]
    return f"{type(module).__name__}({','.join(inner)})"


def _has_dropout(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())


class TorchNetClassifier(TorchMLPClassifier):
    """A torch network trained like the MLP (Adam, cross-entropy, warm-started steps).

    Parameters
    ----------
    network : str or callable, default="small"
        An architecture of :mod:`fedlabels.learners.cnn` (``cifar10``, ``pneumonia``,
        ``mri``, ``svhn``, ``small``, ``resnet18``) or a factory returning an ``nn.Module``.
    input_shape : tuple of int or None, default=None
        (C, H, W) of the images; ``None``: the dataset's recorded shape (set by the run), or
        a guess from the number of features (784 -> (1, 28, 28)); a factory without it gets
        flat rows.
    augment : bool, default=False
        Random crop (zero padding H // 8) and horizontal flip of training images.
    width : int, default=64
        Channels of ResNet-18's first stage; another network refuses another value (a
        factory's own ``width`` goes in ``functools.partial(factory, width=...)``).
    optimizer, loss : callable or None
        ``params -> Optimizer`` and ``(logits, y) -> loss``; ``None``: Adam with
        ``learning_rate`` and ``weight_decay``, and cross-entropy.
    predict_batch_size : int or None, default=None
        Rows per forward pass when predicting; None: by device, 256 on a CPU
        (:data:`PREDICT_BATCH_CPU`), 1024 on a GPU.
    n_classes, learning_rate, batch_size, max_steps, weight_decay, warm_start,
    random_state :
        As for :class:`~fedlabels.learners.torch_mlp.TorchMLPClassifier`.
    """

    _spec_names: ClassVar[dict[str, str]] = {"lr": "learning_rate", "arch": "network",
                                             "shape": "input_shape"}

    def __init__(self, network: str | Callable[..., nn.Module] = "small",
                 input_shape: Sequence[int] | None = None, n_classes: int | None = None,
                 learning_rate: float = 1e-3, batch_size: int = 64, max_steps: int = 500,
                 weight_decay: float = 0.0, predict_batch_size: int | None = None,
                 warm_start: bool = False, augment: bool = False, width: int = 64,
                 optimizer: Callable[..., torch.optim.Optimizer] | None = None,
                 loss: Callable[..., torch.Tensor] | None = None,
                 random_state: RandomStateLike = None) -> None:
        self.network = network
        self.input_shape = input_shape
        self.n_classes = n_classes
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.weight_decay = weight_decay
        self.predict_batch_size = predict_batch_size
        self.warm_start = warm_start
        self.augment = augment
        self.width = width
        self.optimizer = optimizer
        self.loss = loss
        self.random_state = random_state

    def spec_text(self) -> str:
        """What a result records for this learner: for your own factory
        ``module:MODULE:FACTORY(key=value,...)`` (a ``functools.partial``'s keywords, then
        the parameters set away from their defaults, named as in a spec: ``lr``, ``shape``),
        as ``--model`` writes it; else the class name."""
        import functools

        factory: Any = self.network
        params: dict[str, Any] = {}
        if isinstance(factory, str):
            return type(self).__name__
        while isinstance(factory, functools.partial):
            params = {**factory.keywords, **params}
            if factory.args:
                params["args"] = "-".join(map(repr, factory.args))
            factory = factory.func
        names = {v: k for k, v in SPEC_NAMES.items()}
        for name, p in inspect.signature(type(self)).parameters.items():
            value = getattr(self, name)
            if name in ("network", "n_classes", "random_state") or value is None \
                    or (not callable(value) and value == p.default):
                continue
            params[names.get(name, name)] = (
                factory_name(value) if inspect.isfunction(value) else
                "-".join(map(str, value)) if isinstance(value, list | tuple) else
                module_text(value) if isinstance(value, nn.Module) else
                repr(value) if callable(value) else value)
        inner = ",".join(f"{k}={v}" for k, v in params.items())
        return f"module:{factory_name(factory)}" + (f"({inner})" if inner else "")

    # a weighted auxiliary loss needs per-example losses, which a user's loss may not give
    @property
    def supports_aux_weights(self) -> bool:
        return self.loss is None

    def predict_step(self) -> int:
        """Rows per forward pass when predicting: ``predict_batch_size``, or by device."""
        if self.predict_batch_size is not None:
            return int(self.predict_batch_size)
        return PREDICT_BATCH_CPU if torch.device(self.device).type == "cpu" else PREDICT_BATCH_GPU

    def use_dataset_shape(self, shape: Sequence[int]) -> None:
        """Take the dataset's image shape unless one was given: a built-in architecture
        always, a factory only if it names ``input_shape`` (else it gets flat rows)."""
        if self.input_shape is not None:
            given = tuple(int(s) for s in self.input_shape)
            if given != tuple(int(s) for s in shape):
                show = "-".join  # as the spec's shape=C-H-W is written
                raise FedLabelsError(
                    f"network {self._name()} was given shape={show(map(str, given))}, but the "
                    f"dataset's images are {show(map(str, shape))} (C-H-W); leave shape out "
                    "(the dataset records it) or give that one.")
            return
        if isinstance(self.network, str) or "input_shape" in factory_parameters(self.network):
            self.input_shape = tuple(int(s) for s in shape)

    def _validate_params(self) -> None:
        if isinstance(self.network, str) and self.network not in ARCHITECTURES:
            raise FedLabelsError(f"unknown network {self.network!r}; the built-in ones are "
                                 f"{', '.join(ARCHITECTURES)}, or pass a factory.")
        if not isinstance(self.network, str) and not callable(self.network):
            raise FedLabelsError(f"network must be an architecture name or a callable "
                                 f"returning a torch.nn.Module, got {self.network!r}.")
        check_numbers(self, ("batch_size", "max_steps", "predict_batch_size", "width"),
                      ("warm_start", "augment"), optional=("predict_batch_size",))
        if self.width != 64 and self.network != "resnet18":  # else ignored without a word
            own = "" if isinstance(self.network, str) or \
                "width" not in factory_parameters(self.network) else \
                f" (the factory's own width: functools.partial(" \
                f"{getattr(self.network, '__name__', 'factory')}, width={self.width!r}))"
            raise FedLabelsError(f"width={self.width!r} is the width of network='resnet18', "
                                 f"which network {self._name()} does not use; leave it "
                                 f"out{own}.")

    def _shape(self, n_features: int) -> tuple[int, int, int] | None:
        if self.input_shape is not None:
            given = tuple(int(s) for s in self.input_shape)
            if len(given) != 3 or min(given) < 1 or math.prod(given) != n_features:
                raise FedLabelsError(f"input_shape {given} does not fit rows of {n_features} "
                                     "features; give (C, H, W) with C*H*W = the feature count.")
            return given[0], given[1], given[2]
        if not isinstance(self.network, str) and \
                "input_shape" not in factory_parameters(self.network):
            return None  # a factory that does not name input_shape gets flat rows
        shape = guess_shape(n_features)
        if shape is None:
            raise FedLabelsError(f"network {self._name()} needs images, but rows of "
                                 f"{n_features} features have no recorded image shape; set "
                                 "shape=C-H-W in the model spec (input_shape in Python).")
        return shape

    def _build_network(self, n_features: int, n_classes: int, seed: int) -> nn.Module:
        self.shape_ = self._shape(n_features)
        if self.augment and self.shape_ is None:  # crops and flips need images
            raise FedLabelsError(f"augment=true crops and flips images, but network "
                                 f"{self._name()} takes flat rows (its factory does not name "
                                 "input_shape); name input_shape in the factory, give "
                                 "shape=C-H-W, or leave augment out.")
        with torch.random.fork_rng(devices=[]):  # seeded init, global RNG left as it was
            torch.manual_seed(seed)
            try:
                if isinstance(self.network, str):
                    kwargs = {"width": int(self.width)} if self.network == "resnet18" else {}
                    assert self.shape_ is not None
                    model: nn.Module = BUILDERS[self.network](self.shape_, n_classes,
                                                              **kwargs)
                else:
                    model = self._call_factory(n_features, n_classes)
            except (MemoryError, RuntimeError) as exc:
                if (what := out_of_memory(exc)) is None:
                    raise
                inputs = "x".join(map(str, self.shape_)) if self.shape_ else \
                    f"rows of {n_features} features"
                raise FedLabelsError(
                    f"network {self._name()} for inputs of {inputs} does not fit in memory "
                    f"({what}); choose a smaller --image-size (image_size) or a smaller "
                    "network.") from None
        if not any(p.requires_grad for p in model.parameters()):  # Adam refuses it later
            raise FedLabelsError(f"network {self._name()} has no trainable parameters (its "
                                 f"{type(model).__name__} holds no nn.Parameter that "
                                 "requires grad), so there is nothing to train; give it "
                                 "layers with weights (nn.Linear, nn.Conv2d, ...).")
        self._check_output(model, n_features, n_classes)
        return model

    def _call_factory(self, n_features: int, n_classes: int) -> nn.Module:
        factory = self.network
        assert callable(factory)
        values = {"n_features": n_features, "n_classes": n_classes,
                  "input_shape": self.shape_}
        params = factory_parameters(factory)
        takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
        kwargs = {k: v for k, v in values.items() if takes_all or k in params}
        missing = missing_factory_arguments(factory, getattr(factory, "arguments", {}))
        if missing:  # else a TypeError naming neither the factory's spec nor the fix
            raise FedLabelsError(_needs_arguments(factory, missing))
        try:
            model = factory(**kwargs)
        except FedLabelsError:
            raise
        except (MemoryError, RuntimeError) as exc:
            if out_of_memory(exc) is not None:
                raise  # said with the input shape by _build_network
            raise FedLabelsError(_factory_failed(factory, kwargs, exc)) from exc
        except Exception as exc:  # your code: one line saying where (FedAvg's server too)
            raise FedLabelsError(_factory_failed(factory, kwargs, exc)) from exc
        if not isinstance(model, nn.Module):
            raise FedLabelsError(f"model factory {factory_name(factory)} returned "
                                 f"{type(model).__name__}, not a torch.nn.Module; it must "
                                 "return the network (given n_features, n_classes, "
                                 "input_shape).")
        return model

    def _check_output(self, model: nn.Module, n_features: int, n_classes: int) -> None:
        """One forward pass of two zero rows: the output must be (2, n_classes)."""
        x = self._inputs(torch.zeros(2, n_features), False)
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model(x)
        except Exception as exc:
            raise FedLabelsError(f"network {self._name()} fails on a batch of input shape "
                                 f"{tuple(x.shape)}: {str(exc).splitlines()[0]}") from None
        finally:
            model.train(was)
        if not torch.is_tensor(out) or tuple(out.shape) != (2, n_classes):
            shape = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
            raise FedLabelsError(f"network {self._name()} outputs {shape} for a batch of 2; "
                                 f"it must output (batch, n_classes) = (2, {n_classes}) "
                                 "logits.")

    def _name(self) -> str:
        return self.network if isinstance(self.network, str) else factory_name(self.network)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        if self.optimizer is None:
            return super()._make_optimizer(model)
        opt = self.optimizer(model.parameters())
        if not isinstance(opt, torch.optim.Optimizer):
            raise FedLabelsError(f"optimizer factory returned {type(opt).__name__}, not a "
                                 "torch.optim.Optimizer.")
        return opt

    def _losses(self) -> tuple[Any, Any]:
        if self.loss is None:
            return super()._losses()

        def refuse(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            raise FedLabelsError("weighted pseudo-labels need per-example losses; use the "
                                 "default loss (cross-entropy) with this method.")

        return self.loss, refuse

    def _inputs(self, xb: torch.Tensor, train: bool) -> torch.Tensor:
        shape = getattr(self, "shape_", None)
        if shape is None:
            return xb
        images = xb.reshape(len(xb), *shape)
        if train and self.augment:
            images = self._augment(images)
        return images

    def _forward(self, xb: torch.Tensor, train: bool = True) -> torch.Tensor:
        """As the MLP's; a network with dropout draws its masks from a torch RNG seeded from
        the learner's generator each step (so a run, and a restored state, repeat)."""
        if not (train and self.model_.training and _has_dropout(self.model_)):
            return super()._forward(xb, train)
        seed = int(self.rng_.integers(2**63 - 1))
        devices = [torch.device(self.device)] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            return super()._forward(xb, train)

    def _augment(self, images: torch.Tensor) -> torch.Tensor:
        """Random crop with zero padding H // 8 and horizontal flip, from ``rng_``."""
        return crop_and_flip(images, *self._augment_draws(len(images), images.shape[2]))

    def _augment_draws(self, n: int, height: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The crop offsets (n, 2) and flips (n,) of ``n`` images ``height`` high, drawn
        from ``rng_``."""
        pad = max(1, height // 8)
        offsets = torch.from_numpy(self.rng_.integers(0, 2 * pad + 1, size=(n, 2)))
        return offsets, torch.from_numpy(self.rng_.random(n) < 0.5)

    def hidden_features(self, X: np.ndarray, batch: int | None = None) -> np.ndarray:
        if not isinstance(getattr(self, "model_", None), nn.Sequential):
            raise FedLabelsError(f"network {self._name()} is not an nn.Sequential, so it has "
                                 "no penultimate layer to take features from.")
        return super().hidden_features(X, batch)

    def architecture_state(self) -> dict[str, Any]:
        """What a stored state must match (see :mod:`fedlabels.learners.torch_state`)."""
        shape = self.input_shape or ()
        return {"network": self._name(),
                "input_shape": np.asarray([int(s) for s in shape], dtype=np.int64)}


def crop_and_flip(images: torch.Tensor, offsets: torch.Tensor,
                  flips: torch.Tensor) -> torch.Tensor:
    """Images (N, C, H, W) zero-padded by H // 8, cropped back to H x W at ``offsets``
    (N, 2) and flipped horizontally where ``flips`` (N,); an all-zero image stays zero."""
    _, _, h, w = images.shape
    pad = max(1, h // 8)
    padded = nn.functional.pad(images, (pad, pad, pad, pad))
    return shifted_crops(padded, offsets, flips, h, w).contiguous()


def _factory_failed(factory: Any, kwargs: dict[str, Any], exc: Exception) -> str:
    given = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    return (f"model factory {factory_name(factory)} raised {raised_at(exc)} when called "
            f"with {given or 'no arguments'}; fix the factory (call it so yourself to see "
            "the whole traceback).")


def _needs_arguments(factory: Any, missing: list[str]) -> str:
    name = getattr(factory, "__name__", "make_net")
    shown = ", ".join(f"{k}=..." for k in missing)
    return (f"model factory {factory_name(factory)} needs {', '.join(missing)}, which the "
            f"learner does not pass (it passes those of n_features, n_classes, input_shape "
            f"that the factory names); pass functools.partial({name}, {shown}) as the "
            f"factory, or give {'it' if len(missing) == 1 else 'them'} a default.")


class TorchModelParams(TypedDict, total=False):
    """:func:`TorchModel`'s keywords: :class:`TorchNetClassifier`'s parameters but
    ``network`` (the factory), typed as its constructor takes them, and the spec names
    ``lr`` and ``shape`` (``learning_rate``, ``input_shape``), so that a checker refuses a
    misspelt one."""

    lr: float
    shape: Sequence[int] | None
    input_shape: Sequence[int] | None
    n_classes: int | None
    learning_rate: float
    batch_size: int
    max_steps: int
    weight_decay: float
    predict_batch_size: int | None
    warm_start: bool
    augment: bool
    optimizer: Callable[..., torch.optim.Optimizer] | None
    loss: Callable[..., torch.Tensor] | None
    random_state: RandomStateLike


def TorchModel(factory: Callable[..., nn.Module],
               **params: Unpack[TorchModelParams]) -> TorchNetClassifier:
    """Your own network as a learner: ``fl.run("fedct", fed, model=fl.TorchModel(make_net,
    lr=1e-3))``. ``factory`` returns an ``nn.Module`` mapping a batch to (batch, n_classes)
    logits; ``lr`` is ``learning_rate``; the other parameters are those of
    :class:`TorchNetClassifier` (``optimizer``, ``loss``, ``input_shape``, ``batch_size``,
    ...)."""
    if isinstance(factory, nn.Module):  # callable too, but one network for every client
        raise FedLabelsError(f"TorchModel needs a factory that builds a new network (each "
                             f"client trains its own), got a built {type(factory).__name__}: "
                             "pass its class or a function returning a new one.")
    if not callable(factory):
        raise FedLabelsError(f"TorchModel needs a callable returning a torch.nn.Module, got "
                             f"{factory!r}.")
    # lr, shape as in specs
    given: dict[str, Any] = {SPEC_NAMES.get(k, k): v for k, v in params.items()}
    # width is resnet18's alone: the factory's own width, else a refusal by _validate_params
    own = sorted(set(given) & set(factory_parameters(factory))
                 - (set(inspect.signature(TorchNetClassifier).parameters) - {"width"}))
    if own:
        name = getattr(factory, "__name__", "the factory")
        shown = ", ".join(f"{k}={given[k]!r}" for k in own)
        what = "is an argument" if len(own) == 1 else "are arguments"
        raise FedLabelsError(f"{', '.join(own)} {what} of {name}, not of TorchModel: pass "
                             f"functools.partial({name}, {shown}) as the factory.")
    try:
        learner = TorchNetClassifier(network=factory, **given)
    except TypeError as exc:
        raise FedLabelsError(f"TorchModel{str(exc).replace('TorchNetClassifier.__init__()', '')}"
                             .rstrip() + "; see help(fl.TorchModel).") from None
    learner._validate_params()  # a wrong value now, not when the run fits it
    missing = missing_factory_arguments(factory)
    if missing:
        raise FedLabelsError(_needs_arguments(factory, missing))
    return learner
