"""A bound on what an ``.npz`` archive inflates to, checked before it is read.

An ``.npz`` is a zip; ``np.load`` inflates each member whole. A deflated member of zeros
inflates about a thousand-fold, so a 4 MB file handed over as a models file made
``inspect`` allocate 4 GB, and a larger one would exhaust the machine's memory. The sizes
the zip declares bound what reading inflates (a member is cut off at its declared size),
so they are checked first: an archive may inflate to :data:`RATIO` times its size, plus
:data:`SLACK`; the files fedlabels writes stay far below (a forest's models file: 6 times,
nearest neighbours on constant data: 220 times, at 10 MB).
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

from fedlabels.core.errors import FedLabelsError

#: an archive may inflate to RATIO times its own size ...
RATIO = 64
#: ... plus this many bytes
SLACK = 256 << 20


def check_inflated_size(path: str | Path, what: str, data: bytes | None = None) -> None:
    """Refuse (one line) the ``.npz`` at ``path`` (the ``what``; ``data``: its bytes, read
    already) if its members inflate to more than :data:`RATIO` times its size plus
    :data:`SLACK`. Not a zip, or unreadable: nothing to say here, ``np.load`` reports it."""
    try:
        size = os.path.getsize(path) if data is None else len(data)
        with zipfile.ZipFile(path if data is None else io.BytesIO(data)) as zf:
            inflated = sum(info.file_size for info in zf.infolist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return
    if inflated > RATIO * size + SLACK:
        raise FedLabelsError(f"refusing {what} {path}: its {size:,} bytes inflate to "
                             f"{inflated:,} (more than {RATIO} times its size), which no "
                             "file fedlabels writes does; it is damaged or forged.")


__all__ = ["RATIO", "SLACK", "check_inflated_size"]
