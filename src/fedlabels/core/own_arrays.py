"""Arrays made for their caller alone, so a caller that needs arrays of its own need not
copy them again.

A learner's ``state_dict`` copies its tensors into new arrays that nothing else holds
(:func:`made_for_caller`); a checkpoint taken while the next round trains copies a role's
live arrays but keeps these as they are (:func:`~fedlabels.method.state.own_copies`). A
caller that keeps such an array must not change it in place. The arrays are held weakly:
one that is no longer used is forgotten with it.
"""

from __future__ import annotations

import weakref

import numpy as np

_MADE: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def made_for_caller(array: np.ndarray) -> np.ndarray:
    """``array``, noted as new and held by nothing but the caller it is returned to."""
    _MADE[id(array)] = array
    return array


def is_made_for_caller(array: np.ndarray) -> bool:
    """Whether ``array`` is one :func:`made_for_caller` returned (and it is alive)."""
    return _MADE.get(id(array)) is array
