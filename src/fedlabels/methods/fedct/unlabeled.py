"""FedCT's use of U beyond the consensus labels, and its local schedule.

Options of ``fedct`` (declared in :class:`~fedlabels.methods.fedct.fedct.FedCTOptions`),
all local to a client, so nothing more leaves it or reaches it:

* ``consistency_weight`` λ, ``consistency_threshold`` τ, ``consistency_augment``,
  ``consistency_strength``: a FixMatch-style loss on all of U each local step
  (:mod:`fedlabels.learners.consistency`): the client's own confident prediction on a U
  example is the target for an augmented view of it. The weight ramps with
  ``pseudo_warmup`` as the pseudo-label weight does.
* ``warmup_steps`` S: a client's first training takes S steps on its private data before
  the round's steps, so its first vote comes from a trained model (an untrained head votes
  the majority class and that first consensus locks in).
* ``finetune_steps`` F: in the run's last round a client takes F more steps on its private
  data alone after the round's steps (its last vote and its final model are the tuned
  model's; that last consensus trains nobody).

With the defaults (λ = 0, S = 0, F = 0) a client trains exactly as before, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.consistency import Consistency, image_shape
from fedlabels.method.base import Settings
from fedlabels.methods.fedct.schedule import require_torch_classification

#: the options that switch this module on
UNLABELED_OPTIONS = ("consistency_weight", "warmup_steps", "finetune_steps")


def check_unlabeled_options(opts: Any) -> None:
    """One-line errors for values that cannot be used together."""
    defaults = {"consistency_threshold": 0.95, "consistency_augment": "noise",
                "consistency_strength": 0.1}
    changed = [k for k, v in defaults.items() if getattr(opts, k) != v]
    if changed and opts.consistency_weight == 0:
        raise FedLabelsError(f"{', '.join(changed)} apply only with a consistency loss; "
                             "set consistency_weight > 0 or drop them.")
    if opts.consistency_augment == "dropout" and opts.consistency_strength >= 1:
        raise FedLabelsError(f"consistency_strength is the dropout probability with "
                             f"augment dropout; give one below 1, got "
                             f"{opts.consistency_strength}.")


def unlabeled_enabled(opts: Any) -> bool:
    """Whether any option of this module differs from its default."""
    return any(getattr(opts, name, 0) for name in UNLABELED_OPTIONS)


def consistency_spec(opts: Any, rnd: int, X_public: Any) -> Consistency | None:
    """The learner's consistency loss on U in round ``rnd`` (None when off)."""
    weight = float(getattr(opts, "consistency_weight", 0.0))
    if weight == 0 or X_public is None:
        return None
    warmup = int(getattr(opts, "pseudo_warmup", 0))
    ramp = min(1.0, max(rnd, 0) / warmup) if warmup > 0 else 1.0
    return Consistency(X=X_public, weight=weight * ramp,
                       threshold=float(opts.consistency_threshold),
                       augment=str(opts.consistency_augment),
                       strength=float(opts.consistency_strength))


def check_unlabeled(settings: Settings, learners: list[Any]) -> None:
    """The options need classification, torch learners and, for shift, image rows."""
    opts: Any = settings.options
    require_torch_classification(
        settings, learners, "consistency_weight, warmup_steps and finetune_steps",
        "a torch learner (e.g. --model mlp or minilm)")
    for learner in learners:
        text = getattr(learner, "accepts_text", False)
        if opts.consistency_weight and opts.consistency_augment == "shift" and (
                text or image_shape(settings.n_features) is None):
            raise FedLabelsError("consistency_augment shift needs image rows (C x H x H "
                                 "features); use noise or dropout.")


def is_first_training(learner: Any) -> bool:
    """Whether the learner has taken no step yet (its first vote is still to come)."""
    return int(getattr(learner, "steps_", 0)) == 0


def private_steps(learner: Any, X: np.ndarray, y: np.ndarray, steps: int) -> None:
    """``steps`` local steps on private data alone (warm-up, fine-tune)."""
    if steps > 0:
        learner.train_steps(X, y, steps)
