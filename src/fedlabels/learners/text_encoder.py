"""The transformer encoder behind the ``minilm`` learner: loading, LoRA, token and embedding caches.

* :func:`load_base` reads a BERT-style encoder (``config.json`` + ``model.safetensors``) and
  its ``tokenizer.json`` from a local directory, with the Hugging Face hub off, once per
  process; dropout is switched off so training depends only on the run seed.
* :func:`encoder_for` gives a learner its encoder for a mode: ``frozen`` shares the base
  (never trained), ``lora`` wraps a copy whose frozen matrices are the *same tensors* as the
  base's (only the adapters are new memory) with ``peft`` LoRA on the attention query and
  value projections, ``full`` deep-copies everything.
* :class:`TokenTable` tokenises each distinct text once per process and keeps its ids;
  frozen mode also keeps each text's pooled embedding (the encoder never changes), so its
  training is head-only. These caches hold derived values only, never learner state.
"""

from __future__ import annotations

import copy
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fedlabels.core.errors import FedLabelsError

#: the attention projections LoRA adapts (query and value, as in the LoRA paper)
LORA_TARGETS = ("query", "value")


@dataclass
class Base:
    """A loaded encoder and tokenizer, shared read-only by the learners of a process."""

    path: Path
    model: nn.Module
    tokenizer: Any
    hidden: int
    pad_id: int
    tables: dict[int, TokenTable] = field(default_factory=dict)


_BASES: dict[str, Base] = {}


def load_base(path: str | Path) -> Base:
    """The encoder in ``path`` (loaded on first use in this process), in eval mode, frozen."""
    key = str(Path(path).resolve())
    if key in _BASES:
        return _BASES[key]
    root = Path(key)
    for name in ("config.json", "tokenizer.json"):
        if not (root / name).is_file():
            raise FedLabelsError(f"{root} has no {name}; point model_dir at a BERT-style "
                                 "model directory, or run `fedlabels fetch minilm`.")
    from fedlabels.downloads.minilm import offline_hub

    offline_hub()
    from tokenizers import Tokenizer
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bar in a run's output
    hf_logging.set_verbosity_error()
    # float32 whatever the directory stores (many ship float16 or bfloat16 weights, which
    # transformers would keep): the learner trains in float32, bf16 only as autocast
    # safetensors only: a pytorch_model.bin beside them is a pickle, never loaded
    try:
        model = AutoModel.from_pretrained(key, local_files_only=True, use_safetensors=True,
                                          hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0,
                                          dtype=torch.float32)
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    except Exception as exc:  # a damaged or foreign directory: transformers' and
        # safetensors' errors span paragraphs; one line, naming the directory
        reason = " ".join(str(exc).split("\n\n")[0].split())[:300]
        raise FedLabelsError(f"cannot load the encoder in {root} ({type(exc).__name__}: "
                             f"{reason}); give a BERT-style model directory that "
                             "save_pretrained wrote (config.json, tokenizer.json, "
                             "model.safetensors).") from None
    model.eval().requires_grad_(False)
    tokenizer.no_padding()
    pad = tokenizer.token_to_id("[PAD]")
    base = Base(root, model, tokenizer, int(model.config.hidden_size),
                0 if pad is None else int(pad))
    _BASES[key] = base
    return base


