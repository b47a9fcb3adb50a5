"""Torch threads per training process: one by default.

The models here are small (an MLP on a few hundred rows per client, minibatches of 64): a
second intra-op thread gains little on a quiet machine and, on a busy one, makes every step
wait for a core (measured on 2 cores under load: 2 threads 4-12x slower than 1). So each
process that trains uses ``FEDLABELS_THREADS`` threads, default 1; the CLI's ``--threads N``
and ``fedlabels.run(threads=N)`` set it. It is a process setting, like
``torch.set_num_threads``: it is kept in the environment, so processes started from this one
(the SuperNodes of ``fedlabels deploy local``) inherit it, and it is not part of a run's
configuration (results record it as ``extra["torch_threads"]``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from fedlabels.core.errors import FedLabelsError

if TYPE_CHECKING:
    import numpy as np

ENV_VAR = "FEDLABELS_THREADS"
#: big-integer threads of the secure protocols (fedlabels.secure.parallel)
CRYPTO_ENV_VAR = "FEDLABELS_CRYPTO_THREADS"
DEFAULT_THREADS = 1


def _checked(value: object, where: str) -> int:
    try:
        n = int(str(value))
    except ValueError:
        n = 0
    if n < 1 or str(n) != str(value).strip():
        raise FedLabelsError(f"{where} must be an integer >= 1, got {value!r}.")
    return n


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def crypto_threads() -> int:
    """Threads for big-integer work (:mod:`fedlabels.secure.parallel`):
    ``FEDLABELS_CRYPTO_THREADS``, else the usable cores."""
    raw = os.environ.get(CRYPTO_ENV_VAR)
    return available_cores() if raw is None else _checked(raw, CRYPTO_ENV_VAR)


def torch_threads() -> int:
    """The threads a training process uses: ``FEDLABELS_THREADS``, else 1."""
    raw = os.environ.get(ENV_VAR)
    return DEFAULT_THREADS if raw is None else _checked(raw, ENV_VAR)


def set_threads(n: int | np.integer[Any] | None) -> int:
    """Set this process's (and its children's) torch threads; ``None`` keeps the setting.

    Applied to torch at once if it is loaded, otherwise when a run builds its learners.
    Returns the thread count in effect.
    """
    if n is not None:
        os.environ[ENV_VAR] = str(_checked(n, "threads"))
    if "torch" in sys.modules:
        return apply_torch_threads()
    return torch_threads()


def apply_torch_threads() -> int:
    """Give torch :func:`torch_threads` intra-op threads (imports torch); returns the count."""
    import torch

    n = torch_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
