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
from fedlabels.data import Federation, load_federation
from fedlabels.engines import simulate
from fedlabels.learners import as_models
from fedlabels.protocols import get_method
from fedlabels.results import RoundRecord, RunResult


def run(method: str, federation: Federation | str, *, model: Any = "decision_tree",
        rounds: int = 20, period: int = 50, quorum: float | None = None, seed: int = 0,
        eval_every: int = 1, progress: bool | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        config: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None) -> RunResult:
    """Run one method in the in-process simulator.

    ``model`` is a spec string (``"dt"``, ``"dt,rf,mlp,..."``), a list of specs or
    estimators (one per client), or a single scikit-learn-compatible estimator.
    ``options`` are the method's options (e.g. ``{"epsilon": 1.0}``; ``fedlabels methods``
    lists them); ``quorum`` is shorthand for ``options={"quorum": ...}`` (FedCT).
    Options are validated before the federation is loaded.
    """
    options = dict(options or {})
    if quorum is not None:
        options["quorum"] = quorum
    cfg = RunConfig(method=method, dataset=federation if isinstance(federation, str)
                    else federation.name, rounds=rounds, period=period, seed=seed,
                    eval_every=eval_every, options=options)
    impl = get_method(cfg.method)
    parsed = impl.parse_options(cfg.options)
    if isinstance(federation, str):
        federation = load_federation(federation, seed=seed)
    record = {**cfg.to_dict(), "clients": federation.n_clients, **(config or {})}
    record["model"] = model if isinstance(model, str) else repr(model)
    return simulate(impl, federation, as_models(model), rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, eval_every=cfg.eval_every, progress=progress,
                    config=record, options=parsed, on_round=on_round)


def run_config(cfg: RunConfig, progress: bool | None = None) -> RunResult:
    """Run a :class:`RunConfig` (what ``fedlabels run`` does)."""
    impl = get_method(cfg.method)  # fail on an unknown method or option before loading data
    options = impl.parse_options(cfg.options)
    models = as_models(cfg.model)
    federation = load_federation(cfg.dataset, n_clients=cfg.clients, n_unlabeled=cfg.unlabeled,
                                 n_private=cfg.private,
                                 private_per_client=cfg.private_per_client, n_test=cfg.test,
                                 partition=cfg.partition, seed=cfg.seed)
    return simulate(impl, federation, models, rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, eval_every=cfg.eval_every, progress=progress,
                    config=cfg.to_dict(), options=options)
