"""The Python API: build a federation, run a method, get a :class:`RunResult`.

Example (works in a notebook with numpy arrays or pandas objects)::

    import fedlabels as fl
    fed = fl.load_federation("breast_cancer", clients=5, seed=0)
    result = fl.run("fedct", fed, model="decision_tree", rounds=20, seed=0)
    result.mean_accuracy, result.to_frame()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedlabels.core.threads import set_threads
from fedlabels.data import Federation, load_federation
from fedlabels.data.federation import IntLike
from fedlabels.engines import simulate
from fedlabels.learners import as_models
from fedlabels.methods import METHODS, get_method
from fedlabels.results import RoundRecord, RunResult
from fedlabels.runs.config import RunConfig, refuse_model
from fedlabels.runs.federation import check_before_data, federation_for

if TYPE_CHECKING:
    from typing import Unpack

    from fedlabels.runs.config import RunParams


def run(method: str, federation: Federation | str, *, model: Any = None,
        quorum: float | None = None, progress: bool | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        config: dict[str, Any] | None = None, threads: IntLike | None = None,
        **params: Unpack[RunParams]) -> RunResult:
    """Run one method in the in-process simulator.

    ``federation`` is a :class:`Federation` or a dataset name (what ``--dataset`` takes).
    ``params`` are the run parameters of ``fedlabels run`` under the same names
    (``clients=3``, ``rounds=10``, ``partition="dirichlet:0.5"``, ``options={...}``; the
    table in ``docs/usage.md``), with the same checks: an unknown name is a one-line error
    with a suggestion. The parameters that build the federation (``clients``,
    ``partition``, ...) apply to a dataset name only; build a :class:`Federation` with
    :func:`~fedlabels.data.loading.load_federation` or ``make_federation`` instead.
    ``model`` is also a list of specs or estimators (one per client) or a single
    scikit-learn-compatible estimator; ``quorum`` is shorthand for
    ``options={"quorum": ...}`` (FedCT). Options are validated before any data is loaded.
    ``device``, ``precision``, ``batch_clients``, ``cuda_graphs`` and ``offload`` place and
    batch torch learners (:mod:`fedlabels.learners.devices`); ``model`` may also be your own
    network, ``fl.TorchModel(factory, ...)`` (:mod:`fedlabels.learners.torch_net`).
    ``progress``: ``None`` shows a bar on a terminal only (see :mod:`fedlabels.runs.progress`);
    ``on_round`` is called with each round's record; ``config`` adds entries to the
    recorded configuration (not one of the run's own settings, which record what ran).
    ``threads`` sets this process's torch threads (default: ``FEDLABELS_THREADS``, else 1;
    see :mod:`fedlabels.core.threads`); it stays set after the run, like
    ``torch.set_num_threads``. A run whose figure needs a caveat (accuracy within noise of
    the majority-class baseline, an interrupted run) says so with a
    :class:`~fedlabels.core.errors.RunCaveatWarning`, as ``fedlabels run`` does.
    """
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.runs.spec import by_name, check_keys

    set_threads(threads)  # a bad count fails before any data is loaded
    _check_watching(progress, on_round)
    _check_method_first(method, federation)
    if not isinstance(federation, str | Federation):
        raise FedLabelsError(f"run() takes a Federation or a dataset name, got "
                             f"{type(federation).__name__}; for your own X and y build one "
                             "first: fl.run(method, fl.make_federation(X, y, clients=5, "
                             "unlabeled=...)).")
    given = check_keys(RunConfig, params, "run parameter", python=True)
    if "options" in given and given["options"] is None:  # options=None: no options given
        del given["options"]
    if quorum is not None:
        given["options"] = {**(given.get("options") or {}), "quorum": quorum}
    by_dataset = isinstance(federation, str)
    if not by_dataset:
        building = [k for k in given if by_name(RunConfig)[k].federation and k != "seed"]
        if building:
            verb = "applies" if len(building) == 1 else "apply"
            raise FedLabelsError(f"{', '.join(building)} {verb} when the federation is built: "
                                 "pass a dataset name to run(), or give "
                                 f"{'it' if len(building) == 1 else 'them'} to "
                                 "load_federation/make_federation, not to run() with a "
                                 "Federation.")
    name = federation if isinstance(federation, str) else federation.name
    cfg = RunConfig(method=method, dataset=name,
                    model=model if isinstance(model, str) else None, **given)
    _check_added_config(config, cfg)
    impl = get_method(cfg.method)
    if model is not None and not impl.capabilities.trains_models:
        refuse_model(impl, model)
    if model is not None and not isinstance(model, str):
        as_models(model)  # a ModelSpec checked before any data loads, as RunConfig a string
    parsed = impl.parse_options(cfg.options)
    if isinstance(federation, str):
        check_before_data(cfg, impl, parsed)
    if cfg.engine != "simulator":
        if not by_dataset or not (model is None or isinstance(model, str)):
            raise FedLabelsError(f"engine {cfg.engine!r} writes its sites from a dataset name "
                                 "and model specs: pass run() a dataset name and model as a "
                                 "string, or use engine 'simulator'.")
        result = _run_on_flower(cfg, progress, on_round)
        result.config.update(config or {})
        return result
    if isinstance(federation, str):
        federation = federation_for(cfg, progress)
    record = {**cfg.to_dict(), **(_built_with(federation) if not by_dataset else
                                  {"clients": federation.n_clients}), **(config or {})}
    if model is None or isinstance(model, str):
        model = cfg.model  # aliases resolved: one name per model
    record["model"] = _model_record(model)
    result = simulate(impl, federation, as_models(model), rounds=cfg.rounds,
                      period=cfg.period, seed=cfg.seed, eval_every=cfg.eval_every,
                      progress=progress, config=record, options=parsed, on_round=on_round,
                      insecure_reproducible_noise=cfg.insecure_reproducible_noise,
                      malicious=cfg.malicious, attack=cfg.poison,
                      participation=cfg.participation, dropout=cfg.dropout,
                      deadline=cfg.deadline, device=cfg.device, precision=cfg.precision,
                      batch_clients=cfg.batch_clients, cuda_graphs=cfg.cuda_graphs,
                      offload=cfg.offload,
                      workers=cfg.workers)
    _warn_caveats(result)
    return result


def privacy_plan(method: str, federation: Federation | str, *, model: Any = None,
                 quorum: float | None = None, threads: IntLike | None = None,
                 **params: Unpack[RunParams]) -> dict[str, Any]:
    """What :func:`run` with the same arguments will promise, without running it: the
    options checked and the data loaded as the run does, its session built (the DP servers
    calibrate their noise), nothing trained, released or written. ``federation`` (a
    :class:`Federation` or a dataset name), ``model``, ``quorum``, ``threads`` and the run
    ``params`` are :func:`run`'s. Returns ``method``,
    ``dataset``, ``clients``, ``rounds``, ``n_public`` (|U|) and ``privacy``, the result's
    ``privacy`` entry as a finished run records it, its ``epsilon`` and ``delta`` those of
    every planned release (``planned`` says what they are: a run that releases less, as one
    stopped early, spends less); a refusal the run would make before round 1 is raised
    (:mod:`fedlabels.runs.budget_plan`)."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.runs.budget_plan import privacy_plan as plan_of
    from fedlabels.runs.spec import check_keys

    set_threads(threads)
    _check_method_first(method, federation)
    given = check_keys(RunConfig, params, "run parameter", python=True)
    if given.get("options", {}) is None:
        del given["options"]
    if quorum is not None:
        given["options"] = {**(given.get("options") or {}), "quorum": quorum}
    if not isinstance(federation, str | Federation):
        raise FedLabelsError(f"privacy_plan() takes a Federation or a dataset name, got "
                             f"{type(federation).__name__}.")
    name = federation if isinstance(federation, str) else federation.name
    cfg = RunConfig(method=method, dataset=name,
                    model=model if isinstance(model, str) else None, **given)
    impl = get_method(cfg.method)
    parsed = impl.parse_options(cfg.options)
    if isinstance(federation, str):
        check_before_data(cfg, impl, parsed)
        federation = federation_for(cfg, False)
    return plan_of(cfg.method, federation, as_models(cfg.model if model is None or
                                                     isinstance(model, str) else model),
                   rounds=cfg.rounds, period=cfg.period, seed=cfg.seed, options=parsed,
                   device=cfg.device, precision=cfg.precision,
                   participation=cfg.participation, dropout=cfg.dropout,
                   deadline=cfg.deadline, malicious=cfg.malicious, attack=cfg.poison,
                   insecure_reproducible_noise=cfg.insecure_reproducible_noise)


