"""``minilm``: a transformer encoder + classification head as an iterative torch learner.

The encoder (all-MiniLM-L6-v2 from ``fedlabels fetch minilm``, or any BERT-style directory
given as ``model_dir``) is mean-pooled over the tokens and a head maps the pooled vector to
class logits. Three modes decide what trains, and so what FedAvg averages
(:meth:`TransformerClassifier.get_weights`):

* ``frozen``: the head only; each text's embedding is computed once per process and cached.
* ``lora``: LoRA adapters (rank ``r``, scale ``alpha / r``) on the attention query and value
  projections, plus the head; the encoder's own weights are shared and never change.
* ``full``: every weight of the encoder and the head.

Training is warm-started Adam steps on minibatches (``train_steps``: FedCT's private +
pseudo-labelled batch, ``distill_steps``: soft targets); prediction is batched under
``torch.inference_mode`` with texts sorted by length (little padding). Texts are tokenised
once per process (:class:`~fedlabels.learners.text_encoder.TokenTable`). Dropout is off, so a
run depends only on its seed. :meth:`TransformerClassifier.place` puts a learner on a device
(with optional bf16 autocast); the learners of one process share the encoder's frozen
weights, which live on the device of the last learner placed, so give them one device.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from torch import nn

from fedlabels.core.errors import FedLabelsError, unknown_parameters
from fedlabels.learners.consistency import Consistency
from fedlabels.learners.consistency_loss import consistency_loss
from fedlabels.learners.devices import autocast
from fedlabels.learners.model_spec import check_training_params, is_integer, quoted
from fedlabels.learners.seeds import RandomStateLike, fit_seed
from fedlabels.learners.sk_inputs import (
    NotFittedLearnerError,
    fit_classes,
    label_codes,
    refuse_fit_params,
    text_targets,
)
from fedlabels.learners.text_encoder import TokenTable, encoder_for, load_base, mean_pool
from fedlabels.learners.text_input import is_text, text_rows
from fedlabels.learners.torch_mlp import adam_step
from fedlabels.learners.torch_state import BatchCursor, load_mlp_state_dict, mlp_state_dict

MODES = ("frozen", "lora", "full")
HEADS = ("linear", "mlp")
#: Adam step size per mode when ``lr`` is not given
DEFAULT_LR = {"frozen": 1e-3, "lora": 5e-4, "full": 5e-5}
_INTS = {"r": 1, "alpha": 1, "max_len": 2, "batch": 1, "max_steps": 1, "predict_batch": 1}
SPEC_PARAMS = ("mode", "head", "model_dir", "warm_start", *_INTS, "lr", "weight_decay")


def check_minilm(params: Mapping[str, Any], name: str = "minilm") -> None:
    """The ``minilm`` spec's parameters (or ``name``'s, which takes them), checked when the
    spec is parsed."""
    unknown = sorted(set(params) - set(SPEC_PARAMS))
    if unknown:
        raise FedLabelsError(f"{unknown_parameters(unknown, SPEC_PARAMS)}; {name} takes "
                             f"{', '.join(SPEC_PARAMS)}.")
    for name, choices in (("mode", MODES), ("head", HEADS)):
        if name in params and params[name] not in choices:
            raise FedLabelsError(f"{name} must be one of {', '.join(choices)}, got "
                                 f"{quoted(params[name])}.")
    for name, low in _INTS.items():
        value = params.get(name, low)
        if not is_integer(value) or value < low:
            raise FedLabelsError(f"{name} must be an integer >= {low}, got {quoted(value)}.")
    check_training_params(params, flags=("warm_start",))
    if ("r" in params or "alpha" in params) and params.get("mode", "lora") != "lora":
        raise FedLabelsError("r and alpha apply only to mode=lora.")


def make_minilm(n_classes: int, random_state: int, batch: int = 16, lr: float | None = None,
                predict_batch: int = 64, **params: Any) -> TransformerClassifier:
    check_minilm({"batch": batch, "predict_batch": predict_batch, **params,
                  **({} if lr is None else {"lr": lr})})
    return TransformerClassifier(n_classes=n_classes, random_state=random_state,
                                 batch_size=batch, learning_rate=lr,
                                 predict_batch_size=predict_batch, **params)


#: the weight files read: safetensors only (a .bin is a pickle, and no pickle is loaded from
#: a file a user passes, however restricted the unpickler)
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
_PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


_SAVE_HINT = "save the model and its fast tokenizer there (save_pretrained)."
#: the files of a slow (Python) tokenizer, which transformers converts to tokenizer.json
_SLOW_TOKENIZER = ("vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")


def _slow_tokenizer_fix(root: Path) -> str:
    """How to write ``tokenizer.json`` into ``root`` from its slow tokenizer's files (an
    older BERT checkpoint ships ``vocab.txt`` only), and that file alone (``save_pretrained``
    there would rewrite the user's tokenizer files); "" when it has none."""
    found = [name for name in _SLOW_TOKENIZER if (root / name).is_file()]
    if not found or not (root / "config.json").is_file():
        return ""
    where = str(root).replace("'", "\\'")
    return (f"it has the slow tokenizer's {found[0]}: write the fast one once with python -c "
            f"\"import os; from transformers import AutoTokenizer as T; d = '{where}'; "
            "p = os.path.join(d, 'tokenizer.json'); assert not os.path.exists(p), p; "
            "T.from_pretrained(d).backend_tokenizer.save(p)\" (it adds tokenizer.json and "
            "changes no other file).")


def _pickle_fix(root: Path) -> str:
    """How to convert ``root``'s ``pytorch_model.bin`` into a new directory (``root`` is
    left as it is: ``save_pretrained`` there would rewrite the user's ``config.json``)."""
    base = root.resolve()
    new = base.parent / f"{base.name or 'model'}-safetensors"
    where, to = (str(path).replace("'", "\\'") for path in (root, new))
    return ("convert it once into a new directory (yours is left as it is; os.mkdir refuses "
            "one that exists) with python -c \"import os, shutil; from transformers import "
            f"AutoModel as M; d, o = '{where}', '{to}'; os.mkdir(o); "
            "M.from_pretrained(d).save_pretrained(o); "
            "shutil.copy2(os.path.join(d, 'tokenizer.json'), o)\" "
            f"and give model_dir={new}.")


def check_hf(params: Mapping[str, Any]) -> None:
    """``hf(model_dir=PATH, ...)``: a local model directory with its config, tokenizer and
    weights (checked when the spec is parsed), and the parameters of ``minilm``."""
    check_minilm(params, "hf")
    if not params.get("model_dir"):
        raise FedLabelsError("hf needs model_dir=PATH, a local Hugging Face model directory "
                             "(config.json, tokenizer.json and the weights).")
    root = Path(str(params["model_dir"])).expanduser()
    if not root.is_dir():
        raise FedLabelsError(f"hf model_dir {root} is not a directory.")
    for name in ("config.json", "tokenizer.json"):
        if not (root / name).is_file():
            raise FedLabelsError(f"hf model_dir {root} has no {name}; "
                                 f"{_slow_tokenizer_fix(root) or _SAVE_HINT}")
    if not any((root / name).is_file() for name in _WEIGHTS):
        if any((root / name).is_file() for name in _PICKLED_WEIGHTS):
            raise FedLabelsError(f"hf model_dir {root} has its weights as pytorch_model.bin, "
                                 "a pickle, which fedlabels never loads from a file you pass; "
                                 f"{_pickle_fix(root)}")
        raise FedLabelsError(f"hf model_dir {root} has no weights ({_WEIGHTS[0]}); save the "
                             "model with save_pretrained, or copy its weights.")
    limit = position_limit(root)
    if limit is not None and "max_len" in params and int(params["max_len"]) > limit:
        raise FedLabelsError(f"max_len={params['max_len']} is more than the {limit} positions "
                             f"of hf model_dir {root} (max_position_embeddings); use "
                             f"max_len<={limit}.")


def position_limit(root: Path) -> int | None:
    """How many tokens a model directory's encoder takes (``max_position_embeddings`` of
    its ``config.json``); ``None`` where it does not say."""
    import json

    try:
        value = json.loads((root / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 1 else None


def make_hf(n_classes: int, random_state: int, **params: Any) -> TransformerClassifier:
    """A Hugging Face model directory's encoder (a sequence-classification checkpoint's own
    head is replaced by ours) + mean pooling + head; ``mode`` defaults to ``full``."""
    check_hf(params)
    params.setdefault("mode", "full")
    # the learner (and the models file that stores it) keeps the directory's absolute path:
    # a run's models predict from any directory, not only from where the run started
    params["model_dir"] = str(Path(str(params["model_dir"])).expanduser().resolve())
    limit = position_limit(Path(params["model_dir"]))
    if limit is not None and "max_len" not in params:  # the default, within the model's
        params["max_len"] = min(64, limit)
    return make_minilm(n_classes, random_state, **params)


class _Head(nn.Module):
    def __init__(self, kind: str, width: int, n_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(width, width), nn.ReLU()] if kind == "mlp" else []
        self.net = nn.Sequential(*layers, nn.Linear(width, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerClassifier(ClassifierMixin, BaseEstimator):
    """A BERT-style encoder + mean pooling + head, on text ``X`` (1-D array of ``str``).

    Parameters
    ----------
    mode : {"lora", "frozen", "full"}
        What trains (module docstring).
    r, alpha : int
        LoRA rank and scale numerator: adapters add ``(alpha / r) · B A x`` (``lora`` only).
    max_len : int
        Tokens per text, ``[CLS]`` and ``[SEP]`` included (longer texts are truncated).
    batch_size : int
        Minibatch per source (private, and pseudo-labelled when given).
    learning_rate : float or None
        Adam step size; ``None`` takes :data:`DEFAULT_LR` of the mode.
    head : {"linear", "mlp"}
        A linear layer, or one hidden ReLU layer as wide as the encoder, then linear.
    model_dir : str or None
        A local model directory; ``None`` is the fetched MiniLM (``fedlabels fetch minilm``).
    n_classes : int or None
        With it set (a run sets it) ``classes_`` is ``0..n_classes-1``; ``None``: the labels
        of ``y`` in ``fit``, of any kind (``train_steps`` takes label indices).
    max_steps : int, default=100
        Adam steps of ``fit``.
    weight_decay : float, default=0.0
        Adam's L2 penalty on the trained parameters.
    predict_batch_size : int, default=64
        Texts per pass of the encoder when predicting or embedding.
    warm_start : bool, default=False
        ``fit`` continues from the last fit (its classes kept) instead of starting afresh;
        ``train_steps``, what a run calls, always continues.
    random_state : int, RandomState, Generator or None, default=None
        Seeds the head, LoRA's adapters and minibatch order, as the torch MLP's (``None``:
        a fresh seed at each fit; an instance: one draw from it at each fit).
    """

    accepts_text: ClassVar[bool] = True
    supports_aux_index: ClassVar[bool] = True
    #: run settings (see :meth:`place`), not model parameters
    device: str = "cpu"
    precision: str = "fp32"

    def place(self, device: str, precision: str = "fp32") -> None:
        """Train and predict on ``device`` with ``precision`` (``fp32`` or ``bf16``)."""
        self.device, self.precision = str(device), str(precision)
        if hasattr(self, "model_"):
            self._move()

    def _move(self) -> None:
        self.base_.model.to(self.device)  # shared frozen weights (LoRA's too)
        self.encoder_.to(self.device)
        self.head_.to(self.device)
        for slots in self.optimizer_.state.values():
            for key, value in slots.items():
                if torch.is_tensor(value) and key != "step":
                    slots[key] = value.to(self.device)

    def __init__(self, mode: str = "lora", r: int = 8, alpha: int = 16, max_len: int = 64,
                 batch_size: int = 16, learning_rate: float | None = None,
                 head: str = "linear", n_classes: int | None = None, max_steps: int = 100,
                 weight_decay: float = 0.0, predict_batch_size: int = 64,
                 model_dir: str | None = None, warm_start: bool = False,
                 random_state: RandomStateLike = None) -> None:
        self.mode, self.r, self.alpha, self.max_len = mode, r, alpha, max_len
        self.batch_size, self.learning_rate, self.head = batch_size, learning_rate, head
        self.n_classes, self.max_steps, self.weight_decay = n_classes, max_steps, weight_decay
        self.predict_batch_size, self.model_dir = predict_batch_size, model_dir
        self.warm_start, self.random_state = warm_start, random_state

    # ------------------------------------------------------------------ set-up
    def _initialise(self, n_features: int, n_classes: int) -> None:
        """Build encoder, head and optimizer (``n_features`` is ignored: the input is text)."""
        if self.mode not in MODES or self.head not in HEADS:
            raise FedLabelsError(f"mode must be one of {MODES} and head one of {HEADS}.")
        check_training_params(  # the minilm spec's check, under the learner's names
            {"weight_decay": self.weight_decay, "batch_size": self.batch_size,
             "max_steps": self.max_steps, "predict_batch_size": self.predict_batch_size,
             "r": self.r, "alpha": self.alpha, "warm_start": self.warm_start,
             **({} if self.learning_rate is None else {"lr": self.learning_rate})},
            ("batch_size", "max_steps", "predict_batch_size", "r", "alpha"), ("warm_start",),
            show=repr, label={"lr": "learning_rate (lr)"})
        if self.model_dir is None:
            from fedlabels.downloads.minilm import require_model_dir

            path: str | Path = require_model_dir()
        else:
            path = self.model_dir
        seed = fit_seed(self.random_state)
        self.base_ = load_base(path)
        self.table_ = TokenTable.of(self.base_, int(self.max_len))
        self.encoder_ = encoder_for(self.base_, self.mode, self.r, self.alpha, seed)
        self.head_ = _Head(self.head, self.base_.hidden, n_classes)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # seeded head init, independent of torch's global RNG
            for p in self.head_.parameters():
                bound = 1.0 / np.sqrt(p.shape[-1] if p.dim() > 1 else len(p))
                p.uniform_(-bound, bound, generator=gen)
        if self.device != "cpu":  # before the optimizer: it holds these parameters
            self.base_.model.to(self.device)
            self.encoder_.to(self.device)
            self.head_.to(self.device)
        self.trainable_ = [(f"head.{n}", p) for n, p in self.head_.named_parameters()]
        if self.mode != "frozen":
            self.trainable_ = [(f"encoder.{n}", p) for n, p in
                               self.encoder_.named_parameters() if p.requires_grad
                               ] + self.trainable_
        lr = DEFAULT_LR[self.mode] if self.learning_rate is None else self.learning_rate
        self.optimizer_ = torch.optim.Adam([p for _, p in self.trainable_], lr=float(lr),
                                           weight_decay=float(self.weight_decay))
        self.rng_ = np.random.default_rng(seed)
        self.classes_ = np.arange(n_classes)  # no n_features_in_: text has no columns
        self.n_outputs_ = n_classes  # the head's outputs, what fedlabels' own code reads
        self.steps_ = 0
        self._cursors: dict[int, BatchCursor] = {}
        self.model_ = self.head_  # "built" marker shared with the torch MLP's helpers

    def initialise(self, n_features: int, n_classes: int) -> Self:
        """Build without training (FedAvg's common initialisation)."""
        self._initialise(n_features, n_classes)
        return self

    def _ensure_built(self, n_classes: int) -> None:
        if not hasattr(self, "model_"):
            self._initialise(1, self.n_classes if self.n_classes is not None else n_classes)

    def _rows(self, X: Any) -> np.ndarray:
        if not is_text(X):
            X = text_rows(X, "the minilm learner", "use a text dataset")  # empty, or refused
        return self.table_.rows(X)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array, tags.input_tags.string = False, True
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    def _cursor(self, key: int, n: int) -> BatchCursor:
        cursor = self._cursors.get(key)
        if cursor is None or cursor.n != n:
            cursor = self._cursors[key] = BatchCursor(n, int(self.batch_size), self.rng_)
        return cursor

    def _pooled(self, rows: np.ndarray) -> torch.Tensor:
        """The pooled encoder output of token-table ``rows`` (gradients flow unless frozen)."""
        if self.mode == "frozen":
            return torch.from_numpy(self.table_.embed(rows, int(self.predict_batch_size))
                                    ).to(self.device)
        ids, mask = (t.to(self.device) for t in self.table_.batch(rows))
        with autocast(self.device, self.precision):
            hidden = self.encoder_(input_ids=ids, attention_mask=mask)[0]
        return mean_pool(hidden.float(), mask)

    def _logits(self, rows: np.ndarray) -> torch.Tensor:
        """Class logits of token-table ``rows`` (float32, on the device)."""
        return self._head_logits(self._pooled(rows))

    def _head_logits(self, pooled: torch.Tensor) -> torch.Tensor:
        """Class logits of pooled embeddings (float32)."""
        with autocast(self.device, self.precision):
            return self.head_(pooled).float()

    def _train_mode(self, on: bool) -> None:
        self.head_.train(on)
        if self.mode != "frozen":
            self.encoder_.train(on)

    # ------------------------------------------------------------------ training
    def train_steps(self, X: Any, y: np.ndarray, n_steps: int, X_aux: Any = None,
                    y_aux: np.ndarray | None = None, w_aux: np.ndarray | None = None,
                    aux_index: np.ndarray | None = None,
                    consistency: Consistency | None = None) -> Self:
        """``n_steps`` Adam steps from the current weights; each on one minibatch of
        ``(X, y)`` plus, if given, one of ``(X_aux, y_aux)`` (optionally weighted by
        ``w_aux``; ``aux_index`` selects rows of ``X_aux``), as the torch MLP's;
        ``consistency`` adds its loss on the pooled embeddings of its texts."""
        y = np.asarray(y, dtype=np.int64)
        self._ensure_built(int(y.max()) + 1 if len(y) else 2)
        rows, yt = self._rows(X), torch.from_numpy(y)
        n_aux = len(y_aux) if X_aux is not None and y_aux is not None else 0
        if n_aux:
            arows = self._rows(X_aux)
            arows = arows if aux_index is None else arows[np.asarray(aux_index, np.int64)]
            if len(arows) != n_aux:
                raise FedLabelsError(f"{len(arows)} auxiliary texts but {n_aux} labels; "
                                     "aux_index and y_aux must be aligned.")
            ya = torch.from_numpy(np.asarray(y_aux, dtype=np.int64))
            wa = None if w_aux is None else torch.from_numpy(np.asarray(w_aux, np.float32))
        urows = None if consistency is None else self._rows(consistency.X)
        if self.mode == "frozen":  # embed every new text now, in length-sorted batches
            self.table_.embed(np.concatenate([rows, arows]) if n_aux else rows,
                              int(self.predict_batch_size))
            if urows is not None:
                self.table_.embed(urows, int(self.predict_batch_size))
        main, aux = self._cursor(0, len(rows)), self._cursor(1, n_aux)
        unl = None if urows is None else self._cursor(3, len(urows))
        self._train_mode(True)
        for _ in range(int(n_steps)):
            idx = main.next()
            batch_rows, yb, wb = rows[idx], yt[idx], None
            if n_aux:
                aidx = aux.next()
                batch_rows = np.concatenate([batch_rows, arows[aidx]])
                yb = torch.cat([yb, ya[aidx]])
                if wa is not None:
                    wb = torch.cat([torch.ones(len(idx)), wa[aidx]])
            self.optimizer_.zero_grad(set_to_none=True)
            logits = self._logits(batch_rows)
            losses = nn.functional.cross_entropy(logits, yb.to(logits.device),
                                                 reduction="none")
            loss = losses.mean() if wb is None else (losses * wb.to(logits.device)).mean()
            if consistency is not None and urows is not None and unl is not None:
                loss = loss + consistency_loss(consistency, self._pooled(urows[unl.next()]),
                                               self._head_logits, self.rng_)
            loss.backward()
            adam_step(self.optimizer_)
        self.steps_ += int(n_steps)
        return self

    def distill_steps(self, X_soft: Any, P_soft: np.ndarray, n_steps: int, X: Any = None,
                      y: np.ndarray | None = None, weight: float = 1.0) -> Self:
        """``n_steps`` Adam steps towards soft targets (plus private cross-entropy if
        ``(X, y)`` is given), as the torch MLP's ``distill_steps``."""
        P = torch.from_numpy(np.asarray(P_soft, dtype=np.float32))
        if P.ndim != 2 or len(P) != len(X_soft):
            raise FedLabelsError(f"soft targets must have shape ({len(X_soft)}, C), got "
                                 f"{tuple(P.shape)}.")
        self._ensure_built(P.shape[1])
        if P.shape[1] != len(self.classes_):
            raise FedLabelsError(f"soft targets have {P.shape[1]} classes, the model "
                                 f"{len(self.classes_)}.")
        srows = self._rows(X_soft)
        use_private = X is not None and y is not None and len(y) > 0
        if use_private:
            rows, yt = self._rows(X), torch.from_numpy(np.asarray(y, dtype=np.int64))
            main = self._cursor(0, len(rows))
        soft = self._cursor(2, len(srows))
        self._train_mode(True)
        for _ in range(int(n_steps)):
            sidx = soft.next()
            self.optimizer_.zero_grad(set_to_none=True)
            logp = torch.log_softmax(self._logits(srows[sidx]), dim=1)
            loss = float(weight) * -(P[sidx].to(logp.device) * logp).sum(dim=1).mean()
            if use_private:
                idx = main.next()
                logits = self._logits(rows[idx])
                loss = loss + nn.functional.cross_entropy(logits, yt[idx].to(logits.device))
            loss.backward()
            adam_step(self.optimizer_)
        self.steps_ += int(n_steps)
        return self

    def fit(self, X: Any, y: Any, **fit_params: Any) -> Self:
        """``max_steps`` steps (from scratch unless ``warm_start``) on texts ``X`` and labels
        ``y`` of any kind (``classes_``: see ``n_classes``); no ``sample_weight``."""
        refuse_fit_params(self, fit_params)
        texts = text_rows(X, "the minilm learner", "use a text dataset")
        y = text_targets(len(texts), y)
        if bool(self.warm_start) and hasattr(self, "model_"):
            targets = label_codes(y, self.classes_)
        else:
            self.__dict__.pop("model_", None)
            classes, targets = fit_classes(y, self.n_classes)
            self._initialise(1, len(classes))
            self.classes_ = classes
        return self.train_steps(texts, targets, int(self.max_steps))

    # ------------------------------------------------------------------ inference
    def hidden_features(self, X: Any, batch: int | None = None) -> np.ndarray:
        """The pooled encoder output per text (the head's input), batched, inference mode."""
        if not hasattr(self, "model_"):
            raise NotFittedLearnerError("this minilm learner is not fitted yet; call fit "
                                        "first.")
        rows = self._rows(X)
        if self.mode == "frozen":
            return self.table_.embed(rows, int(batch or self.predict_batch_size)).copy()
        out = np.empty((len(rows), self.base_.hidden), dtype=np.float32)
        order = np.argsort(self.table_.lengths[rows], kind="stable")  # little padding
        step = int(batch or self.predict_batch_size)
        self._train_mode(False)
        with torch.inference_mode():
            for start in range(0, len(order), step):
                part = order[start : start + step]
                out[part] = self._pooled(rows[part]).float().cpu().numpy()
        return out

    def predict_proba(self, X: Any) -> np.ndarray:
        feats = torch.from_numpy(self.hidden_features(X)).to(self.device)
        self.head_.eval()
        with torch.inference_mode(), autocast(self.device, self.precision):
            return torch.softmax(self.head_(feats).float(), dim=1).cpu().numpy()

    def predict(self, X: Any) -> np.ndarray:
        proba = self.predict_proba(X)
        return np.asarray(self.classes_)[proba.argmax(axis=1)]

    # ------------------------------------------------------------------ parameters
    def get_weights(self) -> np.ndarray:
        """The trainable parameters as one float32 vector (what FedAvg averages): the head
        (frozen), the LoRA adapters and the head (lora), or everything (full)."""
        return torch.cat([p.detach().reshape(-1) for _, p in self.trainable_]).cpu().numpy()

    def set_weights(self, flat: np.ndarray) -> None:
        flat_t = torch.from_numpy(np.array(flat, dtype=np.float32))
        if flat_t.numel() != self.n_parameters:
            raise FedLabelsError(f"weight vector has {flat_t.numel()} entries, the model "
                                 f"trains {self.n_parameters}.")
        offset = 0
        with torch.no_grad():
            for _, p in self.trainable_:
                p.copy_(flat_t[offset : offset + p.numel()].view_as(p).to(p.device))
                offset += p.numel()

    @property
    def n_parameters(self) -> int:
        """Trainable parameters (the length of :meth:`get_weights`)."""
        return sum(p.numel() for _, p in self.trainable_)

    # ------------------------------------------------------------------ state
    def state_dict(self, *, optimizer_slots: bool = True) -> dict[str, Any]:
        """The whole mutable state (trainable weights, Adam moments, minibatch RNG and
        cursors, counters) as flat keys -> arrays / scalars; the frozen weights are not in it
        (``optimizer_slots=False``: nor Adam's moments, a models file's state).
        """
        return {"minilm.mode": str(self.mode),
                **mlp_state_dict(_StateView(self), optimizer_slots=optimizer_slots)}

    def load_state_dict(self, state: Mapping[str, Any], *, optimizer: bool = True) -> None:
        """Restore a :meth:`state_dict` of a learner built with the same parameters
        (``optimizer=False``: a models file's state, the optimiser starts fresh)."""
        if state.get("minilm.mode") != self.mode:
            raise FedLabelsError(f"minilm state is for mode={state.get('minilm.mode')!r}, "
                                 f"this learner has mode={self.mode!r}.")
        rest = {k: v for k, v in state.items() if k != "minilm.mode"}
        if not bool(rest.get("built", False)):
            self.__dict__.pop("model_", None)
            return
        load_mlp_state_dict(_StateView(self), rest, optimizer=optimizer)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the parameters and :meth:`state_dict` only: the encoder is rebuilt from its
        directory on unpickling (a saved run holds adapters and head, not 90 MB per client)."""
        built = hasattr(self, "model_")
        return {"params": self.get_params(deep=False),
                "state": self.state_dict() if built else None,
                "classes": self.classes_ if built else None}

    def __setstate__(self, data: dict[str, Any]) -> None:
        self.__init__(**data["params"])  # type: ignore[misc]
        if data["state"] is not None:
            self.load_state_dict(data["state"])
            if data.get("classes") is not None:  # the labels of y (a state keeps their count)
                self.classes_ = data["classes"]


class _StateView:
    """The learner as the torch MLP's state helpers see it: ``model_`` holds only the
    trainable parameters (the same tensors, so loading writes into the learner)."""

    hidden_layer_sizes = ()
    #: the state format's input width: one column of text (the learner, as scikit-learn's
    #: text estimators, has no ``n_features_in_``)
    n_features_in_ = 1

    def __init__(self, learner: TransformerClassifier) -> None:
        object.__setattr__(self, "_learner", learner)

    @property
    def model_(self) -> nn.ParameterDict:
        # pairs, not a dict: ParameterDict sorts a dict's keys, the optimizer's order must stay
        return nn.ParameterDict([(n.replace(".", "__"), p) for n, p in self._learner.trainable_])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._learner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._learner, name, value)
