"""The federation a run configuration describes."""

from __future__ import annotations

from fedlabels.core.verbosity import progress_asked
from fedlabels.data import Federation, load_federation
from fedlabels.runs.config import RunConfig


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