def _check_method_first(method: Any, federation: Any) -> None:
    """A method's name first, then the data: ``fl.run(fed, "fedct")`` named the swap only
    as "method must be a str, got Federation(...)"."""
    from fedlabels.core.errors import FedLabelsError

    if isinstance(method, str):
        return
    if isinstance(method, Federation) and isinstance(federation, str) \
            and federation in METHODS:
        raise FedLabelsError(f"run() takes the method first, then the federation: "
                             f"fl.run({federation!r}, federation), not "
                             f"fl.run(federation, {federation!r}).")
    given = "a Federation" if isinstance(method, Federation) else type(method).__name__
    raise FedLabelsError(f"run()'s first argument is a method's name (fedlabels methods "
                         f"lists them), got {given}: fl.run(method, federation), e.g. "
                         "fl.run('fedct', federation).")


def _built_with(federation: Federation) -> dict[str, Any]:
    """The settings a :class:`Federation` given to :func:`run` was built with, recorded in
    the result's configuration in place of ``RunConfig``'s defaults (which said ``partition
    'iid'`` and no sizes for any federation, so ``fl.report`` pooled runs on an iid and a
    Dirichlet federation as one configuration's seeds); read as ``fl.report`` reads a
    result's federation (:func:`~fedlabels.results.built.built_settings`)."""
    from fedlabels.results.built import built_settings

    return built_settings(federation.summary())


