"""The Python API: build a federation, run a method, get a :class:`RunResult`.

Example (works in a notebook with numpy arrays or pandas objects)::

    import fedlabels as fl
    fed = fl.load_federation("breast_cancer", n_clients=5, seed=0)
    result = fl.run("fedct", fed, model="decision_tree", rounds=20, seed=0)
    result.final["mean_accuracy"], result.to_frame()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedlabels.config import RunConfig
from fedlabels.data import Federation, get_dataset, make_federation
from fedlabels.engines import simulate
from fedlabels.errors import FedLabelsError
from fedlabels.learners import ModelSpec, check_estimator, parse_model_spec
from fedlabels.protocols import get_method
from fedlabels.results import RoundRecord, RunResult


def load_federation(dataset: str, *, n_clients: int = 5, n_unlabeled: int | None = None,
                    n_private: int | None = None, private_per_client: int | None = None,
                    n_test: int | None = None, partition: str = "iid",
                    seed: int = 0) -> Federation:
    """Build a federation from a registered dataset (or ``csv:PATH:TARGET``).

    Sizes left as ``None`` take the dataset's defaults (``fedlabels datasets`` lists them).
    """
    info = get_dataset(dataset)
    raw = info.load()
    defaults = info.defaults
    if private_per_client is not None:
        if n_private is not None:
            raise FedLabelsError("give n_private or private_per_client, not both.")
        n_private = private_per_client * n_clients
    n_unlabeled = n_unlabeled if n_unlabeled is not None else defaults.get("n_unlabeled")
    n_private = n_private if n_private is not None else defaults.get("n_private")
    n_test = n_test if n_test is not None else defaults.get("n_test")
    if n_unlabeled is None:  # a user table: half of what is left after the test split
        n_rows = len(raw.y)
        n_test_eff = n_test if n_test is not None else max(1, round(0.2 * n_rows))
        n_unlabeled = max(1, (n_rows - n_test_eff) // 2)
    return make_federation(raw.X, raw.y, n_clients=n_clients, n_unlabeled=n_unlabeled,
                           n_private=n_private, n_test=n_test, X_test=raw.X_test,
                           y_test=raw.y_test, partition=partition, scale=info.scale,
                           seed=seed, name=dataset)


def _as_models(model: Any) -> list[Any]:
    if isinstance(model, str):
        return parse_model_spec(model)
    if isinstance(model, ModelSpec):
        return [model]
    if isinstance(model, list | tuple):
        out: list[Any] = []
        for m in model:
            out.extend(_as_models(m))
        return out
    return [check_estimator(model)]


def run(method: str, federation: Federation | str, *, model: Any = "decision_tree",
        rounds: int = 20, period: int = 50, quorum: float | None = None, seed: int = 0,
        eval_every: int = 1, progress: bool | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        config: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None) -> RunResult:
    """Run one method in the in-process simulator.

    ``model`` is a spec string (``"dt"``, ``"dt,rf,mlp,..."``), a list of specs or
    estimators (one per client), or a single scikit-learn-compatible estimator.
    ``options`` are method-specific settings (e.g. ``{"epsilon": 1.0}``).
    """
    if isinstance(federation, str):
        federation = load_federation(federation, seed=seed)
    cfg = RunConfig(method=method, dataset=federation.name, clients=federation.n_clients,
                    rounds=rounds, period=period, quorum=quorum, seed=seed,
                    eval_every=eval_every, options=dict(options or {}))
    impl = get_method(cfg.method)
    record = {**cfg.to_dict(), **(config or {})}
    record["model"] = model if isinstance(model, str) else repr(model)
    return simulate(impl, federation, _as_models(model), rounds=cfg.rounds, period=cfg.period,
                    quorum=cfg.quorum, seed=cfg.seed, eval_every=cfg.eval_every,
                    progress=progress, config=record, options=cfg.options,
                    on_round=on_round)


def run_config(cfg: RunConfig, progress: bool | None = None) -> RunResult:
    """Run a :class:`RunConfig` (what ``fedlabels run`` does)."""
    impl = get_method(cfg.method)  # fail on an unknown method before loading data
    models = _as_models(cfg.model)
    federation = load_federation(cfg.dataset, n_clients=cfg.clients, n_unlabeled=cfg.unlabeled,
                                 n_private=cfg.private,
                                 private_per_client=cfg.private_per_client, n_test=cfg.test,
                                 partition=cfg.partition, seed=cfg.seed)
    return simulate(impl, federation, models, rounds=cfg.rounds, period=cfg.period,
                    quorum=cfg.quorum, seed=cfg.seed, eval_every=cfg.eval_every,
                    progress=progress, config=cfg.to_dict(), options=cfg.options)
