"""The Python API: build a federation, run a method, get a :class:`RunResult`.

Example (works in a notebook with numpy arrays or pandas objects)::

    import fedlabels as fl
    fed = fl.load_federation("breast_cancer", n_clients=5, seed=0)
    result = fl.run("fedct", fed, model="decision_tree", rounds=20, seed=0)
    result.final["mean_accuracy"], result.to_frame()
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedlabels.core.threads import set_threads
from fedlabels.data import Federation, load_federation
from fedlabels.engines import simulate
from fedlabels.learners import as_models
from fedlabels.methods import get_method
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.config import RunConfig
from fedlabels.runs.federation import federation_for


def run(method: str, federation: Federation | str, *, model: Any = None,
        rounds: int = 20, period: int = 50, quorum: float | None = None, seed: int = 0,
        eval_every: int = 1, progress: bool | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        config: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        insecure_reproducible_noise: bool = False, threads: int | None = None,
        malicious: int = 0, attack: str | None = None,
        participation: float | int | None = None, dropout: float | None = None,
        deadline: float | None = None, unlabeled_shift: float = 0.0,
        public_pca: int | None = None, device: str = "cpu",
        precision: str = "fp32", batch_clients: str = "auto") -> RunResult:
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
    ``progress``: ``None`` shows a bar on a terminal only (see :mod:`fedlabels.runs.progress`).
    ``malicious`` clients (K, below half) send what ``attack`` (``flip``, ``random``,
    ``constant``, ``targeted``) makes of their messages; see :mod:`fedlabels.method.adversary`.
    ``participation`` (a probability per client and round, e.g. ``0.5``, or an int: exactly
    that many clients per round), ``dropout`` and ``deadline``: partial participation,
    dropouts and stragglers (see :mod:`fedlabels.runs.participation`).
    ``unlabeled_shift`` (S in [0, 1]) draws U with shifted class proportions
    (:mod:`fedlabels.data.shift`) when ``federation`` is a dataset name; for a
    :class:`Federation` pass it to ``make_federation`` / ``load_federation`` instead.
    ``public_pca`` (K) projects every feature vector onto U's top-K whitened principal
    components (:mod:`fedlabels.data.public_pca`); it too applies to a dataset name only.
    ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) and ``precision`` (``fp32``,
    ``bf16``) place torch learners (:mod:`fedlabels.learners.devices`); ``model`` may also be
    your own network, ``fl.TorchModel(factory, ...)`` (:mod:`fedlabels.learners.torch_net`).
    ``batch_clients`` (``auto``, ``on``, ``off``) trains the clients' torch learners together
    (:mod:`fedlabels.engines.together`); ``auto``: on CUDA only.
    ``threads`` sets this process's torch threads (default: ``FEDLABELS_THREADS``, else 1;
    see :mod:`fedlabels.core.threads`); it stays set after the run, like ``torch.set_num_threads``.
    """
    set_threads(threads)  # a bad count fails before any data is loaded
    if not isinstance(federation, str | Federation):
        from fedlabels.core.errors import FedLabelsError

        raise FedLabelsError(f"run() takes a Federation or a dataset name, got "
                             f"{type(federation).__name__}; for your own X and y build one "
                             "first: fl.run(method, fl.make_federation(X, y, n_clients=5, "
                             "n_unlabeled=...)).")
    options = dict(options or {})
    if quorum is not None:
        options["quorum"] = quorum
    cfg = RunConfig(method=method, dataset=federation if isinstance(federation, str)
                    else federation.name, model=model if isinstance(model, str) else None,
                    rounds=rounds, period=period, seed=seed,
                    eval_every=eval_every, options=options,
                    insecure_reproducible_noise=insecure_reproducible_noise,
                    malicious=malicious, attack=attack, participation=participation,
                    dropout=dropout, deadline=deadline, unlabeled_shift=unlabeled_shift,
                    public_pca=public_pca, device=device, precision=precision,
                    batch_clients=batch_clients)
    impl = get_method(cfg.method)
    parsed = impl.parse_options(cfg.options)
    if isinstance(federation, str):
        federation = load_federation(federation, seed=seed,
                                     unlabeled_shift=cfg.unlabeled_shift,
                                     public_pca=cfg.public_pca)
    elif cfg.unlabeled_shift or cfg.public_pca is not None:
        from fedlabels.core.errors import FedLabelsError

        key = "unlabeled_shift" if cfg.unlabeled_shift else "public_pca"
        raise FedLabelsError(f"{key} applies when the federation is built: pass it to "
                             "make_federation/load_federation, not to run() with a Federation.")
    record = {**cfg.to_dict(), "clients": federation.n_clients, **(config or {})}
    if model is None or isinstance(model, str):
        model = cfg.model  # aliases resolved: one name per model
    record["model"] = model if isinstance(model, str) else repr(model)
    return simulate(impl, federation, as_models(model), rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, eval_every=cfg.eval_every, progress=progress,
                    config=record, options=parsed, on_round=on_round,
                    insecure_reproducible_noise=cfg.insecure_reproducible_noise,
                    malicious=cfg.malicious, attack=cfg.attack,
                    participation=cfg.participation, dropout=cfg.dropout,
                    deadline=cfg.deadline, device=cfg.device, precision=cfg.precision,
                    batch_clients=cfg.batch_clients)


