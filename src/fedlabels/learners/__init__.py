"""Learners: any scikit-learn classifier, plus a torch MLP adapter; model specs by name."""

from fedlabels.learners.model_spec import ModelSpec
from fedlabels.learners.specs import (
    MODELS,
    as_models,
    build_learner,
    canonical_model_spec,
    check_estimator,
    clone_fresh,
    expand_per_client,
    parse_model_spec,
    register_model,
)


def is_iterative(learner: object) -> bool:
    """True for learners trained by warm-started steps (``train_steps``), e.g. torch models."""
    return callable(getattr(learner, "train_steps", None))


def has_weights(learner: object) -> bool:
    """True for learners whose parameters can be averaged (FedAvg)."""
    return callable(getattr(learner, "get_weights", None)) and callable(
        getattr(learner, "set_weights", None))


def clone_fresh_learner(learner: object) -> object:
    """An unfitted copy of a refit learner (scikit-learn ``clone``)."""
    return clone_fresh(learner)


__all__ = [
    "MODELS",
    "ModelSpec",
    "as_models",
    "build_learner",
    "canonical_model_spec",
    "check_estimator",
    "clone_fresh_learner",
    "expand_per_client",
    "has_weights",
    "is_iterative",
    "parse_model_spec",
    "register_model",
]
