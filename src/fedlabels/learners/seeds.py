"""A learner's ``random_state`` as scikit-learn's glossary takes it, and the seed of one fit.

``None``, an int in [0, 2**32), a :class:`numpy.random.RandomState` (and a
:class:`numpy.random.Generator`). An instance is drawn from once per fit, as
``check_random_state`` hands it to a scikit-learn estimator, so two fits with one instance
differ and a clone (a copy of the instance in its state) repeats the original's next fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils import check_random_state

from fedlabels.core.errors import FedLabelsError
from fedlabels.learners.model_spec import is_integer

RandomStateLike = int | np.random.RandomState | np.random.Generator | None
_DRAW = int(np.iinfo(np.int32).max)  # the bound scikit-learn's estimators draw seeds below


def check_random_state_param(value: Any) -> None:
    """Refuse, in one line, a ``random_state`` scikit-learn would refuse (a Generator
    allowed)."""
    if value is None or isinstance(value, np.random.RandomState | np.random.Generator):
        return
    if not is_integer(value) or not 0 <= int(value) < 2**32:
        raise FedLabelsError(
            f"random_state must be None, an integer in [0, 2**32), a numpy RandomState or "
            f"Generator, which seeds the weights and minibatches, got {value!r}.")


def fit_seed(random_state: Any) -> int:
    """The seed of a fit: an int itself (a fit repeats); ``None`` a draw from numpy's
    global generator (``np.random.seed`` repeats it); a RandomState or Generator one draw
    from it. A run always passes each client its int seed derived from the run seed."""
    check_random_state_param(random_state)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(_DRAW))
    if random_state is None or isinstance(random_state, np.random.RandomState):
        return int(check_random_state(random_state).randint(_DRAW))
    return int(random_state)
