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
from fedlabels.data.loading import federation_for
from fedlabels.engines import simulate
from fedlabels.learners import as_models
from fedlabels.protocols import get_method
from fedlabels.results import RoundRecord, RunResult
from fedlabels.threads import set_threads


def run(method: str, federation: Federation | str, *, model: Any = None,
        rounds: int = 20, period: int = 50, quorum: float | None = None, seed: int = 0,
        eval_every: int = 1, progress: bool | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        config: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        insecure_reproducible_noise: bool = False, threads: int | None = None) -> RunResult:
    """Run one method in the in-process simulator.

    ``model`` is a spec string (``"dt"``, ``"dt,rf,mlp,..."``), a list of specs or
    estimators (one per client), or a single scikit-learn-compatible estimator; ``None``
    takes the method's default (the torch ``mlp`` for methods that average parameters or
    distil soft labels, else ``decision_tree``).
    ``options`` are the method's options (e.g. ``{"epsilon": 1.0}``; ``fedlabels methods``
    lists them); ``quorum`` is shorthand for ``options={"quorum": ...}`` (FedCT).
    Options are validated before the federation is loaded.
    ``insecure_reproducible_noise=True`` derives all noise from ``seed`` (tests and debugging
    only; the result then says ``privacy.guarantee = "none"``).
    ``progress``: ``None`` shows a bar on a terminal only (see :mod:`fedlabels.progress`).
    ``threads`` sets this process's torch threads (default: ``FEDLABELS_THREADS``, else 1;
    see :mod:`fedlabels.threads`); it stays set after the run, like ``torch.set_num_threads``.
    """
    set_threads(threads)  # a bad count fails before any data is loaded
    options = dict(options or {})
    if quorum is not None:
        options["quorum"] = quorum
    cfg = RunConfig(method=method, dataset=federation if isinstance(federation, str)
                    else federation.name, model=model if isinstance(model, str) else None,
                    rounds=rounds, period=period, seed=seed,
                    eval_every=eval_every, options=options,
                    insecure_reproducible_noise=insecure_reproducible_noise)
    impl = get_method(cfg.method)
    parsed = impl.parse_options(cfg.options)
    if isinstance(federation, str):
        federation = load_federation(federation, seed=seed)
    record = {**cfg.to_dict(), "clients": federation.n_clients, **(config or {})}
    if model is None:
        model = cfg.model
    record["model"] = model if isinstance(model, str) else repr(model)
    return simulate(impl, federation, as_models(model), rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, eval_every=cfg.eval_every, progress=progress,
                    config=record, options=parsed, on_round=on_round,
                    insecure_reproducible_noise=cfg.insecure_reproducible_noise)


def run_config(cfg: RunConfig, progress: bool | None = None,
               threads: int | None = None) -> RunResult:
    """Run a :class:`RunConfig` (what ``fedlabels run`` does); ``progress`` and ``threads``
    as in :func:`run`."""
    set_threads(threads)
    impl = get_method(cfg.method)  # fail on an unknown method or option before loading data
    options = impl.parse_options(cfg.options)
    models = as_models(cfg.model)
    federation = federation_for(cfg)
    return simulate(impl, federation, models, rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, eval_every=cfg.eval_every, progress=progress,
                    config=cfg.to_dict(), options=options,
                    insecure_reproducible_noise=cfg.insecure_reproducible_noise)