def _check_watching(progress: Any, on_round: Any = None) -> None:
    """``progress`` (``True``, ``False`` or ``None``) and ``on_round`` (a callable or
    ``None``), refused in one line before any data is loaded: ``progress="no"`` showed
    progress, and a number as ``on_round`` failed with a TypeError after the first round
    had trained."""
    from fedlabels.core.errors import FedLabelsError

    if progress is not None and not isinstance(progress, bool):
        raise FedLabelsError(f"progress must be True, False or None (a bar on a terminal "
                             f"only), got {progress!r}.")
    if on_round is not None and not callable(on_round):
        raise FedLabelsError(f"on_round must be a function, called with each round's record "
                             f"(e.g. on_round=print), got {type(on_round).__name__}.")
    if on_round is not None and not _takes_one_argument(on_round):
        raise FedLabelsError(f"on_round is called with each round's record, one argument; "
                             f"{getattr(on_round, '__name__', 'it')} cannot take it: write "
                             "e.g. on_round=lambda record: ...")


def _takes_one_argument(func: Any) -> bool:
    """Whether ``func(record)`` binds (a lambda of no argument failed with a TypeError after
    the first round had trained); a callable without a signature (a builtin) is taken."""
    import inspect

    try:
        inspect.signature(func).bind(None)
    except TypeError:
        return False
    except ValueError:  # no signature to read
        return True
    return True


def _check_added_config(config: Any, cfg: RunConfig) -> None:
    """``config`` adds entries to the record; one that would replace what ran (``seed``,
    ``rounds``, ...) would make the record lie: a one-line error."""
    from fedlabels.core.errors import FedLabelsError

    if config is None:
        return
    if not isinstance(config, dict):
        raise FedLabelsError(f"config must be a dict of entries to add to the recorded "
                             f"configuration, got {type(config).__name__}.")
    clash = [k for k in config if k in {*cfg.to_dict(), "clients", "model", "method"}]
    if clash:
        keys = ", ".join(repr(k) for k in clash)
        raise FedLabelsError(f"config adds entries to the recorded configuration; {keys} "
                             f"{'is a setting' if len(clash) == 1 else 'are settings'} of the "
                             "run, recorded as it ran: pass "
                             f"{'it' if len(clash) == 1 else 'them'} to run() itself "
                             f"(e.g. run(..., {clash[0]}=...)), or name the entry otherwise.")


