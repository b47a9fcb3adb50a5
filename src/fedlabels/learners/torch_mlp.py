"""A scikit-learn-style adapter for torch MLPs with warm-started iterative training.

``train_steps`` is the unit FedCT and FedAvg need: each step is one minibatch of private data
(plus, optionally, one minibatch of pseudo-labelled public data, as in FedCT), and training
continues from the current weights. Prediction runs in batches under ``eval()`` and
``torch.no_grad()``.

:meth:`TorchMLPClassifier.state_dict` / :meth:`~TorchMLPClassifier.load_state_dict` capture
the whole mutable state (weights, Adam moments, minibatch RNG and cursors, counters) as plain
numpy arrays and scalars, so a learner can be persisted between messages without pickle.

Subclasses change the network (:meth:`TorchMLPClassifier._build_network`) and how a batch
becomes its input (:meth:`TorchMLPClassifier._inputs`: reshaping to images, augmentation);
:meth:`TorchMLPClassifier.place` puts a learner on a device, optionally with bf16 autocast
(:mod:`fedlabels.learners.devices`). On the CPU in float32 nothing changes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self, cast

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from torch import nn

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.consistency import Consistency
from fedlabels.learners.consistency_loss import consistency_loss
from fedlabels.learners.devices import autocast
from fedlabels.learners.model_spec import check_training_params, is_integer
from fedlabels.learners.seeds import RandomStateLike, check_random_state_param, fit_seed
from fedlabels.learners.sk_inputs import (
    fit_classes,
    fit_inputs,
    label_codes,
    predict_input,
    refuse_fit_params,
)
from fedlabels.learners.torch_state import BatchCursor, load_mlp_state_dict, mlp_state_dict


def _without_dynamo() -> bool:
    """Whether torch's optimizers can run here without importing ``torch._dynamo`` (1-2
    CPU-s in every process that builds or steps one, each forked worker included): torch
    imports it only to wrap its optimizer methods against ``torch.compile``, which this
    project never uses. The marked methods are wrapped as themselves (what the dynamo
    wrapper amounts to with nothing compiling), and :func:`adam_step` calls the step under
    ``no_grad`` itself. Once anything has imported ``torch._dynamo``, torch's own wrapping
    stays."""
    if "torch._dynamo" in sys.modules:
        return False
    for name in ("add_param_group", "zero_grad", "state_dict", "load_state_dict"):
        fn = getattr(getattr(torch.optim.Optimizer, name), "__wrapped__", None)
        if fn is not None and getattr(fn, "__dynamo_disable", None) is None:
            setattr(fn, "__dynamo_disable", fn)
    return True


_WITHOUT_DYNAMO = _without_dynamo()


def adam_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()``, without importing ``torch._dynamo`` for its graph breaks where no
    hooks are registered (the profiler's step hooks and graph breaks are no-ops here)."""
    from torch.optim import optimizer as _optimizer

    inner = getattr(getattr(type(opt).step, "__wrapped__", None), "__wrapped__", None)
    if (not _WITHOUT_DYNAMO or "torch._dynamo" in sys.modules or inner is None
            or opt.defaults.get("differentiable") or opt._optimizer_step_pre_hooks
            or opt._optimizer_step_post_hooks or _optimizer._global_optimizer_pre_hooks
            or _optimizer._global_optimizer_post_hooks):
        opt.step()
        return
    with torch.no_grad():
        inner(opt)


def release_gradients(opt: torch.optim.Optimizer) -> None:
    """Free the last step's gradients: a resting client keeps its weights and Adam's state,
    not a fourth copy of its model (every step sets its gradients afresh)."""
    opt.zero_grad(set_to_none=True)


