"""Big-integer work on threads: gmpy2 can release the GIL, so one process uses every core.

Paillier SecureHamming is a long list of independent big-integer operations (encryptions,
subset products, re-randomisations, decryptions). :func:`map_chunks` runs them in chunks on
:func:`crypto_threads` threads with gmpy2's ``allow_release_gil``: a multiplication modulo
N² or a batch of powers then runs outside the GIL. In the simulator's worker processes this
also evens out an uneven split of clients (3 + 2 on 2 workers): the threads of the busier
worker take the core the other one leaves idle.

Callers draw their secret randomness *before*, on the calling thread and in a fixed order,
so a reproducible source gives the same ciphertexts whatever the thread count; the threads
only compute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import gmpy2

from fedlabels.core.threads import CRYPTO_ENV_VAR, crypto_threads
from fedlabels.core.user_frames import carry_caller

ENV_VAR = CRYPTO_ENV_VAR
__all__ = ["ENV_VAR", "crypto_threads", "map_chunks"]

T = TypeVar("T")
R = TypeVar("R")


def map_chunks(fn: Callable[[Sequence[T]], list[R]], items: Sequence[T],
               chunk: int) -> list[R]:
    """``fn`` over consecutive chunks of ``items`` (at most ``chunk`` each) on
    :func:`crypto_threads` threads; the results concatenated in the order of ``items``."""
    parts = [items[i:i + chunk] for i in range(0, len(items), max(1, chunk))]
    threads = min(crypto_threads(), len(parts))
    if threads <= 1:
        return [r for part in parts for r in fn(part)]

    def run(part: Sequence[T]) -> list[R]:
        with gmpy2.context(gmpy2.get_context(), allow_release_gil=True):
            return fn(part)

    with ThreadPoolExecutor(threads, thread_name_prefix="fedlabels-crypto") as pool:
        return [r for out in pool.map(carry_caller(run), parts) for r in out]