def encoder_for(base: Base, mode: str, r: int, alpha: int, seed: int) -> nn.Module:
    """The encoder a learner trains in ``mode`` (see the module docstring)."""
    if mode == "frozen":
        return base.model
    if mode == "full":
        model = copy.deepcopy(base.model)
        return model.requires_grad_(True)
    if mode != "lora":
        raise FedLabelsError(f"mode must be frozen, lora or full, got {mode!r}.")
    from peft import LoraConfig, get_peft_model

    shared = {id(p): p for p in base.model.parameters()}  # frozen weights stay shared
    model = copy.deepcopy(base.model, shared)
    config = LoraConfig(r=int(r), lora_alpha=int(alpha), lora_dropout=0.0, bias="none",
                        target_modules=list(LORA_TARGETS))
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers 5 deprecation in peft
        torch.manual_seed(int(seed))  # peft draws lora_A from torch's global RNG
        return get_peft_model(model, config)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Average of the token states where ``mask`` is 1 (sentence-transformers' pooling)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


class TokenTable:
    """Token ids of every distinct text seen in this process, for one ``max_len``.

    Row ``k`` holds ``ids[k, :lengths[k]]``; :meth:`rows` maps a text array to its rows,
    tokenising only texts not seen before (and remembering the mapping per array object, so
    the same array costs no lookups the next time).
    """

    def __init__(self, base: Base, max_len: int) -> None:
        self.base, self.max_len = base, int(max_len)
        self.index: dict[str, int] = {}
        self.ids = np.zeros((0, self.max_len), dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.int64)
        self.embeddings = np.zeros((0, base.hidden), dtype=np.float32)
        self.embedded = np.zeros(0, dtype=bool)
        self._by_array: dict[int, tuple[Any, np.ndarray]] = {}

    @classmethod
    def of(cls, base: Base, max_len: int) -> TokenTable:
        table = base.tables.get(int(max_len))
        if table is None:
            table = base.tables[int(max_len)] = cls(base, max_len)
        return table

    def rows(self, X: np.ndarray) -> np.ndarray:
        hit = self._by_array.get(id(X))
        if hit is not None and hit[0]() is X and len(hit[1]) == len(X):
            return hit[1]
        texts = [str(t) for t in X]
        new = list(dict.fromkeys(t for t in texts if t not in self.index))
        if new:
            self._add(new)
        rows = np.fromiter((self.index[t] for t in texts), dtype=np.int64, count=len(texts))
        try:
            ref = weakref.ref(X)
        except TypeError:  # a list: no memo
            return rows
        self._by_array[id(X)] = (ref, rows)
        return rows

    def _add(self, texts: list[str]) -> None:
        tok = self.base.tokenizer
        tok.enable_truncation(max_length=self.max_len)
        encoded = tok.encode_batch(texts)
        n0 = len(self.lengths)
        ids = np.full((len(texts), self.max_len), self.base.pad_id, dtype=np.int64)
        lengths = np.array([len(e.ids) for e in encoded], dtype=np.int64)
        for k, e in enumerate(encoded):
            ids[k, : lengths[k]] = e.ids
        self.ids = np.concatenate([self.ids, ids])
        self.lengths = np.concatenate([self.lengths, lengths])
        self.embeddings = np.concatenate(
            [self.embeddings, np.zeros((len(texts), self.base.hidden), dtype=np.float32)])
        self.embedded = np.concatenate([self.embedded, np.zeros(len(texts), dtype=bool)])
        self.index.update({t: n0 + k for k, t in enumerate(texts)})

    def batch(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Input ids and attention mask of ``rows``, padded to the longest of them."""
        width = max(int(self.lengths[rows].max()), 1) if len(rows) else 1
        ids = torch.from_numpy(self.ids[rows, :width])
        mask = torch.from_numpy(np.arange(width) < self.lengths[rows, None]).long()
        return ids, mask

    def embed(self, rows: np.ndarray, batch: int) -> np.ndarray:
        """Pooled base-encoder embeddings of ``rows`` (computed once per text, frozen mode)."""
        todo = np.unique(rows[~self.embedded[rows]])
        if len(todo):
            todo = todo[np.argsort(self.lengths[todo], kind="stable")]  # little padding
            device = next(self.base.model.parameters()).device
            with torch.inference_mode():
                for start in range(0, len(todo), batch):
                    part = todo[start : start + batch]
                    ids, mask = (t.to(device) for t in self.batch(part))
                    hidden = self.base.model(input_ids=ids, attention_mask=mask)[0]
                    self.embeddings[part] = mean_pool(hidden, mask).float().cpu().numpy()
            self.embedded[todo] = True
        return self.embeddings[rows]


def adapted_matrices(model: nn.Module) -> list[tuple[int, int]]:
    """``(d_in, d_out)`` of every matrix LoRA adapts in ``model`` (for parameter counts)."""
    return [(m.in_features, m.out_features) for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in LORA_TARGETS]
