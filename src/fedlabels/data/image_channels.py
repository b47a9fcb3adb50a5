"""The channels of images read without a declared ``image_mode``: U's files decide.

Every party is told the channels (``image_shape``). Undeclared, they are grey when every
file of U is stored grey (its header's mode, not its pixels), else RGB; U is public, so the
choice depends on no client's or test image. The files are first read as all of them ask
(:func:`~fedlabels.data.images.read_images`), then again in U's channels where those differ
(:meth:`ImageRows.for_public`): the rows equal those of the same channels declared. A
colour file of a client or the test set read grey is said once, with the count of such
files and ``--image-mode``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedlabels.data.images import Images, pixel_names, unit_float32
from fedlabels.data.lazy_rows import LazyRows


class ImageRows(LazyRows):
    """Pixel rows read without a declared ``image_mode``, with whether each file's format
    is colour and ``read(mode)``, the same files read in ``mode`` (``L``, ``RGB``)."""

    def __init__(self, images: Images, read: Callable[[str], Images],
                 table: Any = None) -> None:
        super().__init__(images.pixels, unit_float32, table=table,
                         names=pixel_names(images.shape))
        self.image_shape = images.shape
        self.colour = np.zeros(len(images.pixels), dtype=bool) if images.colour is None \
            else np.asarray(images.colour, dtype=bool)
        self.read = read

    def in_mode(self, mode: str) -> ImageRows:
        """These files' rows in ``mode``: themselves where they are in it, else read again
        (colour files read grey said in one warning)."""
        if (mode == "L") == (self.image_shape[0] == 1):
            return self
        if mode == "L" and self.colour.any():
            _warn_read_grey(int(self.colour.sum()))
        return ImageRows(self.read(mode), self.read, self.table)

    def for_public(self, public_rows: np.ndarray) -> ImageRows:
        """These rows in U's channels: grey where every file of U (``public_rows``) is
        stored grey, else RGB."""
        return self.in_mode("RGB" if self.colour[public_rows].any() else "L")

    def mode(self) -> str:
        """Pillow's mode of these rows: ``L`` or ``RGB``."""
        return "L" if self.image_shape[0] == 1 else "RGB"


def _warn_read_grey(count: int) -> None:
    import warnings

    from fedlabels.core.errors import FedLabelsWarning, user_stacklevel

    warnings.warn(FedLabelsWarning(
        f"{count} image file(s) of the clients or the test set are stored in colour, but "
        "every file of U is grey: they are read grey, the channels every party is told "
        "(decided by U's files alone); declare --image-mode rgb (image_mode) to read every "
        "image in colour."), stacklevel=user_stacklevel())