def _warn_caveats(result: RunResult) -> None:
    """The run's caveats (near chance, interrupted, ...) as :class:`RunCaveatWarning`, as
    ``fedlabels run`` prints them."""
    import warnings

    from fedlabels.core.errors import RunCaveatWarning, user_stacklevel
    from fedlabels.results.caveats import run_warnings

    for line in run_warnings(result):
        warnings.warn(RunCaveatWarning(line), stacklevel=user_stacklevel())


def run_config(cfg: RunConfig, progress: bool | None = None,
               threads: IntLike | None = None, checkpoint: str | Path | None = None,
               resume: str | Path | None = None, *, overwrite: bool = False,
               save: bool = True) -> RunResult:
    """Run a :class:`RunConfig` (what ``fedlabels run`` does); ``progress`` and ``threads``
    as in :func:`run`; ``checkpoint`` and ``resume`` as in
    :func:`~fedlabels.engines.inprocess.simulate` (see :func:`resume`). Its caveats are
    warned as :func:`run`'s are. With ``cfg.output`` set (``X.json``) the result is saved
    there as :meth:`RunResult.save` does (its rounds table and models beside it); the files
    are checked before any data is loaded, and existing ones are replaced only with
    ``overwrite=True``. ``save=False`` leaves writing to the caller."""
    if not isinstance(cfg, RunConfig):  # a TOML path or a dict failed on a missing attribute
        from fedlabels.core.errors import FedLabelsError

        raise FedLabelsError(f"run_config takes a RunConfig, got {type(cfg).__name__}: "
                             "fl.run_config(fl.load_config(\"run.toml\")) for a TOML file, "
                             "fl.run_config(fl.RunConfig.from_mapping(settings)) for a dict.")
    _check_watching(progress)
    files = _planned_outputs(cfg, overwrite) if save else None
    result = _run_config(cfg, progress, threads, checkpoint, resume)
    _warn_caveats(result)
    if files is not None:
        result.save(files["result"], overwrite=True)  # checked above
    return result


def _planned_outputs(cfg: RunConfig, overwrite: bool) -> dict[str, Path] | None:
    """``cfg.output``'s files, refused (one line) if they cannot or may not be written."""
    from fedlabels.core.files import check_outputs, result_path, run_inputs, run_outputs

    if not cfg.output:
        return None
    files = run_outputs(result_path(cfg.output, option="output"))
    check_outputs(files, run_inputs(cfg.dataset, public=cfg.public), overwrite=overwrite,
                  overwrite_hint="overwrite=True")
    return files


def _run_config(cfg: RunConfig, progress: bool | None, threads: IntLike | None,
                checkpoint: str | Path | None, resume: str | Path | None) -> RunResult:
    """:func:`run_config` without its warnings."""
    set_threads(threads)
    impl = get_method(cfg.method)  # fail on an unknown method or option before loading data
    options = impl.parse_options(cfg.options)
    check_before_data(cfg, impl, options)
    if cfg.engine != "simulator":
        return _run_on_flower(cfg, progress, None, checkpoint, resume)
    models = as_models(cfg.model)
    federation = federation_for(cfg, progress)
    return simulate(impl, federation, models, rounds=cfg.rounds, period=cfg.period,
                    seed=cfg.seed, eval_every=cfg.eval_every, progress=progress,
                    config=cfg.to_dict(), options=options,
                    insecure_reproducible_noise=cfg.insecure_reproducible_noise,
                    malicious=cfg.malicious, attack=cfg.poison,
                    participation=cfg.participation, dropout=cfg.dropout,
                    deadline=cfg.deadline, checkpoint=checkpoint, resume=resume,
                    device=cfg.device, precision=cfg.precision,
                    batch_clients=cfg.batch_clients, cuda_graphs=cfg.cuda_graphs,
                    offload=cfg.offload,
                    workers=cfg.workers)


