"""Regression counterparts of the model specs, used when a federation's task is regression.

The spec language stays the same (``dt``, ``rf(n_estimators=50)``, ``mlp(hidden=64-64)``);
on a regression federation each name maps to the regressor of the same family:

============== =========================================================
spec           regressor
============== =========================================================
decision_tree  ``DecisionTreeRegressor`` (squared error)
random_forest  ``RandomForestRegressor`` (100 trees)
logreg         ``Ridge`` (L2-regularised linear regression, alpha=1)
sk_mlp         ``MLPRegressor`` (refit from scratch)
mlp            ``TorchMLPRegressor`` (warm-started, MSE, one output)
xgboost        ``XGBRegressor`` (squared error), if xgboost is installed
============== =========================================================

Targets arrive scaled to the unit interval by the federation's declared range (the same
public map for every client), so the torch regressor's output and FedAvg's averaged
weights live on one scale. A spec without a regressor (``rulefit``) is an error listing
the valid ones.
"""

from __future__ import annotations

from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.builders import Factory, sklearn_factory, torch_mlp_factory


def _torch_mlp_regressor(n_classes: int, random_state: int, **params: Any) -> Any:
    from fedlabels.learners.torch_regressor import TorchMLPRegressor

    # the classifier factory maps the spec's parameters; the regressor takes the same ones
    params = torch_mlp_factory(n_classes=1, random_state=random_state, **params).get_params()
    return TorchMLPRegressor(**{**params, "n_classes": 1})


def _xgboost_regressor(n_classes: int, random_state: int, n_estimators: int = 100,
                       max_depth: int = 6, learning_rate: float = 0.3, n_jobs: int = 1,
                       **params: Any) -> Any:
    from fedlabels.learners.tabular import require_package

    xgboost = require_package("xgboost", "xgboost")
    try:
        return xgboost.XGBRegressor(n_estimators=n_estimators, max_depth=max_depth,
                                    learning_rate=learning_rate, n_jobs=n_jobs,
                                    random_state=random_state, tree_method="hist", **params)
    except TypeError as exc:
        raise FedLabelsError(f"invalid parameters for XGBRegressor: {exc}") from None


#: canonical spec name -> regressor factory
REGRESSORS: dict[str, Factory] = {
    "decision_tree": sklearn_factory("sklearn.tree.DecisionTreeRegressor",
                                     criterion="squared_error"),
    "random_forest": sklearn_factory("sklearn.ensemble.RandomForestRegressor", n_estimators=100),
    "logreg": sklearn_factory("sklearn.linear_model.Ridge", alpha=1.0),
    "sk_mlp": sklearn_factory("sklearn.neural_network.MLPRegressor",
                              rename={"hidden": "hidden_layer_sizes"},
                              hidden_layer_sizes=(100,), max_iter=500),
    "mlp": _torch_mlp_regressor,
    "xgboost": _xgboost_regressor,
}


def regressor_factory(name: str) -> Factory:
    """The regressor factory of a canonical spec name, or an error listing the valid ones."""
    try:
        return REGRESSORS[name]
    except KeyError:
        raise FedLabelsError(f"model {name!r} has no regression counterpart; on a "
                             f"regression task use one of {', '.join(sorted(REGRESSORS))} "
                             "(logreg maps to ridge regression).") from None
