"""``fedlabels deploy resume``: a deployed run's app, written again to resume it.

A ServerApp that crashed (or a SuperLink that died) leaves its checkpoint beside the run's
result; a new Flower run of the same app with ``resume`` set in its spec continues from it.
This writes that app from the one that was submitted (the same spec, ``resume`` true), after
:func:`check_resumable` has refused a checkpoint that is missing, finished, or of another
run. Nothing else is written: the sites keep their files, keys and state, and no data set is
loaded. This module does not import Flower.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fedlabels.core.errors import FedLabelsError
from fedlabels.engines.flower.prepare import write_app
from fedlabels.engines.flower.spec import RUN_CONFIG_KEY, DeploySpec, deploy_plan


@dataclass(frozen=True)
class ResumedApp:
    """The app written by :func:`write_resumed_app`, and where its run stands."""

    app_dir: Path
    spec: DeploySpec
    checkpoint: Path
    rounds_done: int


def read_app_spec(app_dir: str | Path) -> DeploySpec:
    """The spec of the app in ``app_dir`` (its ``pyproject.toml``, written by ``deploy
    prepare``), refused in one line where there is none."""
    path = Path(app_dir) / "pyproject.toml"
    try:
        config = tomllib.loads(path.read_text())["tool"]["flwr"]["app"]["config"]
    except OSError:
        raise FedLabelsError(f"{app_dir} holds no Flower app ({path} cannot be read); give "
                             "the app folder `deploy prepare` wrote (<out-dir>/app).") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        raise FedLabelsError(f"{path} is not a Flower app's pyproject.toml (no "
                             "[tool.flwr.app.config]); give the app folder `deploy prepare` "
                             "wrote (<out-dir>/app).") from None
    try:
        return DeploySpec.from_run_config(config)
    except (ValueError, TypeError) as exc:  # a JSON string edited by hand
        raise FedLabelsError(f"{path}: its {RUN_CONFIG_KEY!r} entry is not a fedlabels run "
                             f"spec ({type(exc).__name__}); write the app again with "
                             "`fedlabels deploy prepare`.") from None


def check_resumable(spec: DeploySpec, federation: Mapping[str, Any] | None = None) -> int:
    """Refuse, in one line, to resume ``spec``'s run from a checkpoint that is missing, of a
    finished run, or of another run (method, options, seed, models, sites, data: what the
    ServerApp would refuse once every process had started); the rounds it holds.
    ``federation``: the run's federation summary (default: the spec's)."""
    from fedlabels.runs.checkpoint import (
        checkpoint_path,
        load_checkpoint,
        refuse_another_run,
        refuse_finished,
    )

    if not spec.output:
        raise FedLabelsError("this app writes no result, so its run left no checkpoint to "
                             "resume from; start a new run.")
    path = checkpoint_path(spec.output)
    if not path.is_file():
        raise FedLabelsError(f"cannot resume: there is no checkpoint {path} beside the app's "
                             "result (the ServerApp writes one after every completed round; "
                             "a run that completed none starts afresh).")
    saved = load_checkpoint(path)
    refuse_finished(path, saved, None)
    fed = dict(spec.federation() if federation is None else federation)
    try:
        n_classes, n_features = int(fed["n_classes"]), int(fed["n_features"])
    except (KeyError, TypeError, ValueError):
        raise FedLabelsError("the app's spec has no federation summary (n_classes, "
                             "n_features); write the app again with this version's `fedlabels "
                             "deploy prepare`.") from None
    plan = deploy_plan(spec.config, n_classes, n_features, fed.get("image_shape"))
    refuse_another_run(saved, spec.run_identity(plan))
    return len(saved.records)


def write_resumed_app(app_dir: str | Path, out_dir: str | Path) -> ResumedApp:
    """The app of ``app_dir`` with ``resume`` set, written to ``out_dir`` once its checkpoint
    is checked (the caller checks ``out_dir`` may be written)."""
    from fedlabels.runs.checkpoint import checkpoint_path

    spec = read_app_spec(app_dir)
    done = check_resumable(spec)
    resumed = replace(spec, resume=True)
    written = write_app(Path(out_dir), resumed)
    return ResumedApp(written, resumed, checkpoint_path(spec.output), done)


def describe(resumed: ResumedApp) -> list[str]:
    """What the operator reads: where the app is, where the run stands, what to run."""
    return [f"wrote the resumed app to {resumed.app_dir}: it continues "
            f"{resumed.spec.output} after round {resumed.rounds_done} of "
            f"{resumed.spec.run.get('rounds')} "
            f"(checkpoint {resumed.checkpoint})",
            "  the sites keep their node configs: each restores its state from its "
            "state-dir",
            "  first stop the interrupted run if `flwr ls <connection>` still lists it "
            "running: flwr stop <run-id> <connection>",
            f"then: flwr run {resumed.app_dir} <connection> --stream"]
