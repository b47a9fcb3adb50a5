"""The federation a run configuration describes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedlabels.core.verbosity import progress_asked
from fedlabels.data import Federation, load_federation
from fedlabels.runs.config import RunConfig

if TYPE_CHECKING:
    from fedlabels.method import Method, MethodOptions


def check_before_data(cfg: RunConfig, method: Method, options: MethodOptions) -> None:
    """What of a run its parameters decide without its data, checked before any data loads
    (an image folder's decoding took minutes before a refusal): the options (parsed by the
    caller) and the method's client count under them (:meth:`Method.check_clients`). What
    needs the data stays where the data is: the classes and features, the learners
    (``Method.validate``), |U| (queries), the participation check."""
    from fedlabels.method import Settings

    task = cfg.task
    if task is None:  # a csv: table or an image folder is classification unless --task says
        from fedlabels.data.registry import get_dataset

        task = "classification" if cfg.dataset.startswith(("csv:", "imagefolder:")) else \
            get_dataset(cfg.dataset).task
    method.check_clients(cfg.clients, Settings(
        n_classes=0, n_clients=cfg.clients, rounds=cfg.rounds, period=cfg.period,
        options=options, task=task))


def federation_for(cfg: RunConfig, progress: bool | None = None) -> Federation:
    """The federation a :class:`RunConfig` describes; ``progress`` as the run's (decoding
    many images says how far it is, or not: :func:`fedlabels.core.verbosity.lines_shown`)."""
    with progress_asked(progress):
        return load_federation(
            cfg.dataset, clients=cfg.clients, unlabeled=cfg.unlabeled, private=cfg.private,
            private_per_client=cfg.private_per_client, test=cfg.test,
            partition=cfg.partition, seed=cfg.seed, sep=cfg.sep, features=cfg.features,
            drop=cfg.drop, text_column=cfg.text_column, task=cfg.task,
            target_range=cfg.target_range, unlabeled_shift=cfg.unlabeled_shift,
            public_pca=cfg.public_pca, image_size=cfg.image_size,
            image_column=cfg.image_column, image_mode=cfg.image_mode,
            image_peak=cfg.image_peak, public=cfg.public, missing=cfg.missing,
            classes=cfg.classes)