def check_numbers(est: Any, ints: Sequence[str], flags: Sequence[str] = ("warm_start",),
                  optional: Sequence[str] = ()) -> None:
    """A torch learner's ``learning_rate``, ``weight_decay``, ``ints`` (``optional`` ones
    may be None) and ``flags``, checked by its spec's check
    (:func:`~fedlabels.learners.model_spec.check_training_params`), so a learner and its
    spec take the same values; ``random_state`` as :mod:`fedlabels.learners.seeds` takes it
    (-1 failed in numpy's seeding). A one-line error naming the parameter, as
    scikit-learn's ``InvalidParameterError``: ``max_steps="5"`` or ``2.5`` were taken as 5
    and 2, ``learning_rate="0.01"`` was a bare TypeError."""
    params = {"lr": est.learning_rate, "weight_decay": est.weight_decay,
              **{name: getattr(est, name) for name in (*ints, *flags)}}
    check_training_params(params, tuple(ints), tuple(flags), tuple(optional),
                          show=repr, label={"lr": "learning_rate (lr)"})
    check_random_state_param(est.random_state)


class TorchMLPClassifier(ClassifierMixin, BaseEstimator):
    """Fully connected ReLU network trained with Adam and cross-entropy.

    Parameters
    ----------
    hidden_layer_sizes : int or sequence of int, default=(512, 512)
        Widths of the hidden layers (an int is one layer, as in scikit-learn's
        ``MLPClassifier``). ``(512, 512)`` on 784 inputs and 10 classes is the
        FashionMNIST architecture of the FedCT paper (Table 11; 669,706 parameters).
    n_classes : int or None, default=None
        Number of output units; ``None`` infers ``max(y) + 1`` at the first fit. Federated
        runs set it so every client has the same output layer.
    learning_rate : float, default=1e-3
        Adam step size (the paper's value for FashionMNIST).
    batch_size : int, default=64
        Minibatch size per source (private, and pseudo-labelled when given).
    max_steps : int, default=500
        Steps taken by :meth:`fit`.
    weight_decay : float, default=0.0
        Adam weight decay.
    predict_batch_size : int, default=4096
        Rows per forward pass when predicting.
    warm_start : bool, default=False
        If True, :meth:`fit` continues from the current weights (and keeps the classes and
        features of the first fit) instead of re-initialising. ``train_steps``, what the
        federation calls each round, always continues.
    random_state : int, RandomState, Generator or None, default=None
        Seeds weight initialisation and minibatch order: an int repeats a fit; ``None`` draws
        a fresh seed at each fit from numpy's global generator, and a ``RandomState`` (or
        ``Generator``) one from itself, as scikit-learn's estimators do (a run passes each
        client its seed derived from the run's).

    :meth:`fit` and :meth:`predict` follow scikit-learn's conventions (``classes_`` are the
    sorted labels of ``y``, any labels with ``n_classes=None``; ``n_features_in_``; input
    checked by :mod:`fedlabels.learners.sk_inputs`); ``train_steps`` takes label indices
    ``0..n_classes-1``.
    """

    #: ``train_steps`` takes ``aux_index`` (auxiliary rows gathered from a shared array)
    supports_aux_index = True
    #: the model spec's names of this estimator's parameters (``mlp(hidden=..., lr=...)``),
    #: which :meth:`set_params` names when given one
    _spec_names: ClassVar[dict[str, str]] = {"hidden": "hidden_layer_sizes", "lr": "learning_rate"}
    #: dtype of the training targets (the regressor subclass trains on float targets)
    _target_dtype: Any = np.int64
    #: whether the outputs are classes (``classes_``); the regressor's one output is not
    _has_classes: ClassVar[bool] = True
    #: where the network lives and its autocast precision; run settings (``place``), not
    #: model parameters: the same model gives the same result on the CPU in float32
    device: str = "cpu"
    precision: str = "fp32"
    #: set by the simulator's TogetherGrid: train_steps and predict_proba hand their call
    #: to this rendezvous
    _rendezvous: Any = None
    #: where the state rests between turns (``rest``); ``None``: resident on ``device``
    _home: str | None = None

    def set_params(self, **params: Any) -> Any:
        """As scikit-learn's; a model spec's name of a parameter (``lr``, ``hidden``) is
        scikit-learn's ``ValueError`` in one line that names the parameter it stands for."""
        valid = self.get_params(deep=False)
        spec = [k for k in params if k in self._spec_names and k not in valid]
        if spec:
            as_here = "; ".join(f"the model spec's {k} is {self._spec_names[k]} here: "
                                f"set_params({self._spec_names[k]}=...)" for k in spec)
            raise ValueError(f"Invalid parameter {spec[0]!r} for estimator "
                             f"{type(self).__name__}() ({as_here}). Valid parameters are: "
                             f"{sorted(valid)}.")
        return super().set_params(**params)

    def place(self, device: str, precision: str = "fp32") -> None:
        """Train and predict on ``device`` (``cpu``, ``cuda:N``) with ``precision``
        (``fp32``, or ``bf16`` autocast); call before the network is built or moves it."""
        self._resident()
        self.device, self.precision = str(device), str(precision)
        if hasattr(self, "model_"):
            self.model_.to(self.device)
            for slots in self.optimizer_.state.values():
                for key, value in slots.items():
                    if torch.is_tensor(value) and key != "step":
                        slots[key] = value.to(self.device)

    def rest(self, home: str = "cpu") -> None:
        """Move the built state (weights, gradients, Adam moments) to ``home`` until it is
        used again: every method that computes brings it back to ``device`` first
        (:mod:`fedlabels.learners.offload`; the copies are exact)."""
        from fedlabels.learners.offload import move_state

        if hasattr(self, "model_") and self._home is None:
            self._rest_cache: dict[str, Any] = getattr(self, "_rest_cache", {})
            move_state(self, home, self._rest_cache)
            self._home = home

    def _hand_over(self, job: Any) -> None:
        """Hand a training call to this learner's rendezvous and wait until it has run with
        the other clients'; the rendezvous is set aside meanwhile, so that a call the runner
        makes one by one (a learner that cannot be batched) trains this learner itself."""
        rendezvous, self._rendezvous = self._rendezvous, None
        try:
            rendezvous.submit(job)
        finally:
            self._rendezvous = rendezvous

    def _resident(self) -> None:
        """Bring a resting state back to ``device`` (nothing if it is there)."""
        if self._home is not None and hasattr(self, "model_"):
            from fedlabels.learners.offload import move_state

            move_state(self, self.device)
        self._home = None

    def _losses(self) -> tuple[Any, Any]:
        """The mean and the per-sample training loss (cross-entropy)."""
        return nn.CrossEntropyLoss(), nn.CrossEntropyLoss(reduction="none")

    def __init__(self, hidden_layer_sizes: int | Sequence[int] = (512, 512),
                 n_classes: int | None = None, learning_rate: float = 1e-3,
                 batch_size: int = 64, max_steps: int = 500, weight_decay: float = 0.0,
                 predict_batch_size: int = 4096, warm_start: bool = False,
                 random_state: RandomStateLike = None) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.n_classes = n_classes
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.weight_decay = weight_decay
        self.predict_batch_size: int | None = predict_batch_size  # a network's may be None
        self.warm_start = warm_start
        self.random_state = random_state

    # ------------------------------------------------------------------ set-up
    def hidden_sizes(self) -> tuple[int, ...]:
        """``hidden_layer_sizes`` as a tuple of ints (an int is one layer), or a one-line
        error."""
        sizes = self.hidden_layer_sizes
        if is_integer(sizes):
            sizes = (sizes,)  # type: ignore[assignment]
        if isinstance(sizes, str) or not isinstance(sizes, Sequence | np.ndarray) or \
                not all(is_integer(h) and int(h) >= 1 for h in sizes):
            raise FedLabelsError(f"hidden_layer_sizes must be a positive int or a sequence of "
                                 f"them, e.g. 64 or (64, 32), got {sizes!r}.")
        return tuple(int(h) for h in sizes)

    def _validate_params(self) -> None:
        self.hidden_sizes()
        check_numbers(self, ("batch_size", "max_steps", "predict_batch_size"))

    def _initialise(self, n_features: int, n_classes: int) -> None:
        self._validate_params()
        self._home = None
        seed = fit_seed(self.random_state)
        self.model_ = self._build_network(n_features, n_classes, seed).to(self.device)
        self.optimizer_ = self._make_optimizer(self.model_)
        self.rng_ = np.random.default_rng(seed)
        self.n_outputs_ = n_classes  # the network's outputs, what fedlabels' own code reads
        if self._has_classes:
            self.classes_ = np.arange(n_classes)
        else:  # a regressor has no classes_ (scikit-learn's convention)
            self.__dict__.pop("classes_", None)
        self.n_features_in_ = n_features
        self.steps_ = 0
        self._cursors: dict[int, BatchCursor] = {}

    def _build_network(self, n_features: int, n_classes: int, seed: int) -> nn.Module:
        """The network, initialised from ``seed`` alone (never the global torch RNG)."""
        torch_gen = torch.Generator().manual_seed(seed)
        layers: list[nn.Module] = []
        width = n_features
        for h in self.hidden_sizes():
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_classes))
        model = nn.Sequential(*layers)
        with torch.no_grad():  # seeded init, independent of the global torch RNG
            for p in model.parameters():
                if p.dim() > 1:
                    bound = 1.0 / np.sqrt(p.shape[1])
                    p.uniform_(-bound, bound, generator=torch_gen)
                else:
                    p.uniform_(-1.0 / np.sqrt(len(p)), 1.0 / np.sqrt(len(p)),
                               generator=torch_gen)
        return model

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=self.learning_rate,
                                weight_decay=self.weight_decay)

    def _inputs(self, xb: torch.Tensor, train: bool) -> torch.Tensor:
        """A batch of rows as the network's input (images: reshaped, augmented in training)."""
        return xb

    def _forward(self, xb: torch.Tensor, train: bool = True) -> torch.Tensor:
        """Logits of a batch (moved to the device), under autocast when ``precision=bf16``;
        float32 logits, so the loss and the probabilities are computed in float32."""
        with autocast(self.device, self.precision):
            out = self.model_(self._inputs(xb.to(self.device, non_blocking=True), train))
        return out.float()

    def _ensure_initialised(self, X: np.ndarray, y: np.ndarray) -> None:
        if hasattr(self, "model_"):
            if X.shape[1] != self.n_features_in_:
                raise FedLabelsError(f"X has {X.shape[1]} features, the model was built for "
                                     f"{self.n_features_in_}.")
            return
        n_classes = self.n_classes if self.n_classes is not None else int(y.max()) + 1
        self._initialise(X.shape[1], int(n_classes))

    def _cursor(self, key: int, n: int) -> BatchCursor:
        cursor = self._cursors.get(key)
        if cursor is None or cursor.n != n:  # the pseudo-labelled set may change size
            cursor = BatchCursor(n, int(self.batch_size), self.rng_)
            self._cursors[key] = cursor
        return cursor

    # ------------------------------------------------------------------ training
    def train_steps(self, X: np.ndarray, y: np.ndarray, n_steps: int,
                    X_aux: np.ndarray | None = None, y_aux: np.ndarray | None = None,
                    w_aux: np.ndarray | None = None,
                    aux_index: np.ndarray | None = None,
                    consistency: Consistency | None = None) -> Self:
        """Take ``n_steps`` Adam steps, warm-starting from the current weights.

        Each step uses one minibatch of ``(X, y)`` and, if given, one minibatch of
        ``(X_aux, y_aux)`` (FedCT's pseudo-labelled public data), concatenated.
        ``w_aux`` optionally weights the auxiliary examples' losses (private examples weigh
        1; FedAvg+XCLP's confidence-weighted pseudo-labels); the batch loss is the mean.
        ``aux_index`` (optional integer rows of ``X_aux``) makes the auxiliary set
        ``X_aux[aux_index]`` without copying it: each minibatch is gathered from ``X_aux``
        directly, and ``y_aux`` / ``w_aux`` are aligned with ``aux_index``. FedCT passes the
        shared public set U with the indices its consensus did not abstain on.
        ``consistency`` adds a consistency loss on its unlabeled rows each step
        (:mod:`fedlabels.learners.consistency`).
        """
        if self._rendezvous is not None and consistency is not None:
            raise FedLabelsError("a consistency loss on U is not trained together with other "
                                 "clients; drop --batch-clients or the consistency option.")
        if self._rendezvous is not None:  # trained together with the other clients
            from fedlabels.learners.batch_jobs import TrainJob

            self._hand_over(TrainJob(self, X, y, int(n_steps), X_aux, y_aux, w_aux,
                                     aux_index))
            return self
        X = np.ascontiguousarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=self._target_dtype)
        self._ensure_initialised(X, y)
        self._resident()
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
        n_aux = len(y_aux) if X_aux is not None and y_aux is not None else 0
        use_aux = n_aux > 0
        if use_aux:
            # a float32 C-contiguous X_aux (e.g. the federation's U) is used in place, no copy
            Xa = torch.from_numpy(np.ascontiguousarray(X_aux, dtype=np.float32))
            ya = torch.from_numpy(np.asarray(y_aux, dtype=self._target_dtype))
            rows = None
            if aux_index is not None:
                rows = torch.from_numpy(np.asarray(aux_index, dtype=np.int64))
                if rows.shape != ya.shape:
                    raise FedLabelsError(f"aux_index has {rows.numel()} entries, y_aux "
                                         f"{len(ya)}; they must be aligned.")
            wa = None if w_aux is None else torch.from_numpy(
                np.asarray(w_aux, dtype=np.float32))
        main, aux = self._cursor(0, len(y)), self._cursor(1, n_aux)
        if consistency is not None:
            Xu = torch.from_numpy(np.ascontiguousarray(consistency.X, dtype=np.float32))
            unl = self._cursor(3, len(Xu))
        opt = self.optimizer_
        loss_fn, per_sample = self._losses()
        self.model_.train()
        for _ in range(int(n_steps)):
            idx = torch.from_numpy(main.next())
            xb, yb = Xt[idx], yt[idx]
            wb = None
            if use_aux:
                aidx = torch.from_numpy(aux.next())
                if wa is not None:
                    wb = torch.cat([torch.ones(len(idx)), wa[aidx]])
                xa = Xa[aidx] if rows is None else Xa[rows[aidx]]
                xb, yb = torch.cat([xb, xa]), torch.cat([yb, ya[aidx]])
            opt.zero_grad(set_to_none=True)
            logits = self._forward(xb)
            yb = yb.to(logits.device)
            wb = None if wb is None else wb.to(logits.device)
            loss = loss_fn(logits, yb) if wb is None else (per_sample(logits, yb) * wb).mean()
            if consistency is not None:
                loss = loss + consistency_loss(consistency, Xu[torch.from_numpy(unl.next())],
                                               self._forward, self.rng_)
            loss.backward()
            adam_step(opt)
        release_gradients(opt)
        self.steps_ += int(n_steps)
        return self

    def distill_steps(self, X_soft: np.ndarray, P_soft: np.ndarray, n_steps: int,
                      X: np.ndarray | None = None, y: np.ndarray | None = None,
                      weight: float = 1.0) -> Self:
        """Take ``n_steps`` Adam steps towards soft targets (knowledge distillation).

        Each step's loss is ``weight · mean_j H(P_soft[j], softmax(model(X_soft[j])))`` (soft
        cross-entropy, i.e. KL to the targets up to their constant entropy) over one minibatch
        of ``(X_soft, P_soft)``, plus, if ``(X, y)`` is given, the cross-entropy of one
        minibatch of it (DD: private loss + distillation term; FedMD's digest: soft only).
        """
        Xs = np.ascontiguousarray(X_soft, dtype=np.float32)
        Ps = np.asarray(P_soft, dtype=np.float32)
        if Ps.ndim != 2 or len(Ps) != len(Xs):
            raise FedLabelsError(f"soft targets must have shape ({len(Xs)}, C), got "
                                 f"{Ps.shape}.")
        if not hasattr(self, "model_"):
            n_classes = self.n_classes if self.n_classes is not None else Ps.shape[1]
            self._initialise(Xs.shape[1], int(n_classes))
        self._resident()
        if Ps.shape[1] != self.n_outputs_:
            raise FedLabelsError(f"soft targets have {Ps.shape[1]} classes, the model "
                                 f"{self.n_outputs_}.")
        if self._rendezvous is not None:  # distilled together with the other clients
            from fedlabels.learners.batch_jobs import DistillJob

            self._hand_over(DistillJob(self, Xs, Ps, int(n_steps), X, y, float(weight)))
            return self
        Xst, Pst = torch.from_numpy(Xs), torch.from_numpy(Ps)
        use_private = X is not None and y is not None and len(y) > 0
        if use_private:
            Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
            yt = torch.from_numpy(np.asarray(y, dtype=np.int64))
            main = self._cursor(0, len(yt))
        soft = self._cursor(2, len(Xs))
        opt = self.optimizer_
        self.model_.train()
        for _ in range(int(n_steps)):
            sidx = torch.from_numpy(soft.next())
            opt.zero_grad(set_to_none=True)
            logp = torch.log_softmax(self._forward(Xst[sidx]), dim=1)
            loss = float(weight) * -(Pst[sidx].to(logp.device) * logp).sum(dim=1).mean()
            if use_private:
                idx = torch.from_numpy(main.next())
                logits = self._forward(Xt[idx])
                loss = loss + nn.functional.cross_entropy(logits, yt[idx].to(logits.device))
            loss.backward()
            adam_step(opt)
        release_gradients(opt)
        self.steps_ += int(n_steps)
        return self

    def fit(self, X: Any, y: Any, **fit_params: Any) -> Self:
        """Train for ``max_steps`` steps (from scratch unless ``warm_start``); no
        ``sample_weight`` (``fit_params`` are refused in one line)."""
        refuse_fit_params(self, fit_params)
        warm = bool(self.warm_start) and hasattr(self, "model_")
        X, y = fit_inputs(self, X, y, reset=not warm,
                          numeric_y=self._target_dtype is not np.int64)
        targets, n_outputs, classes = self._fit_targets(y, warm)
        if not warm:
            self._initialise(X.shape[1], n_outputs)
            if classes is not None:
                self.classes_ = classes
        return self.train_steps(X, targets, int(self.max_steps))

    def _fit_targets(self, y: np.ndarray, warm: bool
                     ) -> tuple[np.ndarray, int, np.ndarray | None]:
        """The training targets of ``y`` (label indices), the number of outputs, and the
        classes (``None``: keep those of the warm-started model)."""
        if warm:
            return label_codes(y, self.classes_), len(self.classes_), None
        classes, codes = fit_classes(y, self.n_classes)
        return codes, len(classes), classes

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    # ------------------------------------------------------------------ inference
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (columns in the order of ``classes_``), computed in batches
        under ``eval()`` / ``no_grad`` (with the other clients' in one vectorised pass when
        they predict together)."""
        X = predict_input(self, X)
        if self._rendezvous is not None:  # predicted together with the other clients
            from fedlabels.learners.batch_jobs import PredictJob

            job = PredictJob(self, np.ascontiguousarray(X, dtype=np.float32))
            self._rendezvous.submit(job)
            return job.out
        return self._predict_proba_alone(X)

    def predict_step(self) -> int:
        """Rows per forward pass when predicting: ``predict_batch_size`` (a network's default
        depends on its device: :meth:`TorchNetClassifier.predict_step`)."""
        if self.predict_batch_size is None:
            raise FedLabelsError("predict_batch_size must be an integer >= 1, got None.")
        return int(self.predict_batch_size)

    def _predict_proba_alone(self, X: np.ndarray) -> np.ndarray:
        self._resident()
        X = np.ascontiguousarray(X, dtype=np.float32)
        self.model_.eval()
        out = np.empty((len(X), self.n_outputs_), dtype=np.float32)
        step = self.predict_step()
        with torch.no_grad():
            for start in range(0, len(X), step):
                logits = self._forward(torch.from_numpy(X[start : start + step]), train=False)
                out[start : start + step] = torch.softmax(logits, dim=1).cpu().numpy()
        return out

    def hidden_features(self, X: np.ndarray, batch: int | None = None) -> np.ndarray:
        """Activations of the last hidden layer (features for XCLP), batched, eval/no_grad."""
        if not hasattr(self, "model_"):
            raise FedLabelsError("this TorchMLPClassifier is not fitted yet; call fit first.")
        self._resident()
        body = cast(nn.Sequential, self.model_)[:-1]
        body.eval()
        step = int(batch or self.predict_step())
        X = np.ascontiguousarray(X, dtype=np.float32)
        out = []
        with torch.no_grad():
            for start in range(0, len(X), step):
                xb = self._inputs(torch.from_numpy(X[start : start + step]).to(self.device),
                                  False)
                out.append(body(xb).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 1), dtype=np.float32)

    def predict(self, X: Any) -> np.ndarray:
        """The class of largest probability, one of ``classes_``."""
        best = self.predict_proba(X).argmax(axis=1)
        return np.asarray(self.classes_)[best]

    # ------------------------------------------------------------------ parameters
    def get_weights(self) -> np.ndarray:
        """All parameters as one flat float32 vector (what FedAvg sends)."""
        return torch.cat([p.detach().reshape(-1) for p in self.model_.parameters()]).cpu() \
            .numpy()

    def set_weights(self, flat: np.ndarray) -> None:
        """Load a flat vector produced by :meth:`get_weights` of an identical network."""
        flat_t = torch.from_numpy(np.array(flat, dtype=np.float32))  # copy: may be read-only
        if flat_t.numel() != self.n_parameters:
            raise FedLabelsError(f"weight vector has {flat_t.numel()} entries, the model "
                                 f"has {self.n_parameters}.")
        self._resident()
        offset = 0
        with torch.no_grad():
            for p in self.model_.parameters():
                p.copy_(flat_t[offset : offset + p.numel()].view_as(p).to(p.device))
                offset += p.numel()

    def initialise(self, n_features: int, n_classes: int) -> Self:
        """Build the network without training (used for FedAvg's common initialisation)."""
        self._initialise(n_features, n_classes)
        return self

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.model_.parameters())

    # ------------------------------------------------------------------ state
    def state_dict(self, *, optimizer_slots: bool = True) -> dict[str, Any]:
        """The whole mutable state as flat keys -> ndarrays / scalars (no pickle);
        ``optimizer_slots=False``: without Adam's moments (a models file's state).

        See :func:`fedlabels.learners.torch_state.mlp_state_dict` for the keys.
        """
        return mlp_state_dict(self, optimizer_slots=optimizer_slots)

    def load_state_dict(self, state: Mapping[str, Any], *, optimizer: bool = True) -> None:
        """Restore a :meth:`state_dict` of a learner built with the same parameters;
        ``optimizer=False`` takes a state without the optimiser's entries (a models file's:
        the optimiser starts fresh); see :func:`.torch_state.load_mlp_state_dict`."""
        load_mlp_state_dict(self, state, optimizer=optimizer)