def _run_on_flower(cfg: RunConfig, progress: bool | None,
                   on_round: Callable[[RoundRecord], None] | None,
                   checkpoint: str | Path | None = None,
                   resume: str | Path | None = None) -> RunResult:
    """``cfg`` on Flower's simulation engine (Ray); imported only for such runs."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.engines.flower import require_simulation

    if resume is not None:
        raise FedLabelsError(f"a run on engine {cfg.engine!r} cannot be resumed (its "
                             "client states live at its sites); run it again, or resume with "
                             "engine 'simulator'.")
    require_simulation()
    from fedlabels.engines.flower.simulation import run_on_ray

    del checkpoint  # the ServerApp checkpoints into the run's work directory
    return run_on_ray(cfg, progress=progress, on_round=on_round)


def resume(path: str | Path, *, rounds: IntLike | None = None, progress: bool | None = None,
           threads: IntLike | None = None, workers: IntLike | None = None,
           save: bool = True) -> RunResult:
    """Continue an interrupted run of :func:`run_config` (or ``fedlabels run``) from the
    checkpoint beside its result ``path`` (``X.json``, or ``X.checkpoint.npz`` itself: the
    checkpoint is that file and its journal ``X.checkpoint.journal``, needed together);
    ``rounds`` extends a finished run to that many rounds; ``workers`` replaces the run's
    (see :mod:`fedlabels.engines.workers`); ``progress`` and ``threads`` as in :func:`run`.
    The result equals the uninterrupted run's (wall-clock aside) and its
    ``provenance.resumed`` says from which round; the checkpoint keeps being updated; its
    caveats are warned as :func:`run`'s are.
    A run whose configuration names an ``output`` (which :func:`run_config` wrote) has its
    files beside the checkpoint (``X.json``, its rounds table and models) updated in place,
    as ``fedlabels resume`` does: it is the same run (``save=False``: not written).
    See :mod:`fedlabels.runs.checkpoint`."""
    from fedlabels.core.errors import FedLabelsError
    from fedlabels.runs.checkpoint import (
        checkpoint_path,
        load_checkpoint,
        refuse_finished,
        result_beside,
    )

    _check_watching(progress)
    from fedlabels.core.files import given_path
    from fedlabels.runs.config import checked_value
    from fedlabels.runs.spec import by_name

    params = by_name(RunConfig)  # checked as a RunConfig checks them, before any file is read
    rounds = None if rounds is None else checked_value(params["rounds"], rounds)
    workers = None if workers is None else checked_value(params["workers"], workers)
    file = checkpoint_path(given_path(path, "resume's path"))
    saved = load_checkpoint(file)
    if "alive_per_round" in (saved.meta.get("engine") or {}):  # a Flower ServerApp's
        raise FedLabelsError(
            f"{file} is the checkpoint of a Flower deployment; resume it with `fedlabels "
            "deploy local --resume` and the run's options, --workdir and --output (or, on "
            "separate machines, by running the app again with resume set: "
            "docs/deployment.md, 'Crash and resume').")
    refuse_finished(file, saved, rounds)
    _check_relative_models(saved.config.get("model"), saved.meta.get("directory"))
    try:
        cfg = RunConfig.from_mapping(saved.config)
    except (TypeError, FedLabelsError) as exc:
        if "module:" in str(saved.config.get("model")):  # your own network, by name
            raise FedLabelsError(f"cannot resume {file}: {str(exc).rstrip('.')}; make its "
                                 "module importable as when the run started (e.g. "
                                 "PYTHONPATH=.).") from None
        raise FedLabelsError(f"checkpoint {file} was not made from a run configuration "
                             f"({exc}); resume it with fedlabels.engines.simulate(..., "
                             "resume=PATH) and the same federation and models.") from None
    _check_relative_data(cfg.dataset, saved.meta.get("directory"), cfg.public)
    if rounds is not None:
        cfg = cfg.replace(rounds=rounds)
    if workers is not None:  # how it runs, not what: the result is the same
        cfg = cfg.replace(workers=workers)
    result = _run_config(cfg, progress, threads, None, file)
    _warn_caveats(result)
    if save and cfg.output:
        result.save(result_beside(file), overwrite=True)
    return result


def load_run(path: str | Path, *, models: bool = True,
             trust_modules: Sequence[str] = ()) -> RunResult:
    """A saved run: the result JSON at ``path`` (``X.json``, as ``fedlabels run`` or
    :meth:`RunResult.save` wrote it) with, unless ``models=False``, its clients' models and
    preprocessing from ``X.models.npz`` beside it, so that ``load_run(path).predict(new)``
    works as on the run's own result (loading the models file never runs code from it).
    The models file is read and its names and preprocessing checked now; its models are
    built (and their arrays checked: a NaN or a wrong shape is a one-line error naming the
    array) when first used, by ``predict``, ``predict_proba``, ``score``, ``save`` or
    ``client_models``, so reading a run for its figures or rounds does not build them.
    A run of your own network (``module:mynets:make_net``, ``fl.TorchModel``) rebuilds it
    by importing its module, which runs that code: only with ``trust_modules=["mynets"]``
    (else a one-line error naming the module)."""
    from fedlabels.core.files import given_path
    from fedlabels.data.preprocessing import Preprocessing
    from fedlabels.results import load_result
    from fedlabels.results.models_file import open_models

    path = given_path(path, "load_run's path")
    result = load_result(path)
    if models:
        payload, decode = open_models(path, trust_modules)
        result.decode_models_on_use(decode)
        result.feature_names = payload.get("feature_names") or []
        saved = payload.get("preprocessing")
        result.preprocessing = None if saved is None else Preprocessing.from_dict(saved)
    return result


def plot(results: RunResult | str | Path | Sequence[RunResult | str | Path],
         path: str | Path, *, title: str | None = None, overwrite: bool = False,
         metric: str = "accuracy") -> Path:
    """Draw what ``fedlabels plot`` draws (mean client accuracy per round, one line a run
    or, for runs that differ only in their seed, a configuration's mean over seeds in a
    min–max band, local-only and
    centralized as reference lines, the majority-class baseline or, for regression, the
    training-mean baseline; docs/usage.md, 'Plots') for
    results of :func:`run` or saved result files, to ``path`` (the format from its suffix:
    ``.png``, ``.pdf``, ``.svg``, ...), headed ``title`` (``None``: the runs' shared dataset
    and what is drawn). An existing file is replaced only with ``overwrite=True``.
    ``metric``: accuracy, the one metric a round records; another of :func:`report`'s is
    refused (it is computed once, on the final models). Returns the path."""
    from fedlabels.reporting.plots import write_plot

    return write_plot(_results_given(results), Path(path).expanduser(), title=title,
                      overwrite=overwrite, overwrite_hint="overwrite=True", metric=metric)


def report(results: RunResult | str | Path | Sequence[RunResult | str | Path],
           output: str | Path, *, metric: str = "accuracy",
           overwrite: bool = False) -> dict[str, Path]:
    """Write what ``fedlabels report`` writes (docs/usage.md, 'fedlabels report'): for
    results of :func:`run` or saved result files, the page ``output`` (``X.html``, its
    summary beside it as ``X.summary.csv``; a name without suffix: a directory for
    ``report.html`` and ``summary.csv``). ``metric`` is the headline column. Existing files
    are replaced only with ``overwrite=True``. The page's warnings (near chance, below the
    local-only reference, ...) are also warned as
    :class:`~fedlabels.core.errors.RunCaveatWarning`. Returns the files written by what
    they are (``report``, ``summary table``)."""
    import warnings

    from fedlabels.core.clinical import SCALAR_METRICS
    from fedlabels.core.errors import (
        FedLabelsError,
        RunCaveatWarning,
        did_you_mean,
        user_stacklevel,
    )
    from fedlabels.reporting.report import write_report

    if metric not in SCALAR_METRICS:
        raise FedLabelsError(f"metric {metric!r} is not one of {', '.join(SCALAR_METRICS)}"
                             f"{did_you_mean(str(metric), SCALAR_METRICS)}.")
    outputs, warned = write_report(_results_given(results), output, overwrite=overwrite,
                                   metric=metric, overwrite_hint="overwrite=True")
    for configuration, line in warned:
        warnings.warn(RunCaveatWarning(f"{configuration}: {line}"),
                      stacklevel=user_stacklevel())
    return outputs


def _results_given(results: Any) -> list[RunResult | str | Path]:
    """One result or file, or a sequence of them, as a list; anything else is one line."""
    from fedlabels.core.errors import FedLabelsError

    items = [results] if isinstance(results, RunResult | str | Path) else results
    try:
        given = list(items)
    except TypeError:
        given = [items]
    bad = next((r for r in given if not isinstance(r, RunResult | str | Path)), None)
    if bad is not None:
        raise FedLabelsError(f"give results of fl.run or result JSON files (paths), got "
                             f"{type(bad).__name__}.")
    if not given:
        raise FedLabelsError("no results given; pass one or more results of fl.run or "
                             "result JSON files.")
    return given


def _refuse_lost(what: str, path: str, started_in: str | None) -> None:
    """A one-line error when ``path`` (this run's ``what``) is relative to where the run
    started, elsewhere, and not found here: say where to resume from."""
    from fedlabels.core.errors import FedLabelsError

    given = Path(path).expanduser()
    if given.is_absolute() or given.exists() or started_in is None \
            or Path(started_in).resolve() == Path.cwd().resolve():
        return
    raise FedLabelsError(f"this run's {what} is a path relative to {started_in}, where it "
                         "started; resume it from there (cd there first).")


def _model_record(model: Any) -> str:
    """A run's ``model`` as its result's configuration records it: a spec string as given,
    and a :class:`ModelSpec` as its string, aliases resolved (not its dataclass repr);
    your own network (``fl.TorchModel``) as the spec that names it, not its repr (which
    named no module and held a memory address); another estimator by its repr, on one line
    (scikit-learn breaks a long one, a Pipeline's, over lines indented by 16 spaces, which
    legends and report rows showed as such)."""
    import re

    from fedlabels.learners.model_spec import ModelSpec
    from fedlabels.learners.specs import checked_spec

    def one(item: Any) -> str:
        spec = getattr(item, "spec_text", None)
        return item if isinstance(item, str) else str(checked_spec(item)) \
            if isinstance(item, ModelSpec) \
            else spec() if callable(spec) else re.sub(r"\s*\n\s*", " ", repr(item))

    if isinstance(model, list | tuple):
        return ",".join(one(item) for item in model)
    return one(model)


def _check_relative_models(model: Any, started_in: str | None) -> None:
    """A run's ``hf(model_dir=...)`` named by a path relative to where it started: resumed
    elsewhere, say where to resume from (before the spec's check finds no directory)."""
    import re

    for found in re.finditer(r"model_dir\s*=\s*([^,)]+)", str(model or "")):
        model_dir = found.group(1).strip()
        _refuse_lost(f"model_dir {model_dir}", model_dir, started_in)


def _check_relative_data(dataset: str, started_in: str | None,
                         public: str | None = None) -> None:
    """A run's own data (``csv:``, ``imagefolder:``, a ``public`` set) named by a path
    relative to where the run started: resumed elsewhere, that path names nothing; say where
    to resume from."""
    if public is not None:
        _refuse_lost(f"public set {public}", public, started_in)
    kind, _, rest = dataset.partition(":")
    if kind not in ("csv", "imagefolder") or not rest:
        return
    from fedlabels.core.files import csv_parts

    _refuse_lost(f"dataset {dataset}", csv_parts(dataset)[0] if kind == "csv" else rest,
                 started_in)


__all__ = ["load_federation", "load_run", "plot", "privacy_plan", "report", "resume", "run",
           "run_config"]