def run_config(cfg: RunConfig, progress: bool | None = None,
               threads: int | None = None, checkpoint: str | Path | None = None,
               resume: str | Path | None = None) -> RunResult:
    """Run a :class:`RunConfig` (what ``fedlabels run`` does); ``progress`` and ``threads``
    as in :func:`run`; ``checkpoint`` and ``resume`` as in
    :func:`~fedlabels.engines.inprocess.simulate` (see :func:`resume`)."""
    set_threads(threads)
    impl = get_method(cfg.method)  # fail on an unknown method or option before loading data
    options = impl.parse_options(cfg.options)
    models = as_models(cfg.model)
    federation = federation_for(cfg)
    return simulate(impl, federation, models, rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, eval_every=cfg.eval_every, progress=progress,
                    config=cfg.to_dict(), options=options,
                    insecure_reproducible_noise=cfg.insecure_reproducible_noise,
                    malicious=cfg.malicious, attack=cfg.attack,
                    participation=cfg.participation, dropout=cfg.dropout,
                    deadline=cfg.deadline, checkpoint=checkpoint, resume=resume,
                    device=cfg.device, precision=cfg.precision,
                    batch_clients=cfg.batch_clients)


def resume(path: str | Path, *, rounds: int | None = None, progress: bool | None = None,
           threads: int | None = None) -> RunResult:
    """Continue an interrupted run of :func:`run_config` (or ``fedlabels run``) from the
    checkpoint beside its result ``path`` (``X.json``, or ``X.checkpoint.npz`` itself);
    ``rounds`` extends a finished run to that many rounds. The result equals the
    uninterrupted run's (wall-clock aside) and its ``provenance.resumed`` says from which
    round; the checkpoint keeps being updated. See :mod:`fedlabels.runs.checkpoint`."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.runs.checkpoint import checkpoint_path, load_checkpoint

    file = checkpoint_path(path)
    saved = load_checkpoint(file)
    _refuse_finished(file, saved, rounds)
    try:
        cfg = RunConfig(**saved.config)
    except (TypeError, FedLabelsError) as exc:
        raise FedLabelsError(f"checkpoint {file} was not made from a run configuration "
                             f"({exc}); resume it with simulate(..., resume=PATH) and the "
                             "same federation and models.") from None
    if rounds is not None:
        cfg = cfg.replace(rounds=rounds)
    return run_config(cfg, progress, threads, resume=file)


def _refuse_finished(checkpoint: Path, saved: Any, rounds: int | None) -> None:
    """A finished run (its result written, not interrupted, every checkpointed round in it)
    is not resumed unless ``rounds`` extends it: its files, wall_seconds included, stay."""
    import json

    from fedlabels.core.errors import FedLabelsError
    from fedlabels.runs.checkpoint import SUFFIX

    result = checkpoint.with_name(checkpoint.name[:-len(SUFFIX)] + ".json")
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError):
        return  # no complete result yet: resuming writes it
    done = len(saved.records)
    if not isinstance(data, dict) or data.get("interrupted") \
            or len(data.get("rounds") or []) != done:
        return
    if rounds is None or rounds <= int(saved.config.get("rounds", done)):
        raise FedLabelsError(f"{result} is a finished run ({done} round(s) run); nothing to "
                             "resume, its files are unchanged. To extend it, give more "
                             "rounds (--rounds N; Python: rounds=N).")
