"""The scikit-learn estimators fedlabels defines, found by walking its learner modules, so a
test over them covers a new one (or names it)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from sklearn.base import BaseEstimator

import fedlabels.learners


def package_estimators() -> dict[str, type]:
    """The public scikit-learn estimators defined in fedlabels' public learner modules."""
    found = {}
    for info in pkgutil.iter_modules(fedlabels.learners.__path__, "fedlabels.learners."):
        if info.name.rsplit(".", 1)[1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseEstimator) \
                    and obj.__module__ == info.name and not name.startswith("_"):
                found[name] = obj
    return found
