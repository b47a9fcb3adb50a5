"""Factories that build a learner from a model spec's parameters (scikit-learn, torch MLP)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedlabels.core.errors import FedLabelsError

Factory = Callable[..., Any]


def sklearn_factory(cls_path: str, rename: dict[str, str] | None = None,
                    **defaults: Any) -> Factory:
    """The factory of the scikit-learn estimator ``cls_path`` (``module.Class``): the spec's
    parameters over ``defaults``, renamed by ``rename``, the run's seed as ``random_state``
    where the estimator takes one, parameters it refuses in one line."""
    module_name, cls_name = cls_path.rsplit(".", 1)

    def factory(n_classes: int, random_state: int, **params: Any) -> Any:
        import importlib

        cls = getattr(importlib.import_module(module_name), cls_name)
        kwargs = {**defaults}
        for key, value in params.items():
            kwargs[(rename or {}).get(key, key)] = value
        if "random_state" in cls().get_params():
            kwargs.setdefault("random_state", random_state)
        try:
            estimator = cls(**kwargs)
            estimator._validate_params()
        except (TypeError, ValueError) as exc:
            raise FedLabelsError(f"invalid parameters for {cls_name}: {exc}") from None
        return estimator

    return factory


def check_param_names(model: str, params: dict[str, Any], *class_paths: str,
                      rename: dict[str, str] | None = None,
                      extra: tuple[str, ...] = ()) -> None:
    """A spec's parameter names must be the estimator's (those of any of ``class_paths``:
    the classifier and the regressor a spec stands for), checked when the spec is parsed:
    a misspelt ``max_depht`` was a TypeError after the data loaded, and xgboost took unknown
    names with a warning and its defaults."""
    if not params:
        return
    import importlib

    from fedlabels.core.errors import did_you_mean

    names = set(rename or {}) | set(extra)
    for path in class_paths:
        module_name, cls_name = path.rsplit(".", 1)
        names |= set(getattr(importlib.import_module(module_name), cls_name)().get_params())
    names -= set((rename or {}).values())
    unknown = sorted(set(params) - names)
    if unknown:
        raise FedLabelsError(f"unknown parameter(s) {', '.join(unknown)} of {model}"
                             f"{did_you_mean(unknown[0], names)}; it takes "
                             f"{', '.join(sorted(names))}.")


def torch_mlp_factory(n_classes: int, random_state: int, hidden: Any = (512, 512),
                      lr: float = 1e-3, **params: Any) -> Any:
    """The ``mlp`` spec's :class:`~fedlabels.learners.torch_mlp.TorchMLPClassifier`:
    ``hidden`` an int or a tuple of layer widths, ``lr`` its learning rate."""
    from fedlabels.learners.torch_mlp import TorchMLPClassifier

    if isinstance(hidden, int):
        hidden = (hidden,)
    return TorchMLPClassifier(hidden_layer_sizes=tuple(hidden), n_classes=n_classes,
                              learning_rate=lr, random_state=random_state, **params)
