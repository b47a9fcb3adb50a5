"""FedCT's pseudo-label weighting: a ramp-up, a constant weight and vote confidence.

Three options of ``fedct`` (declared in :class:`~fedlabels.methods.fedct.fedct.FedCTOptions`)
set the loss weight of each pseudo-labelled example of P in a client's local steps; a
private example always weighs 1 and the batch loss is the mean over both minibatches
(:meth:`~fedlabels.learners.torch_mlp.TorchMLPClassifier.train_steps` with ``w_aux``):

* ``pseudo_weight`` w: a constant weight on the pseudo-labelled examples;
* ``pseudo_warmup`` K: the weight ramps linearly, ``w · min(1, (t - 1) / K)`` in round
  t = 1, 2, ... (round 1 has no consensus yet; round 2 trains on round 1's), so the first,
  poor consensus (formed by models after b steps) is not learnt as firmly as a later one
  — against confirmation bias;
* ``vote_power`` p: each example's weight is also multiplied by ``share^p``, the share of
  the round's votes that its consensus label got. The server then sends the top votes per
  example beside the consensus (ceil(log2(m + 1)) bits each, counted in the download).

What a client uploads is unchanged: its hard labels on U. With the defaults (w = 1, K = 0,
p = 0) nothing is weighted and nothing extra travels, bit for bit the unweighted run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.comm import pack_labels
from fedlabels.consensus import ABSTAIN
from fedlabels.core.errors import FedLabelsError
from fedlabels.method.base import Settings


def weighting_enabled(opts: Any) -> bool:
    """Whether any pseudo-label weighting option differs from its default."""
    return (getattr(opts, "pseudo_weight", 1.0) != 1.0 or getattr(opts, "pseudo_warmup", 0) > 0
            or sends_votes(opts))


def sends_votes(opts: Any) -> bool:
    """Whether the server sends the top-vote counts (``vote_power`` or ``soft_targets``)."""
    return getattr(opts, "vote_power", 0.0) > 0 or bool(getattr(opts, "soft_targets", False))


def ramp_weight(opts: Any, rnd: int) -> float:
    """The pseudo-label weight of the engine's round index ``rnd`` (0-based, = t - 1):
    ``w · min(1, rnd / K)``."""
    weight = float(getattr(opts, "pseudo_weight", 1.0))
    warmup = int(getattr(opts, "pseudo_warmup", 0))
    if warmup > 0:
        weight *= min(1.0, max(rnd, 0) / warmup)
    return weight


def top_votes(votes: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per example, how many of the (m, |U|) ``votes`` equal its consensus label (0 where
    the consensus abstained)."""
    return np.where(labels == ABSTAIN, 0, (votes == labels[None, :]).sum(axis=0))


def encode_votes(counts: np.ndarray, n_voters: int) -> dict[str, np.ndarray]:
    """The top-vote counts, bit-packed at ceil(log2(m + 1)) bits per example."""
    return {"top_votes": pack_labels(counts, n_voters + 1)}


def decode_votes(arrays: dict[str, np.ndarray], n: int, n_voters: int) -> np.ndarray:
    """The ``n`` top-vote counts a message carries, each at most ``n_voters``, refused
    (:class:`~fedlabels.core.errors.RefusedError`) otherwise: a truncated array was read
    as 0 votes, a count above the voters as a share above 1 (a loss weight above the
    vote weighting's)."""
    from fedlabels.method.blocks import decode_labels

    return decode_labels(arrays, "top_votes", n, n_voters + 1, item="count")


def example_weights(opts: Any, rnd: int, share: np.ndarray | None, n: int) -> np.ndarray:
    """Loss weights of the n pseudo-labelled examples in round ``rnd``: the ramp times
    ``share^vote_power`` (``share`` aligned with them; None: no vote weighting)."""
    weights = np.full(n, ramp_weight(opts, rnd), dtype=np.float32)
    power = float(getattr(opts, "vote_power", 0.0))
    if power > 0 and share is not None:
        weights *= np.power(share, power).astype(np.float32)
    return weights


def soft_rows(labels: np.ndarray, share: np.ndarray,
              n_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The soft targets of ``soft_targets`` as weighted hard-label rows: per example j of P
    and class k with target probability q_jk > 0, one row (position j, class k, weight
    q_jk · rows / n). A minibatch drawn uniformly from the rows then has the expected loss
    of a uniform draw of P under the soft cross-entropy ``-sum_k q_jk log p_jk``."""
    n = len(labels)
    share = np.clip(np.asarray(share, dtype=np.float64), 0.0, 1.0)
    rest = (1.0 - share) / max(n_classes - 1, 1)
    position = np.tile(np.arange(n), n_classes)
    cls = np.concatenate([(labels + k) % n_classes for k in range(n_classes)])
    prob = np.concatenate([share] + [rest] * (n_classes - 1))
    keep = prob > 0
    weight = prob[keep] * keep.sum() / max(n, 1)
    return position[keep], cls[keep].astype(labels.dtype), weight.astype(np.float32)


def require_torch_classification(settings: Settings, learners: list[Any], options: str,
                                 need: str) -> None:
    """One-line errors unless the task is classification and every learner is a torch
    learner that takes per-example auxiliary rows (``options`` names what needs it)."""
    if settings.task == "regression":
        raise FedLabelsError(f"{options} apply to classification; drop them on a "
                             "regression task.")
    for learner in learners:
        if not getattr(learner, "supports_aux_index", False):
            raise FedLabelsError(f"{options} need {need}, got {type(learner).__name__}; "
                                 "drop them or change the model.")


def check_weighting(settings: Settings, learners: list[Any]) -> None:
    """Pseudo-label weights need classification and learners that take per-example weights."""
    require_torch_classification(
        settings, learners, "pseudo_weight, pseudo_warmup, vote_power and soft_targets",
        "a torch learner that weights pseudo-labelled examples (e.g. --model mlp)")
